/* libFuzzer harness: resume states (resume_open, resume_find and
 * resume_read_at over every section, resume_load). Properties checked
 * beyond "no crash, no undefined behaviour, no leak":
 *  - every refusal leaves a message;
 *  - an accepted file's sections tile it exactly: each section's data,
 *    read whole, is the file's bytes right after its 44-byte header, and
 *    the last one ends at the end of the file;
 *  - resume_find finds each section by its name, dtype and count (the
 *    first of that name) and refuses another count;
 *  - ranges outside a section are refused. */
#include "checkpoint.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER_BYTES = 72, SECTION_HEAD_BYTES = STATE_NAME_LEN + 4 + 8 };

/* The section's name as the file holds it (32 bytes, NUL-padded). */
static void name_at(const uint8_t *head, char name[STATE_NAME_LEN + 1]) {
    memcpy(name, head, STATE_NAME_LEN);
    name[STATE_NAME_LEN] = '\0';
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
    size_t pos = HEADER_BYTES;
    for (int i = 0; i < r.n; i++) {
        FUZZ_CHECK(pos + SECTION_HEAD_BYTES <= size);
        char name[STATE_NAME_LEN + 1];
        name_at(data + pos, name);
        uint32_t code;
        uint64_t numel;
        memcpy(&code, data + pos + STATE_NAME_LEN, 4);
        memcpy(&numel, data + pos + STATE_NAME_LEN + 4, 8);
        enum dtype dt = code == 1 ? DTYPE_BF16 : DTYPE_FP32;
        size_t esz = dtype_size(dt);
        pos += SECTION_HEAD_BYTES;
        FUZZ_CHECK(numel <= (size - pos) / esz);

        int found = resume_find(&r, name, dt, (size_t)numel, err);
        FUZZ_CHECK(found == i); /* names are distinct in an accepted file */
        memset(err, 'x', sizeof err);
        FUZZ_CHECK(resume_find(&r, name, dt, (size_t)numel + 1, err) < 0);
        fuzz_check_message(err, sizeof err);

        uint8_t *buf = malloc((size_t)numel * esz + 1);
        FUZZ_CHECK(buf != NULL);
        FUZZ_CHECK(resume_read_at(&r, i, 0, (size_t)numel, buf, err) == 0);
        FUZZ_CHECK(memcmp(buf, data + pos, (size_t)numel * esz) == 0);
        FUZZ_CHECK(resume_read_at(&r, i, (size_t)numel / 2, (size_t)(numel - numel / 2), buf, err) == 0);
        memset(err, 'x', sizeof err);
        FUZZ_CHECK(resume_read_at(&r, i, (size_t)numel, 1, buf, err) != 0);
        fuzz_check_message(err, sizeof err);
        FUZZ_CHECK(resume_read_at(&r, i, 1, SIZE_MAX, buf, err) != 0);
        free(buf);
        pos += (size_t)numel * esz;
    }
    FUZZ_CHECK(pos == size);
    FUZZ_CHECK(resume_read_at(&r, r.n, 0, 0, NULL, err) != 0);
    FUZZ_CHECK(resume_read_at(&r, -1, 0, 0, NULL, err) != 0);
    resume_close(&r);
    resume_close(&r); /* safe twice */

    /* the whole-array path: the first section, by name (none when empty) */
    struct state_section want[1];
    int n = 0;
    if (r.n > 0) {
        const uint8_t *head = data + HEADER_BYTES;
        uint32_t code;
        uint64_t numel;
        memcpy(want[0].name, head, STATE_NAME_LEN);
        memcpy(&code, head + STATE_NAME_LEN, 4);
        memcpy(&numel, head + STATE_NAME_LEN + 4, 8);
        want[0].dtype = code == 1 ? DTYPE_BF16 : DTYPE_FP32;
        want[0].numel = (size_t)numel;
        want[0].data = malloc((size_t)numel * dtype_size(want[0].dtype) + 1);
        FUZZ_CHECK(want[0].data != NULL);
        n = 1;
    }
    struct resume_meta again;
    memset(err, 'x', sizeof err);
    /* a first name of 32 characters (no NUL) is refused as a name */
    if (resume_load(path, &again, want, n, err) != 0) {
        fuzz_check_message(err, sizeof err);
    } else {
        FUZZ_CHECK(again.step == meta.step && again.seed == meta.seed && again.fingerprint == meta.fingerprint);
        FUZZ_CHECK(again.data_epoch == meta.data_epoch && again.data_cursor == meta.data_cursor);
        FUZZ_CHECK(memcmp(&again.shape, &meta.shape, sizeof meta.shape) == 0);
        FUZZ_CHECK(n == 0 || memcmp(want[0].data, data + HEADER_BYTES + SECTION_HEAD_BYTES,
                                    want[0].numel * dtype_size(want[0].dtype)) == 0);
    }
    if (n) free(want[0].data);
    return 0;
}
