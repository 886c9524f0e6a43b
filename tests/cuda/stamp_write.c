/* stamp_write TRAIN TESTS: make cuda-test's last step (tests/cuda/
 * cuda_test.sh), run only when all TESTS tests passed on this GPU. Records
 * in the stamp beside TRAIN (model/gpu_stamp.h) that TRAIN's build passed
 * them on the GPU this process opens (the one the tests ran on: the first
 * CUDA device, as for a rank without mpirun), and prints the stamp's line
 * for that GPU. Exit 0, or 1 with a message (no GPU, no build id, the
 * file not written). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device.h"
#include "../../model/gpu_stamp.h"

static int fail(const char *what) {
    fprintf(stderr, "stamp_write: %s\n", what);
    return 1;
}

/* This GPU's line: uuid and name as device_open reads them, the time now. */
static int this_gpu(int tests, struct gpu_stamp_gpu *g, char *err, size_t err_len) {
    struct device_info d;
    /* allowed unverified: the stamp is what this writes */
    if (device_open(DEVICE_CUDA, GPU_PATH_V1, true, &d, err, err_len) != 0) return -1;
    *g = (struct gpu_stamp_gpu){.tests = tests};
    snprintf(g->uuid, sizeof g->uuid, "%s", d.uuid);
    snprintf(g->name, sizeof g->name, "%s", d.name);
    time_t now = time(NULL);
    struct tm utc;
    if (!gmtime_r(&now, &utc) || strftime(g->utc, sizeof g->utc, "%Y-%m-%dT%H:%MZ", &utc) == 0) {
        snprintf(err, err_len, "the time now: no UTC");
        return -1;
    }
    return 0;
}

/* The stamp's text with g in it: an earlier stamp of this build keeps its
 * other GPUs' lines. */
static int stamp_text(const char *path, const char *build_id, const struct gpu_stamp_gpu *g, char *text,
                      char *err, size_t err_len) {
    struct gpu_stamp s = {0};
    char why[DEVICE_ERR_LEN];
    if (gpu_stamp_load(path, text, GPU_STAMP_TEXT_LEN, why, sizeof why) == 1 &&
        gpu_stamp_parse(text, &s, why, sizeof why) != 0)
        s = (struct gpu_stamp){0}; /* malformed: written anew */
    if (gpu_stamp_put(&s, build_id, g) != 0 || gpu_stamp_format(&s, text, GPU_STAMP_TEXT_LEN) != 0) {
        snprintf(err, err_len, "%s holds %d GPUs already", path, GPU_STAMP_MAX_GPUS);
        return -1;
    }
    return 0;
}

/* Written whole or not at all: a temporary file renamed over the stamp. */
static int write_file(const char *path, const char *text, char *err, size_t err_len) {
    char tmp[GPU_STAMP_PATH_LEN + sizeof ".tmp"];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, err_len, "writing %s failed", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    char *end = NULL;
    long tests = argc == 3 ? strtol(argv[2], &end, 10) : 0;
    if (argc != 3 || *end || tests <= 0 || tests > INT_MAX) return fail("usage: stamp_write TRAIN TESTS (TESTS > 0)");
    char err[GPU_STAMP_PATH_LEN + DEVICE_ERR_LEN], path[GPU_STAMP_PATH_LEN], build_id[GPU_STAMP_BUILD_ID_LEN];
    if (gpu_stamp_build_id(argv[1], build_id, sizeof build_id, err, sizeof err) != 0) return fail(err);
    if (gpu_stamp_path_beside(argv[1], path, sizeof path) != 0) return fail("the train path is too long");
    struct gpu_stamp_gpu g;
    if (this_gpu((int)tests, &g, err, sizeof err) != 0) return fail(err);
    char *text = malloc(GPU_STAMP_TEXT_LEN);
    if (!text) return fail("out of memory");
    int rc = stamp_text(path, build_id, &g, text, err, sizeof err) == 0 && write_file(path, text, err, sizeof err) == 0;
    free(text);
    if (!rc) return fail(err);
    char line[GPU_STAMP_LINE_LEN];
    gpu_stamp_gpu_line(&g, line, sizeof line);
    printf("%s", line);
    return 0;
}
