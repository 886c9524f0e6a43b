/* Where a run's model lives (train/run/run.h: trainer_place and the
 * functions after it): the CPU, or this rank's GPU with its memory hooks,
 * kernel context and memory readings. */
#include "run.h"

#include <stdio.h>

#include "../measure/machine.h"
#include "onednn_gemms.h"

void trainer_place(struct trainer *tr, const struct device_info *dev) {
    if (dev) tr->dev = *dev;
    else tr->dev = (struct device_info){.kind = DEVICE_CPU, .ordinal = -1, .name = "cpu"};
    tr->space = tr->dev.kind == DEVICE_CUDA ? MEM_DEVICE : MEM_HOST;
    tr->flops.space = tr->space; /* the layer kernels and update rules run there (counters.h) */
    device_install_memory(&tr->dev, &tr->mem);
}

/* --attention flash on a GPU: the fused kernel takes only some head sizes. */
static int check_device_attention(const struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    if (c->attention != ATTENTION_FLASH) return 0;
    int tp = tr->grid->tp; /* the layout check passed: tp divides n_head and d_model */
    return device_check_flash_attention(&tr->dev, c->micro_batch, c->seq_len, c->d_model / tp, c->n_head / tp, err,
                                        TRAINER_ERR_LEN);
}

/* What make cuda-test does not run, and so no stamp covers: --gpu_path v2
 * over several ranks (tests/cuda/gpu_train.sh runs v2 on one GPU rank
 * only). Refused, or run marked UNVERIFIED with --gpu_unverified 1. */
static int check_device_untested(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    int ranks = tr->grid->world_size;
    if (tr->space != MEM_DEVICE || tr->dev.path != GPU_PATH_V2 || ranks == 1) return 0;
    if (!tr->cfg->gpu_unverified) {
        snprintf(err, TRAINER_ERR_LEN, "--gpu_path v2 on %d ranks: make cuda-test runs v2 on one GPU rank only, so "
                 "no stamp covers it; --gpu_path v1 runs on several ranks (--gpu_unverified 1 runs it unverified)",
                 ranks);
        return -1;
    }
    tr->dev.unverified = true;
    snprintf(tr->dev.verification, sizeof tr->dev.verification, "UNVERIFIED (--gpu_unverified 1: --gpu_path v2 on "
             "%d ranks, which make cuda-test does not run)", ranks);
    return 0;
}

void trainer_sample_device_memory(struct trainer *tr) {
    size_t used, total;
    char e[DEVICE_ERR_LEN];
    if (tr->space == MEM_HOST || device_memory_used(&tr->dev, &used, &total, e, sizeof e) != 0) return;
    if ((double)used > tr->device_used_peak) tr->device_used_peak = (double)used;
    tr->device_total = (double)total;
}

/* The CPU's bf16 GEMMs when --gemm_dtype asks for them (bf16 always, auto
 * where the params are bf16 and the CPU can run oneDNN's), on the kernel
 * --gemm_kernel names: oneDNN (refused, naming what is missing, where the
 * CPU cannot) or the project's reference. */
static int open_cpu_kernels(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    char flags[CPU_FLAGS_LEN];
    machine_cpu_flags(flags, sizeof flags);
    tr->gemm_dtype = config_gemm_dtype(c, false, flags);
    if (config_check_gemm_kernel(c, tr->gemm_dtype, false, err, TRAINER_ERR_LEN) != 0) return -1;
    /* one thread has no team to share the blocks with: one sgemm per call
     * is faster there (each block repacks an operand) */
    tr->flops.gemm_blocks = c->threads > 1;
    if (tr->gemm_dtype != DTYPE_BF16) return 0;
    if (c->gemm_kernel == GEMM_KERNEL_REFERENCE) {
        tr->flops.bf16_reference = true;
        return 0;
    }
    char e[DEVICE_ERR_LEN];
    tr->flops.onednn = onednn_gemms_open(flags, e, sizeof e);
    if (tr->flops.onednn) return 0;
    snprintf(err, TRAINER_ERR_LEN, "--gemm_dtype bf16 on the %s: oneDNN cannot run its bf16 GEMMs here: %s (use "
             "--gemm_kernel reference for the project's reference bf16 GEMM, or --gemm_dtype fp32 or auto)",
             tr->dev.name, e);
    return -1;
}

int trainer_open_kernels(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    if (check_device_attention(tr, err) != 0) return -1;
    if (check_device_untested(tr, err) != 0) return -1;
    if (tr->space == MEM_HOST) return open_cpu_kernels(tr, err);
    const struct config *c = tr->cfg; /* a GPU has tensor cores: auto follows the params */
    if (config_check_gpu_path(c, err, TRAINER_ERR_LEN) != 0) return -1;
    tr->gemm_dtype = config_gemm_dtype(c, true, "");
    if (config_check_gemm_kernel(c, tr->gemm_dtype, true, err, TRAINER_ERR_LEN) != 0) return -1;
    bool bf16 = tr->gemm_dtype == DTYPE_BF16;
    char e[DEVICE_ERR_LEN];
    tr->flops.kernels = device_kernels_open(&tr->dev, bf16, e, sizeof e);
    tr->flops.device = device_backend_traits(&tr->dev); /* what its kernels ask: include/counters.h */
    if (tr->flops.kernels) return 0;
    snprintf(err, TRAINER_ERR_LEN, "%s", e);
    return -1;
}

void trainer_close_kernels(struct trainer *tr) {
    device_kernels_close(&tr->dev, tr->flops.kernels);
    tr->flops.kernels = NULL;
    onednn_gemms_close(tr->flops.onednn);
    tr->flops.onednn = NULL;
}
