/* The CUDA build's device selection and device memory (model/cuda/
 * device_select.c, mem_device.c), behind include/device.h. */
#ifndef SHARDLAB_CUDA_DEVICE_H
#define SHARDLAB_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "device.h"
#include "mem.h"

/* The number of CUDA devices, or 0 with the reason in why ("no CUDA
 * device (cudaGetDeviceCount: ..., error 35)"); the CUDA error is cleared. */
int cuda_device_count(char *why, size_t why_len);

/* required: --device cuda (no GPU is an error); else auto (no GPU: the
 * CPU, d left as the caller filled it). 0, or -1 with a message. */
int cuda_device_open(bool required, struct device_info *d, char *err, size_t err_len);

/* This rank's index on its host: OMPI_COMM_WORLD_LOCAL_RANK, 0 when unset
 * (one process without mpirun); -1 with a message when it is not a number. */
int cuda_local_rank(char *err, size_t err_len);

void cuda_mem_install(struct mem_tracker *t);
/* model/cuda/kernel_context.cu: device_kernels_open/close on the current GPU. */
/* model/cuda/layer_ops_cuda.c: what the kernels of `path` ask of the core. */
struct backend_traits cuda_backend_traits(enum gpu_path path);
struct kernel_context *cuda_kernels_open(bool bf16_gemms, char *err, size_t err_len);
void cuda_kernels_close(struct kernel_context *k);
/* model/cuda/device_peak.cu: cuBLAS GEMM FLOP/s measured on the current
 * GPU, bf16 operands (fp32 accumulation) and fp32 (no TF32). */
int cuda_gemm_peak(double *bf16, double *fp32, char *err, size_t err_len);
int cuda_mem_used(size_t *used, size_t *total, char *err, size_t err_len);

#endif
