/* The stamp that says a CUDA build passed its tests on a GPU (docs/GPU.md,
 * "Verified on the GPU it runs on").
 *
 * `make cuda-test` (tests/cuda/cuda_test.sh) runs every CUDA test; when
 * all of them ran on a GPU and passed, it writes GPU_STAMP_FILE beside the
 * CUDA build's train (build-cuda/gpu_verified.stamp) with
 * tests/cuda/stamp_write.c. The CUDA build's train runs on a GPU only when
 * that file names its own build and its GPU (model/device.c: device_open);
 * else it refuses in one line naming `make cuda-test`, or, with
 * --gpu_unverified 1, runs and says UNVERIFIED and why.
 *
 * The file, the one definition of its format (gpu_stamp_parse and
 * gpu_stamp_format, model/gpu_stamp.c):
 *
 *   # comment lines and blank lines are skipped
 *   build <the GNU build id of build-cuda/train, hex>
 *   gpu <uuid> <tests passed> <UTC time, 2026-11-28T15:02Z> <the GPU's name with its libraries' versions>
 *   gpu ...            one line per GPU that passed with this build
 *
 * The build id is the linker's (-Wl,--build-id=sha1: a hash of the whole
 * binary), so any change to a compiled source, a flag or the link gives
 * another. The uuid is the CUDA runtime's (cudaDeviceProp.uuid, in
 * nvidia-smi's "GPU-..." form), and the name is device_info.name (the
 * GPU's name, sm, cuBLAS, cuBLASLt and NCCL versions), so a library update
 * under the same binary also asks for `make cuda-test` again. */
#ifndef SHARDLAB_GPU_STAMP_H
#define SHARDLAB_GPU_STAMP_H

#include <stddef.h>

#define GPU_STAMP_FILE "gpu_verified.stamp"
#define GPU_STAMP_COMMAND "make cuda-test"

enum {
    GPU_STAMP_BUILD_ID_LEN = 129, /* hex of a build id up to 64 bytes (sha1's is 20) */
    GPU_STAMP_TIME_LEN = 24,      /* "2026-11-28T15:02Z" */
    GPU_STAMP_MAX_GPUS = 16,      /* the GPUs of one host */
    GPU_STAMP_LINE_LEN = 512,     /* a line of the file: a gpu line's fields fit */
    GPU_STAMP_TEXT_LEN = 8192,    /* a whole stamp file: its longest form fits */
    GPU_STAMP_PATH_LEN = 4096,
    GPU_STAMP_UUID_LEN = 48,      /* "GPU-" and a uuid's 36 characters (device_info.uuid's size) */
    GPU_STAMP_NAME_LEN = 96,      /* a GPU's name (device_info.name's size) */
    GPU_STAMP_WHY_LEN = 256,      /* a reason, within the verdicts */
};

struct gpu_stamp_gpu {
    char uuid[GPU_STAMP_UUID_LEN];
    int tests;                      /* how many tests passed on it */
    char utc[GPU_STAMP_TIME_LEN];   /* when */
    char name[GPU_STAMP_NAME_LEN];  /* device_info.name when it passed */
};

struct gpu_stamp {
    char build_id[GPU_STAMP_BUILD_ID_LEN];
    int gpus;
    struct gpu_stamp_gpu gpu[GPU_STAMP_MAX_GPUS];
};

/* What a run compares with the stamp: its own build and GPU. */
struct gpu_identity {
    const char *build_id, *uuid, *name;
};

/* text (a whole file, NUL-terminated) into s. 0, or -1 with the reason
 * (its line number) in why. */
int gpu_stamp_parse(const char *text, struct gpu_stamp *s, char *why, size_t why_len);
/* s as the file's text. 0, or -1 when out is too small. */
int gpu_stamp_format(const struct gpu_stamp *s, char *out, size_t out_len);
/* One GPU's line of that text, newline included; snprintf's return. */
int gpu_stamp_gpu_line(const struct gpu_stamp_gpu *g, char *out, size_t out_len);
/* Records that g passed with build build_id: a stamp of another build is
 * started over; g replaces an earlier line of the same GPU. 0, or -1 when
 * the stamp holds GPU_STAMP_MAX_GPUS others already. */
int gpu_stamp_put(struct gpu_stamp *s, const char *build_id, const struct gpu_stamp_gpu *g);

/* The verdict on a run, from the stamp file's text (NULL: there is no file
 * at path). 0 with the banner's words in words ("verified by make
 * cuda-test on GPU-...: 41 tests passed, 2026-11-28T15:02Z"), or -1 with
 * the reason in words ("no stamp build-cuda/gpu_verified.stamp", "the
 * stamp ... is for GPU-..., not this GPU ..."). */
int gpu_stamp_check(const char *path, const char *text, const struct gpu_identity *me, char *words, size_t len);
/* The one-line refusal for a reason from gpu_stamp_check: it names
 * GPU_STAMP_COMMAND. */
void gpu_stamp_refusal(const char *why, char *out, size_t out_len);

/* The 16 bytes of a CUDA uuid as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void gpu_stamp_uuid_text(const unsigned char bytes[16], char out[GPU_STAMP_UUID_LEN]);

/* The GNU build id of the ELF file at path (64-bit ELF), as hex. 0, or -1
 * with the reason in why (no such file, not ELF, no build id). */
int gpu_stamp_build_id(const char *path, char *hex, size_t hex_len, char *why, size_t why_len);
/* The stamp's path beside the executable at exe (GPU_STAMP_FILE in its
 * folder). 0, or -1 when it does not fit. */
int gpu_stamp_path_beside(const char *exe, char *out, size_t out_len);
/* A file's text into text (NUL-terminated). 1, 0 when there is no such
 * file, or -1 with the reason in why (unreadable, larger than len - 1). */
int gpu_stamp_load(const char *path, char *text, size_t len, char *why, size_t why_len);

/* This process's verdict: its own build (/proc/self/exe), the stamp beside
 * it, the GPU uuid and name given; as gpu_stamp_check. */
int gpu_stamp_verify_self(const char *uuid, const char *name, char *words, size_t len);

#endif
