/* One GPU per rank, chosen by the rank's index on its host
 * (include/device.h). A host with fewer GPUs than ranks is an error, not
 * two ranks sharing one GPU: the memory tables would no longer be a
 * rank's. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_device.h"
#include "../gpu_stamp.h"

int cuda_local_rank(char *err, size_t err_len) {
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX) {
        snprintf(err, err_len, "OMPI_COMM_WORLD_LOCAL_RANK='%s' is not a local rank", s);
        return -1;
    }
    return (int)v;
}

int cuda_device_count(char *why, size_t why_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return count;
    (void)cudaGetLastError(); /* clear it: the CPU path goes on */
    if (e != cudaSuccess)
        snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount: %s, error %d)", cudaGetErrorString(e), (int)e);
    else snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount found none)");
    return 0;
}

int cuda_device_open(bool required, struct device_info *d, char *err, size_t err_len) {
    char why[160];
    int count = cuda_device_count(why, sizeof why);
    if (count == 0) {
        if (!required) return 0; /* auto: the CPU */
        snprintf(err, err_len, "--device cuda: %s", why);
        return -1;
    }
    cudaError_t e;
    int local = cuda_local_rank(err, err_len);
    if (local < 0) return -1;
    if (local >= count) {
        snprintf(err, err_len, "--device cuda: local rank %d has no GPU of its own: this host has %d CUDA device%s "
                               "(one GPU per rank)", local, count, count == 1 ? "" : "s");
        return -1;
    }
    struct cudaDeviceProp p;
    if ((e = cudaSetDevice(local)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, local)) != cudaSuccess) {
        snprintf(err, err_len, "--device cuda: GPU %d of local rank %d: %s", local, local, cudaGetErrorString(e));
        return -1;
    }
    int nccl = 0, cublas = 0;
    ncclGetVersion(&nccl);
    cublasGetProperty(MAJOR_VERSION, &cublas);
    *d = (struct device_info){.kind = DEVICE_CUDA, .local_rank = local, .ordinal = local, .count = count,
                              .total_bytes = p.totalGlobalMem};
    snprintf(d->name, sizeof d->name, "%.40s (sm_%d%d, cuBLAS %d, cuBLASLt %zu, NCCL %d)", p.name, p.major, p.minor,
             cublas, cublasLtGetVersion(), nccl);
    gpu_stamp_uuid_text((const unsigned char *)p.uuid.bytes, d->uuid);
    return 0;
}
