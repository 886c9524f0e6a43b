/* libFuzzer harness: resume states (resume_open, resume_find and
 * resume_read_at over every section, resume_load). Properties checked
 * beyond "no crash, no undefined behaviour, no leak":
 *  - every refusal leaves a message;
 *  - an accepted file (its header checksum right) has a section table
 *    whose sections tile the rest of the file exactly, in table order;
 *  - resume_find finds each section by its name, dtype and count, or
 *    refuses it with a message (its data checksum wrong), and refuses
 *    another count;
 *  - a section read whole is the file's bytes, or is refused with a
 *    message (a non-finite value in an fp32 or bf16 section);
 *  - ranges outside a section are refused. */
#include "../../train/ckpt/checkpoint.h"
#include "../ckpt_whole.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The version-2 layout (train/ckpt/ckpt_state_format.c): header, section table, data. */
enum {
    HEADER_BYTES = 4 + 4 + 4 + 5 * 8 + 6 * 4 + 4 + DATA_PATTERN_LEN + 2 * 8 + 4 + 4,
    ENTRY_BYTES = STATE_NAME_LEN + 4 + 8 + 4
};

struct entry {
    char name[STATE_NAME_LEN + 1];
    enum dtype dtype;
    uint64_t numel;
};

static struct entry entry_at(const uint8_t *data, int i) {
    const uint8_t *p = data + HEADER_BYTES + (size_t)i * ENTRY_BYTES;
    struct entry e;
    memcpy(e.name, p, STATE_NAME_LEN);
    e.name[STATE_NAME_LEN] = '\0';
    uint32_t code;
    memcpy(&code, p + STATE_NAME_LEN, 4);
    memcpy(&e.numel, p + STATE_NAME_LEN + 4, 8);
    e.dtype = code == 1 ? DTYPE_BF16 : code == 2 ? DTYPE_U8 : DTYPE_FP32;
    return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    struct resume_reader r;
    struct resume_meta meta;
    char err[CKPT_ERR_LEN];
    memset(err, 'x', sizeof err);
    if (resume_open(&r, path, &meta, err) != 0) {
        fuzz_check_message(err, sizeof err);
        FUZZ_CHECK(r.f == NULL && r.sections == NULL && r.n == 0);
        return 0;
    }
    size_t pos = HEADER_BYTES + (size_t)r.n * ENTRY_BYTES;
    FUZZ_CHECK(pos <= size);
    for (int i = 0; i < r.n; i++) {
        struct entry e = entry_at(data, i);
        size_t esz = dtype_size(e.dtype);
        FUZZ_CHECK(e.numel <= (size - pos) / esz);
        memset(err, 'x', sizeof err);
        int found = resume_find(&r, e.name, e.dtype, (size_t)e.numel, err);
        if (found < 0) { /* its data checksum is wrong */
            fuzz_check_message(err, sizeof err);
            pos += (size_t)e.numel * esz;
            continue;
        }
        FUZZ_CHECK(found == i); /* names are distinct in an accepted file */
        memset(err, 'x', sizeof err);
        FUZZ_CHECK(resume_find(&r, e.name, e.dtype, (size_t)e.numel + 1, err) < 0);
        fuzz_check_message(err, sizeof err);

        uint8_t *buf = malloc((size_t)e.numel * esz + 1);
        FUZZ_CHECK(buf != NULL);
        memset(err, 'x', sizeof err);
        if (resume_read_at(&r, i, 0, (size_t)e.numel, buf, err) == 0) {
            FUZZ_CHECK(memcmp(buf, data + pos, (size_t)e.numel * esz) == 0);
        } else {
            fuzz_check_message(err, sizeof err);
            FUZZ_CHECK(strstr(err, "non-finite") != NULL);
        }
        memset(err, 'x', sizeof err);
        FUZZ_CHECK(resume_read_at(&r, i, (size_t)e.numel, 1, buf, err) != 0);
        fuzz_check_message(err, sizeof err);
        FUZZ_CHECK(resume_read_at(&r, i, 1, SIZE_MAX, buf, err) != 0);
        free(buf);
        pos += (size_t)e.numel * esz;
    }
    FUZZ_CHECK(pos == size);
    int n_sections = r.n;
    FUZZ_CHECK(resume_read_at(&r, r.n, 0, 0, NULL, err) != 0);
    FUZZ_CHECK(resume_read_at(&r, -1, 0, 0, NULL, err) != 0);
    resume_close(&r);
    resume_close(&r); /* safe twice */

    /* the whole-array path: the first section, by name (none when empty) */
    struct state_section want[1];
    int n = 0;
    if (n_sections > 0) {
        struct entry e = entry_at(data, 0);
        memcpy(want[0].name, e.name, STATE_NAME_LEN);
        want[0].dtype = e.dtype;
        want[0].numel = (size_t)e.numel;
        want[0].data = malloc((size_t)e.numel * dtype_size(e.dtype) + 1);
        FUZZ_CHECK(want[0].data != NULL);
        n = 1;
    }
    struct resume_meta again;
    memset(err, 'x', sizeof err);
    if (resume_load(path, &again, want, n, err) != 0) {
        fuzz_check_message(err, sizeof err);
    } else {
        FUZZ_CHECK(again.step == meta.step && again.seed == meta.seed && again.fingerprint == meta.fingerprint);
        FUZZ_CHECK(again.data_epoch == meta.data_epoch && again.data_cursor == meta.data_cursor);
        FUZZ_CHECK(memcmp(&again.shape, &meta.shape, sizeof meta.shape) == 0);
        FUZZ_CHECK(n == 0 || memcmp(want[0].data, data + HEADER_BYTES + (size_t)n_sections * ENTRY_BYTES,
                                    want[0].numel * dtype_size(want[0].dtype)) == 0);
    }
    if (n) free(want[0].data);
    return 0;
}
