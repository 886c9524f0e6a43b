/* make cuda-test's stamp: its format, the verdict on a run, and how a
 * process finds its own build and stamp (model/gpu_stamp.h). Everything
 * above the file functions is pure, for tests/test_gpu_stamp.c. */
#include "gpu_stamp.h"

#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    UUID_BYTES = 16,
    ELF_NOTES_MAX = 1 << 16,    /* a PT_NOTE segment read whole; a binary's are a few hundred bytes */
    ELF_NOTE_ALIGN_MIN = 4,
};

/* The next space-separated token of *p into out; -1 when there is none or
 * it does not fit. */
static int next_token(const char **p, char *out, size_t out_len) {
    const char *s = *p;
    while (*s == ' ') s++;
    size_t n = strcspn(s, " ");
    if (n == 0 || n >= out_len) return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = s + n;
    return 0;
}

static bool is_hex(const char *s) {
    return *s && strspn(s, "0123456789abcdef") == strlen(s);
}

static int parse_gpu_line(const char *rest, struct gpu_stamp_gpu *g) {
    char tests[GPU_STAMP_LINE_LEN];
    if (next_token(&rest, g->uuid, sizeof g->uuid) != 0 || next_token(&rest, tests, sizeof tests) != 0 ||
        next_token(&rest, g->utc, sizeof g->utc) != 0)
        return -1;
    char *end = NULL;
    long n = strtol(tests, &end, 10);
    if (*end || n <= 0 || n > INT_MAX) return -1;
    g->tests = (int)n;
    while (*rest == ' ') rest++;
    if (!*rest || strlen(rest) >= sizeof g->name) return -1;
    snprintf(g->name, sizeof g->name, "%s", rest);
    return 0;
}

/* One line (no newline) into s; -1 with the reason in why. */
static int parse_line(const char *line, struct gpu_stamp *s, char *why, size_t why_len) {
    if (!*line || *line == '#') return 0;
    if (strncmp(line, "build ", strlen("build ")) == 0) {
        const char *rest = line + strlen("build ");
        if (*s->build_id || next_token(&rest, s->build_id, sizeof s->build_id) != 0 || *rest ||
            !is_hex(s->build_id)) {
            snprintf(why, why_len, "a second or malformed build line");
            return -1;
        }
        return 0;
    }
    if (strncmp(line, "gpu ", strlen("gpu ")) == 0) {
        if (s->gpus == GPU_STAMP_MAX_GPUS) {
            snprintf(why, why_len, "more than %d gpu lines", GPU_STAMP_MAX_GPUS);
            return -1;
        }
        if (parse_gpu_line(line + strlen("gpu "), &s->gpu[s->gpus]) != 0) {
            snprintf(why, why_len, "a malformed gpu line (gpu UUID TESTS TIME NAME)");
            return -1;
        }
        s->gpus++;
        return 0;
    }
    snprintf(why, why_len, "an unknown line '%.40s'", line);
    return -1;
}

int gpu_stamp_parse(const char *text, struct gpu_stamp *s, char *why, size_t why_len) {
    *s = (struct gpu_stamp){0};
    char line[GPU_STAMP_LINE_LEN], reason[GPU_STAMP_WHY_LEN];
    int number = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        number++;
        if (n >= sizeof line) {
            snprintf(why, why_len, "line %d is longer than %d characters", number, GPU_STAMP_LINE_LEN - 1);
            return -1;
        }
        memcpy(line, p, n);
        line[n] = '\0';
        if (parse_line(line, s, reason, sizeof reason) != 0) {
            snprintf(why, why_len, "line %d: %s", number, reason);
            return -1;
        }
        p += n + (p[n] == '\n');
    }
    if (!*s->build_id || s->gpus == 0) {
        snprintf(why, why_len, "%s", !*s->build_id ? "no build line" : "no gpu line");
        return -1;
    }
    return 0;
}

int gpu_stamp_format(const struct gpu_stamp *s, char *out, size_t out_len) {
    size_t used = 0;
    int n = snprintf(out, out_len, "# shardlab: %s passed every CUDA test of this build on each GPU below "
                     "(model/gpu_stamp.h)\nbuild %s\n", GPU_STAMP_COMMAND, s->build_id);
    for (int i = 0; n >= 0 && (size_t)n < out_len - used; i++) {
        used += (size_t)n;
        if (i == s->gpus) return 0;
        n = gpu_stamp_gpu_line(&s->gpu[i], out + used, out_len - used);
    }
    return -1;
}

int gpu_stamp_gpu_line(const struct gpu_stamp_gpu *g, char *out, size_t out_len) {
    return snprintf(out, out_len, "gpu %s %d %s %s\n", g->uuid, g->tests, g->utc, g->name);
}

int gpu_stamp_put(struct gpu_stamp *s, const char *build_id, const struct gpu_stamp_gpu *g) {
    if (strcmp(s->build_id, build_id) != 0) {
        *s = (struct gpu_stamp){0};
        snprintf(s->build_id, sizeof s->build_id, "%s", build_id);
    }
    int at = 0;
    while (at < s->gpus && strcmp(s->gpu[at].uuid, g->uuid) != 0) at++;
    if (at == GPU_STAMP_MAX_GPUS) return -1;
    s->gpu[at] = *g;
    if (at == s->gpus) s->gpus++;
    return 0;
}

/* The stamp's GPUs, "GPU-a, GPU-b", for a refusal. */
static void list_gpus(const struct gpu_stamp *s, char *out, size_t out_len) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < s->gpus && used < out_len; i++) {
        int n = snprintf(out + used, out_len - used, "%s%s", i ? ", " : "", s->gpu[i].uuid);
        if (n < 0) return;
        used += (size_t)n;
    }
}

int gpu_stamp_check(const char *path, const char *text, const struct gpu_identity *me, char *words, size_t len) {
    if (!text) {
        snprintf(words, len, "no stamp %s", path);
        return -1;
    }
    struct gpu_stamp s;
    char why[GPU_STAMP_WHY_LEN];
    if (gpu_stamp_parse(text, &s, why, sizeof why) != 0) {
        snprintf(words, len, "the stamp %s is malformed: %s", path, why);
        return -1;
    }
    if (strcmp(s.build_id, me->build_id) != 0) {
        snprintf(words, len, "the stamp %s is for another build (%.12s, this one is %.12s)", path, s.build_id,
                 me->build_id);
        return -1;
    }
    for (int i = 0; i < s.gpus; i++) {
        const struct gpu_stamp_gpu *g = &s.gpu[i];
        if (strcmp(g->uuid, me->uuid) != 0) continue;
        if (strcmp(g->name, me->name) != 0) {
            snprintf(words, len, "the stamp %s has %s as %s, now %s (a library changed)", path, g->uuid, g->name,
                     me->name);
            return -1;
        }
        snprintf(words, len, "verified by %s on %s: %d tests passed, %s", GPU_STAMP_COMMAND, g->uuid, g->tests,
                 g->utc);
        return 0;
    }
    char others[GPU_STAMP_WHY_LEN];
    list_gpus(&s, others, sizeof others);
    snprintf(words, len, "the stamp %s is for %s, not this GPU %s", path, others, me->uuid);
    return -1;
}

void gpu_stamp_refusal(const char *why, char *out, size_t out_len) {
    snprintf(out, out_len, "this CUDA build has not passed its tests on this GPU (%s): run `%s` here, which writes "
             "the stamp when every CUDA test passes (docs/GPU.md)", why, GPU_STAMP_COMMAND);
}

void gpu_stamp_uuid_text(const unsigned char bytes[16], char out[GPU_STAMP_UUID_LEN]) {
    /* nvidia-smi's form: 8-4-4-4-12 hex digits */
    static const int dash_after[] = {3, 5, 7, 9}; /* the bytes a group ends with */
    enum { DASHES = sizeof dash_after / sizeof dash_after[0] };
    int used = snprintf(out, GPU_STAMP_UUID_LEN, "GPU-");
    for (int i = 0, d = 0; i < UUID_BYTES; i++) {
        used += snprintf(out + used, (size_t)(GPU_STAMP_UUID_LEN - used), "%02x", bytes[i]);
        if (d < DASHES && i == dash_after[d]) {
            used += snprintf(out + used, (size_t)(GPU_STAMP_UUID_LEN - used), "-");
            d++;
        }
    }
}

/* ---- the files: the build's id, the stamp's place and text ---- */

/* The GNU build id among the notes of one PT_NOTE segment, as hex. */
static int find_build_id(const unsigned char *notes, size_t size, size_t align, char *hex, size_t hex_len) {
    size_t at = 0;
    while (at + sizeof(Elf64_Nhdr) <= size) {
        Elf64_Nhdr n;
        memcpy(&n, notes + at, sizeof n);
        size_t name_at = at + sizeof n;
        size_t desc_at = name_at + ((n.n_namesz + align - 1) & ~(align - 1));
        size_t next = desc_at + ((n.n_descsz + align - 1) & ~(align - 1));
        if (desc_at + n.n_descsz > size) return -1;
        bool gnu = n.n_namesz == sizeof "GNU" && memcmp(notes + name_at, "GNU", sizeof "GNU") == 0;
        if (gnu && n.n_type == NT_GNU_BUILD_ID && n.n_descsz > 0 && 2 * n.n_descsz < hex_len) {
            for (size_t i = 0; i < n.n_descsz; i++) snprintf(hex + 2 * i, 3, "%02x", notes[desc_at + i]);
            return 0;
        }
        at = next;
    }
    return -1;
}

static int read_at(FILE *f, long offset, void *out, size_t size) {
    return fseek(f, offset, SEEK_SET) == 0 && fread(out, 1, size, f) == size ? 0 : -1;
}

/* The program headers' PT_NOTE segments, each searched for the build id. */
static int elf_build_id(FILE *f, const Elf64_Ehdr *eh, char *hex, size_t hex_len) {
    unsigned char *notes = malloc(ELF_NOTES_MAX);
    int found = -1;
    for (int i = 0; notes && found != 0 && i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        if (read_at(f, (long)(eh->e_phoff + (size_t)i * eh->e_phentsize), &ph, sizeof ph) != 0) break;
        if (ph.p_type != PT_NOTE || ph.p_filesz > ELF_NOTES_MAX) continue;
        if (read_at(f, (long)ph.p_offset, notes, ph.p_filesz) != 0) break;
        size_t align = ph.p_align > ELF_NOTE_ALIGN_MIN ? ph.p_align : ELF_NOTE_ALIGN_MIN;
        found = find_build_id(notes, ph.p_filesz, align, hex, hex_len);
    }
    free(notes);
    return found;
}

int gpu_stamp_build_id(const char *path, char *hex, size_t hex_len, char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return -1;
    }
    Elf64_Ehdr eh;
    bool elf64 = read_at(f, 0, &eh, sizeof eh) == 0 && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
                 eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr);
    int rc = elf64 ? elf_build_id(f, &eh, hex, hex_len) : -1;
    fclose(f);
    if (rc != 0)
        snprintf(why, why_len, "%s: %s", path, elf64 ? "no GNU build id (linked without -Wl,--build-id?)"
                                                     : "not a 64-bit ELF file");
    return rc;
}

int gpu_stamp_path_beside(const char *exe, char *out, size_t out_len) {
    const char *slash = strrchr(exe, '/');
    int folder = slash ? (int)(slash - exe) : 1;
    int n = snprintf(out, out_len, "%.*s/%s", folder, slash ? exe : ".", GPU_STAMP_FILE);
    return n >= 0 && (size_t)n < out_len ? 0 : -1;
}

int gpu_stamp_load(const char *path, char *text, size_t len, char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(why, why_len, "the stamp %s is unreadable: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(text, 1, len - 1, f);
    bool whole = !ferror(f) && fgetc(f) == EOF;
    fclose(f);
    text[n] = '\0';
    if (whole) return 1;
    snprintf(why, why_len, "the stamp %s is unreadable or longer than %zu bytes", path, len - 1);
    return -1;
}

int gpu_stamp_verify_self(const char *uuid, const char *name, char *words, size_t len) {
    char exe[GPU_STAMP_PATH_LEN], path[GPU_STAMP_PATH_LEN], build_id[GPU_STAMP_BUILD_ID_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(words, len, "/proc/self/exe: %s", strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    if (gpu_stamp_path_beside(exe, path, sizeof path) != 0) {
        snprintf(words, len, "the executable's path is too long for its stamp's");
        return -1;
    }
    if (gpu_stamp_build_id(exe, build_id, sizeof build_id, words, len) != 0) return -1;
    char *text = malloc(GPU_STAMP_TEXT_LEN);
    if (!text) {
        snprintf(words, len, "out of memory reading the stamp %s", path);
        return -1;
    }
    int found = gpu_stamp_load(path, text, GPU_STAMP_TEXT_LEN, words, len);
    struct gpu_identity me = {.build_id = build_id, .uuid = uuid, .name = name};
    int rc = found < 0 ? -1 : gpu_stamp_check(path, found ? text : NULL, &me, words, len);
    free(text);
    return rc;
}
