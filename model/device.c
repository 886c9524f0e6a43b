/* Device selection (include/device.h). The CPU build knows the CPU alone;
 * the CUDA build (-DSHARDLAB_CUDA, `make cuda`) hands cuda and auto to
 * model/cuda/. */
#include "device.h"

#include <stdio.h>

#ifdef SHARDLAB_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cuda_device.h"
#include "cuda/flash_attention.h"
#include "gpu_stamp.h"
#include "kernel_timing.h"

/* The stamp's record of a GPU holds what device_info says of it. */
_Static_assert((int)GPU_STAMP_UUID_LEN == (int)DEVICE_UUID_LEN && (int)GPU_STAMP_NAME_LEN == (int)DEVICE_NAME_LEN,
               "model/gpu_stamp.h's uuid and name fields are device_info's");
#endif

bool device_build_has_cuda(void) {
#ifdef SHARDLAB_CUDA
    return true;
#else
    return false;
#endif
}

static void open_cpu(struct device_info *d) {
    *d = (struct device_info){.kind = DEVICE_CPU, .ordinal = -1};
    snprintf(d->name, sizeof d->name, "cpu");
}

/* Not a quiet fall-back: v2 names the GPU's kernels, so a run that is not
 * on a GPU was not what was asked for. */
static int check_path_on_cpu(enum device_kind want, enum gpu_path path, const struct device_info *d, char *err,
                             size_t err_len) {
    if (path == GPU_PATH_V1 || d->kind == DEVICE_CUDA) return 0;
    snprintf(err, err_len, "--gpu_path %s chooses the GPU's kernels, but this run is on the %s (--device %s%s): use "
             "--gpu_path v1 (the default) on a CPU", gpu_path_name(path), d->name, device_kind_name(want),
             device_build_has_cuda() ? "" : ", the CPU build");
    return -1;
}

#ifdef SHARDLAB_CUDA
/* The one check that a GPU run is verified: make cuda-test's stamp for
 * this build and this GPU (model/gpu_stamp.h). */
static int check_stamp(bool allow_unverified, struct device_info *d, char *err, size_t err_len) {
    char why[DEVICE_VERIFICATION_LEN];
    if (gpu_stamp_verify_self(d->uuid, d->name, why, sizeof why) == 0) {
        snprintf(d->verification, sizeof d->verification, "%s", why);
        return 0;
    }
    if (!allow_unverified) {
        gpu_stamp_refusal(why, err, err_len);
        return -1;
    }
    d->unverified = true;
    snprintf(d->verification, sizeof d->verification, "UNVERIFIED (--gpu_unverified 1: %.280s)", why);
    return 0;
}
#endif

int device_open(enum device_kind want, enum gpu_path path, bool allow_unverified, struct device_info *d, char *err,
                size_t err_len) {
    open_cpu(d);
    if (want == DEVICE_CPU) return check_path_on_cpu(want, path, d, err, err_len);
#ifdef SHARDLAB_CUDA
    if (cuda_device_open(want == DEVICE_CUDA, d, err, err_len) != 0) return -1;
    if (d->kind != DEVICE_CUDA) return check_path_on_cpu(want, path, d, err, err_len);
    d->path = path;
    if (cudaDeviceGetPCIBusId(d->pci_bus_id, DEVICE_BUS_ID_LEN, d->ordinal) != cudaSuccess) {
        (void)cudaGetLastError(); /* the energy meter goes without it (train/measure/measure_energy_nvml.c) */
        d->pci_bus_id[0] = '\0';
    }
    return check_stamp(allow_unverified, d, err, err_len);
#else
    (void)allow_unverified;
    if (want == DEVICE_CUDA) {
        snprintf(err, err_len, "--device cuda: this is the CPU build, without CUDA support (build it with make cuda: "
                               "docs/GPU.md)");
        return -1;
    }
    return check_path_on_cpu(want, path, d, err, err_len);
#endif
}

void device_install_memory(const struct device_info *d, struct mem_tracker *t) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) cuda_mem_install(t);
#else
    (void)d;
    (void)t;
#endif
}

int device_memory_used(const struct device_info *d, size_t *used, size_t *total, char *err, size_t err_len) {
    *used = *total = 0;
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) return cuda_mem_used(used, total, err, err_len);
#endif
    snprintf(err, err_len, "device memory: the run is on the %s, which has no device memory", d->name);
    return -1;
}

int device_measure_peak(const struct device_info *d, struct device_peak *p, char *err, size_t err_len) {
    *p = (struct device_peak){0};
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) return cuda_gemm_peak(&p->gemm_bf16, &p->gemm_fp32, err, err_len);
#endif
    snprintf(err, err_len, "peak FLOP/s: the run is on the %s, not a GPU", d->name);
    return -1;
}

struct kernel_context *device_kernels_open(const struct device_info *d, bool bf16_gemms, char *err, size_t err_len) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) return cuda_kernels_open(bf16_gemms, err, err_len);
#endif
    (void)bf16_gemms;
    snprintf(err, err_len, "kernel context: the run is on the %s, which needs none", d->name);
    return NULL;
}

struct backend_traits device_backend_traits(const struct device_info *d) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) return cuda_backend_traits(d->path);
#else
    (void)d;
#endif
    return (struct backend_traits){0};
}

void device_kernels_close(const struct device_info *d, struct kernel_context *k) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) cuda_kernels_close(k);
#else
    (void)d;
    (void)k;
#endif
}

void device_kernels_sync(const struct device_info *d, struct exec_ctx *fc) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA) kernel_timing_sync(fc);
#else
    (void)d, (void)fc;
#endif
}

int device_check_flash_attention(const struct device_info *d, int64_t B, int64_t T, int64_t C, int64_t NH, char *err,
                                 size_t err_len) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA && flash_attention_check("--attention flash", B, T, C, NH) != 0) {
        snprintf(err, err_len, "--attention flash on %s: the GPU's flash attention does not take %lld heads of size "
                 "%lld over T %lld (the reason above; model/cuda/flash_attention.h); use --attention plain",
                 d->name, (long long)NH, (long long)(NH > 0 ? C / NH : 0), (long long)T);
        return -1;
    }
#else
    (void)d, (void)B, (void)T, (void)C, (void)NH, (void)err, (void)err_len;
#endif
    return 0;
}
