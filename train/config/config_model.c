/* What a configuration means to the layers below the run: the model's
 * shape and the engine's options (micro-batch, dtypes, recompute, ZeRO,
 * the optimizer), read off its keys in one place. */
#include "config.h"

#include <stdio.h>

#include "engine.h"
#include "onednn_gemms.h"

struct model_shape trainer_model_shape(const struct config *c) {
    return (struct model_shape){.L = c->n_layer, .C = c->d_model, .NH = c->n_head, .T = c->seq_len,
                                .maxT = c->max_seq_len, .V = c->vocab_size, .arch = c->arch, .KV = c->n_kv_head,
                                .F = c->ffn_dim, .norm_eps = c->norm_eps, .rope_theta = c->rope_theta,
                                .rope_scaled = c->rope_scaled};
}

enum dtype config_gemm_dtype(const struct config *c, bool on_gpu, const char *cpu_flags) {
    if (c->gemm_dtype != GEMM_DTYPE_AUTO) return (enum dtype)c->gemm_dtype;
    if (c->param_dtype != DTYPE_BF16) return DTYPE_FP32;
    if (on_gpu || c->gemm_kernel != GEMM_KERNEL_AUTO) return DTYPE_BF16; /* a named bf16 kernel asks for them */
    return onednn_bf16_missing(cpu_flags) ? DTYPE_FP32 : DTYPE_BF16;
}

int config_check_gemm_kernel(const struct config *c, enum dtype gemm_dtype, bool on_gpu, char *err,
                             size_t err_len) {
    if (c->gemm_kernel == GEMM_KERNEL_AUTO) return 0;
    const char *kernel = c->gemm_kernel == GEMM_KERNEL_ONEDNN ? "onednn" : "reference";
    if (on_gpu) {
        snprintf(err, err_len, "--gemm_kernel %s names a kernel of the CPU's bf16 GEMMs; on a GPU cuBLAS runs "
                 "them (use --gemm_kernel auto, or --device cpu)", kernel);
        return -1;
    }
    if (gemm_dtype == DTYPE_BF16) return 0;
    snprintf(err, err_len, "--gemm_kernel %s runs bf16 GEMMs, and this run's are fp32 (%s); use --gemm_dtype bf16 "
             "with --param_dtype bf16, or --gemm_kernel auto", kernel,
             c->gemm_dtype == GEMM_DTYPE_FP32 ? "--gemm_dtype fp32" : "gemm_dtype auto with --param_dtype fp32");
    return -1;
}

int config_check_gpu_path(const struct config *c, char *err, size_t err_len) {
    if (c->device != DEVICE_CUDA || c->gpu_path != GPU_PATH_V2) return 0;
    const char *why = NULL;
    if (config_gemm_dtype(c, true, "") != DTYPE_BF16)
        why = "it needs bf16 GEMMs (--gemm_dtype bf16, or auto with --param_dtype bf16)";
    else if (c->act_dtype != DTYPE_BF16)
        why = "it needs bf16 activations (--act_dtype bf16)";
    else if (c->recompute == RECOMPUTE_FULL)
        why = "--recompute full keeps no bf16 stores for its kernels to read (use none or selective)";
    else if (c->sequence_parallel && c->tp > 1)
        why = "--sequence_parallel 1 at tp > 1 gathers fp32 views around its GEMMs";
    else if (c->cp > 1)
        why = "--cp > 1 with --gpu_path v2: context parallelism's ring has no device form on v2 yet";
    if (!why) return 0;
    snprintf(err, err_len, "--gpu_path v2 runs the bf16 data path on the GPU, and this run cannot take it: %s; "
             "--gpu_path v1 (the default) runs it", why);
    return -1;
}

struct engine_options trainer_engine_options(const struct config *c) {
    struct optim_options opt = {
        .kind = c->optimizer,
        .lr = {.lr = c->lr, .min_lr_frac = c->min_lr_frac, .warmup_steps = c->warmup_steps, .steps = c->steps,
               .schedule = c->lr_schedule},
        .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps, .weight_decay = c->weight_decay,
        .grad_clip = c->grad_clip, .decay_targets = c->decay_targets, .momentum = c->momentum,
        .nesterov = c->nesterov, .min_8bit_size = c->min_8bit_size, .adafactor_beta1 = c->adafactor_beta1,
        .adafactor_decay = c->adafactor_decay, .adafactor_eps = c->adafactor_eps, .adafactor_clip = c->adafactor_clip};
    struct zero_options z = {.stage = c->zero, .param_dtype = c->param_dtype, .grad_dtype = c->grad_dtype,
                             .rounding = c->rounding, .seed = (uint64_t)c->seed, .optim = opt,
                             .overlap = c->overlap, .ddp_bucket_bytes = (size_t)(c->ddp_bucket_mb * MIB_BYTES)};
    return (struct engine_options){.micro_batch = c->micro_batch, .slots = 1, .act_dtype = c->act_dtype,
                                   .recompute = c->recompute, .attention = c->attention,
                                   /* auto is the trainer's to resolve (it knows the machine:
                                    * trainer_open_kernels, tr->gemm_dtype); fp32 here */
                                   .gemm_dtype = c->gemm_dtype == GEMM_DTYPE_BF16 ? DTYPE_BF16 : DTYPE_FP32,
                                   .sequence_parallel = c->sequence_parallel,
                                   .init_std = c->init_std, .zero = z,
                                   .micro_batches = c->grad_accum * config_chunks(c)};
}
