/* Where a rank's model runs: the CPU, or one CUDA GPU per rank (the CUDA
 * build, `make cuda`: docs/GPU.md). The config key --device chooses:
 *   auto  the CPU build: cpu; the CUDA build: cuda when a GPU is present,
 *         else cpu
 *   cpu   host memory and the model/cpu/ kernels, in either build
 *   cuda  the CUDA build only, and only with a GPU: a rank takes the GPU
 *         of its local rank on the host (OMPI_COMM_WORLD_LOCAL_RANK; 0
 *         without mpirun), one GPU per rank
 * A request that cannot be met is an error with a message, never a quiet
 * fall-back: "no CUDA device" when cuda is asked for and none is present. */
#ifndef SHARDLAB_DEVICE_H
#define SHARDLAB_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counters.h"
#include "mem.h"

/* The order of the --device choices (train/config/config_keys.c). */
enum device_kind { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };

/* The GPU's kernels (--gpu_path; docs/GPU.md): v1, the default, the fp32
 * data path; v2 the bf16 data path (issue 24), both behind the CUDA
 * backend's table (model/cuda/). The order of the choices in config_keys.c. */
enum gpu_path { GPU_PATH_V1, GPU_PATH_V2 };
static inline const char *gpu_path_name(enum gpu_path p) { return p == GPU_PATH_V2 ? "v2" : "v1"; }

enum {
    DEVICE_NAME_LEN = 96,
    DEVICE_ERR_LEN = 256,
    DEVICE_BUS_ID_LEN = 32,
    DEVICE_UUID_LEN = 48,          /* "GPU-" and a uuid's 36 characters */
    DEVICE_VERIFICATION_LEN = 320, /* a verdict on the stamp (model/gpu_stamp.h) */
};

struct device_info {
    enum device_kind kind;      /* DEVICE_CPU or DEVICE_CUDA once opened */
    int local_rank;             /* this rank's index on its host */
    int ordinal;                /* the CUDA device this rank uses; -1 on the CPU */
    int count;                  /* CUDA devices visible on the host (0 on the CPU build) */
    size_t total_bytes;         /* the GPU's memory (0 on the CPU) */
    char name[DEVICE_NAME_LEN]; /* "cpu", or the GPU's name */
    char uuid[DEVICE_UUID_LEN]; /* the GPU's uuid ("GPU-..."; "" on the CPU) */
    /* On a GPU: whether make cuda-test's stamp covers this build on this
     * GPU (model/gpu_stamp.h). verification holds the banner's words:
     * "verified by make cuda-test on GPU-...: ..." or, when unverified
     * (--gpu_unverified 1), "UNVERIFIED (...)" with the reason. */
    bool unverified;
    char verification[DEVICE_VERIFICATION_LEN];
    enum gpu_path path;         /* the GPU's kernels (device_open; v1 on the CPU) */
    char pci_bus_id[DEVICE_BUS_ID_LEN]; /* the GPU's PCI bus id ("0000:1B:00.0"; "" on the CPU): NVML's key */
};

static inline const char *device_kind_name(enum device_kind k) {
    return k == DEVICE_CUDA ? "cuda" : k == DEVICE_CPU ? "cpu" : "auto";
}

/* True in the CUDA build (compiled with CUDA support, GPU or not). */
bool device_build_has_cuda(void);

/* Resolves `want` (above), selects this rank's GPU when it is cuda, and
 * fills d. 0, or -1 with a message in err. Local: no collective. On a GPU
 * the run goes on only when make cuda-test's stamp beside this executable
 * covers this build and this GPU (model/gpu_stamp.h), or when
 * allow_unverified says to run anyway (d->unverified then); else err is
 * the one-line refusal naming make cuda-test. path v2 where the run is not
 * on a GPU (either build) is an error. */
int device_open(enum device_kind want, enum gpu_path path, bool allow_unverified, struct device_info *d, char *err,
                size_t err_len);

/* On a CUDA device: t's MEM_DEVICE space allocates with cudaMalloc (zero
 * filled) and frees with cudaFree; a failed cudaMalloc is a recorded
 * allocation failure (include/mem.h), never an exit. On the CPU: nothing. */
void device_install_memory(const struct device_info *d, struct mem_tracker *t);

/* The device's used and total bytes as the driver reports them
 * (cudaMemGetInfo: total - free, every allocation of every process on the
 * GPU, the CUDA context included). 0, or -1 with a message (the CPU has
 * no such number). */
int device_memory_used(const struct device_info *d, size_t *used, size_t *total, char *err, size_t err_len);

/* The run's kernel context on a GPU (one cuBLAS handle for the run, and
 * whether layer GEMMs take bf16 operands), for the run's exec_ctx's
 * `kernels` (include/counters.h). NULL with a message on failure, and on
 * the CPU, which needs none (bf16_gemms there is an error: OpenBLAS has no
 * bf16 GEMM in Debian's build; the config refuses it first). */
struct kernel_context *device_kernels_open(const struct device_info *d, bool bf16_gemms, char *err, size_t err_len);
/* What the GPU backend asks of the core for the kernels d's run chose
 * (d->path; counters.h: struct backend_traits); all false on the CPU. */
struct backend_traits device_backend_traits(const struct device_info *d);
void device_kernels_close(const struct device_info *d, struct kernel_context *k);
/* On a GPU: waits for the kernels queued so far and adds their times to
 * fc's kernel profile and GEMM seconds (model/kernel_timing.h: GPU calls
 * do not wait one by one). The trainer calls it where a phase's time is
 * read. On the CPU: nothing (its kernels return finished). */
void device_kernels_sync(const struct device_info *d, struct exec_ctx *fc);

/* A GPU's peak FLOP/s: cuBLAS GEMMs measured now, bf16 operands with fp32
 * accumulation and fp32 without TF32 (the math this build's layer GEMMs
 * use); and the data sheet's dense bf16 figure, which MFU divides by: the
 * trainer fills it from train/theory/theory_devices.c (0 when the GPU is not in
 * that table), which this layer cannot reach. */
struct device_peak {
    double spec_bf16, gemm_bf16, gemm_fp32;
};
/* The measured fields (spec_bf16 0); 0, or -1 with a message (the CPU:
 * there is no such peak). */
int device_measure_peak(const struct device_info *d, struct device_peak *p, char *err, size_t err_len);

/* Whether d's attention_lse kernels (--attention flash; include/layers.h)
 * take B sequences of T positions, C channels in NH heads (a rank's:
 * C/tp, NH/tp): the CPU's take any shape; a GPU's flash attention
 * (model/cuda/flash_attention.h) head sizes 32, 64 and 128. 0, or -1 with
 * a message in err (and the kernel's own reason on stderr). */
int device_check_flash_attention(const struct device_info *d, int64_t B, int64_t T, int64_t C, int64_t NH, char *err,
                                 size_t err_len);

#endif
