/* The run configuration: every key the trainer understands, set from
 * a configs/ file (`key = value`) and overridden by `--key value`. The key
 * table in train/config/config_keys.c is the single source of names, types, defaults,
 * choices and help text. */
#ifndef SHARDLAB_CONFIG_H
#define SHARDLAB_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "dtype.h"
#include "gpt.h"
#include "optim.h"
#include "schedule.h"

/* What a step with a NaN or Inf loss or gradient norm does: stop the run
 * (the update not applied, nothing saved), or drop that update and go on
 * (up to max_skipped_steps of them). */
enum nonfinite_policy { NONFINITE_STOP, NONFINITE_SKIP_STEP };

enum { CONFIG_PATH_LEN = 512, CONFIG_ERR_LEN = 1024 };
/* The --config files one command line may name (each is an input the run's
 * outputs must not overwrite). */
enum { CONFIG_FILES_MAX = 16 };

/* The most bytes any count derived from the shape keys may reach (2^62):
 * sizes are 64-bit integers, and the factor 4 of headroom covers sums of a
 * few such buffers and offsets one past their end. */
#define CONFIG_MAX_BYTES ((uint64_t)1 << 62)

/* --gemm_dtype: the layer GEMMs' operands. fp32 and bf16 are enum dtype's
 * values; auto is bf16 where the params are bf16 and the machine has bf16
 * matrix units (a GPU's tensor cores; a CPU's AMX-BF16 or AVX512-BF16
 * through oneDNN), else fp32. */
enum gemm_dtype_choice { GEMM_DTYPE_FP32 = DTYPE_FP32, GEMM_DTYPE_BF16 = DTYPE_BF16, GEMM_DTYPE_AUTO };

/* --gemm_kernel: what runs the CPU's bf16 GEMMs. auto and onednn: oneDNN's
 * matmul (it needs AVX512-BF16 or AMX-BF16; a run that cannot have it is
 * refused, naming the reference); reference: the project's reference bf16
 * GEMM (model/cpu/matmul.c: operands rounded to bf16, products and sums in
 * fp32 on OpenBLAS's sgemm), which runs on any CPU. The fp32 GEMMs and a
 * GPU's take auto only (config_check_gemm_kernel). */
enum gemm_kernel_choice { GEMM_KERNEL_AUTO, GEMM_KERNEL_ONEDNN, GEMM_KERNEL_REFERENCE };

struct config {
    /* model (GPT-2 architecture) */
    int n_layer, d_model, n_head, seq_len, vocab_size;
    int max_seq_len; /* position-table rows; 0: seq_len (an --init_from file's, see trainer_adopt_model_file) */
    enum model_arch arch; /* include/layout.h */
    int n_kv_head; /* 0: n_head (no GQA) */
    int ffn_dim;   /* 0: 4 * d_model */
    float norm_eps;   /* llama: RMSNorm's eps */
    float rope_theta; /* llama: RoPE's base */
    bool rope_scaled; /* llama: LLaMA 3.1's RoPE frequency scaling */
    float init_std;
    /* batch */
    int micro_batch, grad_accum;
    /* optimisation */
    enum optimizer_kind optimizer;
    int steps, warmup_steps;
    float lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    enum lr_schedule lr_schedule;
    enum decay_targets decay_targets;
    float momentum;        /* sgd */
    bool nesterov;         /* sgd */
    int min_8bit_size;     /* the 8-bit rules: smaller tensors keep 32-bit states */
    float adafactor_beta1, adafactor_decay, adafactor_eps, adafactor_clip; /* adafactor (include/optim.h) */
    unsigned optim_keys_set; /* the optimizer keys (bits of enum optim_key) the user set, in a file or an
                              * option, even to their defaults: another rule's is an error (config_validate),
                              * and an unset beta2 follows the rule (config_rule_defaults) */
    enum recompute_mode recompute;
    enum attention_kind attention; /* plain or flash (include/gpt.h) */
    /* precision */
    enum dtype param_dtype, grad_dtype, act_dtype;
    enum rounding_mode rounding;
    /* data */
    char train_data[CONFIG_PATH_LEN], val_data[CONFIG_PATH_LEN];
    bool shuffle;
    int val_every, val_batches;
    long long seed;
    /* checkpoints and output */
    char init_from[CONFIG_PATH_LEN], save[CONFIG_PATH_LEN];
    char resume[CONFIG_PATH_LEN], save_state[CONFIG_PATH_LEN];
    int save_state_every;
    bool allow_data_change; /* resume with other train_data than the state's */
    enum nonfinite_policy on_nonfinite;
    int max_skipped_steps;  /* skip_step: the run stops when more are skipped */
    char log_json[CONFIG_PATH_LEN];
    char trace[CONFIG_PATH_LEN];  /* Chrome trace-event file of the run ("" = off; train/measure/measure_trace.c) */
    int trace_events;             /* its events per rank; 0: from the run's size (trace_capacity) */
    int sample_tokens;
    float sample_temperature;
    char sample_prompt[CONFIG_PATH_LEN];
    /* parallelism: world = dp x cp x tp x pp (dp is what remains) */
    int zero, tp, pp;
    int cp; /* context parallelism: each sequence's positions over cp ranks, ring attention (docs/CP.md) */
    bool sequence_parallel; /* tp's LayerNorm/residual regions on T/tp positions (Korthikanti et al. 2022); no-op at tp 1 */
    enum schedule_kind schedule; /* pipeline schedule (include/schedule.h) */
    int virtual_stages;          /* model chunks per stage: interleaved only (include/pipe_stages.h) */
    char pp_layers[CONFIG_PATH_LEN]; /* layers per stage, "3,3,2"; "": an even split */
    int explain;           /* 1: the shard map; 2: and a unit's life through a step (train/report/report.h) */
    bool overlap;          /* collectives behind compute (include/zero.h); 0: the blocking path */
    double ddp_bucket_mb;  /* ZeRO-0: MiB of gradients per all-reduce bucket (whole units) */
    /* machine */
    enum device_kind device; /* --device: auto, cpu or cuda (include/device.h) */
    enum gemm_dtype_choice gemm_dtype; /* the layer GEMMs' operands: fp32, bf16 (fp32 accumulation) or auto
                                        * (the trainer resolves it: trainer_open_kernels) */
    enum gemm_kernel_choice gemm_kernel; /* the CPU's bf16 GEMMs: oneDNN or the reference */
    int threads;
    bool threads_adapt; /* the team follows the free cores between steps (docs/THREADS.md) */
    double peak_flops;
    bool force;            /* go on when the memory check says the run will not fit */
    bool gpu_unverified;   /* run on a GPU without make cuda-test's stamp (model/gpu_stamp.h) */
    enum gpu_path gpu_path; /* --gpu_path: the GPU's kernels, v1 or v2 (include/device.h) */
    double watts;          /* the planner's P per device for E = t x P; 0: NVML's power limit on a GPU, none on a CPU */
    /* not a key: the --config files config_parse_args read (argv's strings), inputs like the data */
    const char *config_files[CONFIG_FILES_MAX];
    int n_config_files;
};

/* The MLP's width F: ffn_dim, or 4 d_model where it is 0 (mlp_width). */
static inline int config_mlp_width(const struct config *c) { return c->ffn_dim > 0 ? c->ffn_dim : 4 * c->d_model; }

/* Model chunks per pipeline stage: virtual_stages under the interleaved
 * schedule, 1 under the others (the trainer refuses virtual_stages > 1 there). */
static inline int config_chunks(const struct config *c) {
    return c->schedule == SCHEDULE_INTERLEAVED ? c->virtual_stages : 1;
}

void config_defaults(struct config *c);
/* Each returns 0, or -1 with a message naming the key (and the valid choices)
 * in err. */
int config_set(struct config *c, const char *key, const char *value, char err[CONFIG_ERR_LEN]);
int config_load_file(struct config *c, const char *path, char err[CONFIG_ERR_LEN]);
/* The same from an open stream (read to its end, not closed); name labels
 * the messages (name:line). */
int config_load_stream(struct config *c, FILE *f, const char *name, char err[CONFIG_ERR_LEN]);
/* argv: `--config FILE` is applied first, then every `--key value` in order.
 * Sets *help when --help or -h is present. */
int config_parse_args(struct config *c, int argc, char **argv, bool *help, char err[CONFIG_ERR_LEN]);
/* The defaults that follow the chosen rule where the user did not set the
 * key: beta2 is AdamW's 0.95 (the key table's default) but Lion's 0.99
 * (Chen et al. 2023) under lion and lion8bit. config_parse_args calls it
 * last; a caller that sets keys by config_set calls it before
 * config_validate. Returns whether it changed beta2. */
bool config_rule_defaults(struct config *c);
/* Cross-key checks (divisibility, ranges that depend on other keys, the
 * trainer's uint16 token shards, and config_check_sizes). */
int config_validate(const struct config *c, char err[CONFIG_ERR_LEN]);
/* The 64-bit size limits alone (train/config/config_limits.c): each activation,
 * logit, embedding and model-state count in bytes must be at most
 * CONFIG_MAX_BYTES; the error names the keys, their product and the bytes. */
int config_check_sizes(const struct config *c, char err[CONFIG_ERR_LEN]);
/* Settings that run but are probably not meant (warmup longer than the
 * run): one "warning: ..." line each on `out`; returns how many. */
int config_warnings(const struct config *c, FILE *out);
/* Every key with its help, default and choices; planner_keys: also the
 * planner's model keys (arch, n_kv_head, ffn_dim), which build/train refuses. */
void config_print_help(FILE *f, const char *program, bool planner_keys);
/* The rule and its own keys' values, one line ("optimizer: lion, beta1
 * 0.9, beta2 0.99 (this rule's default), weight_decay 0.1"). */
void config_print_optimizer(FILE *f, const struct config *c);
/* Every key with its value, one per line, in config-file form; an
 * optimizer key left unset at its default as a comment ("# (not set)
 * beta2 = 0.95"), so the text loads back with the same keys set. */
void config_print(FILE *f, const struct config *c);
/* The keys, by index in the key table, and a checksum (CRC32C) of each
 * key's value as config_print writes it: ranks compare their
 * configurations key by key (train/run/train_main.c). */
int config_num_keys(void);
const char *config_key_name(int i);
/* The name of a choice key's value (optimizer 2: "sgd"); "?" if none. */
const char *config_choice_name(const char *key, int value);
uint32_t config_key_hash(const struct config *c, int i);

/* The model's shape and the engine's options, from a configuration (train/config/config_model.c). */
struct model_shape trainer_model_shape(const struct config *c);
struct engine_options;
struct engine_options trainer_engine_options(const struct config *c);
/* --gemm_dtype as a run resolves it, on a GPU (on_gpu) or a CPU with the
 * given /proc/cpuinfo flags (machine_cpu_flags): auto is bf16 where the
 * params are bf16 and the GPU's tensor cores, or the CPU's AVX512-BF16 or
 * AMX-BF16, can run it, else fp32. One rule for the trainer
 * (train/run/run_device.c) and the theory of what the run allocates
 * (train/theory/theory_rank.c), which takes on_gpu from --device (the
 * trainer stores the device it opened there). */
enum dtype config_gemm_dtype(const struct config *c, bool on_gpu, const char *cpu_flags);

/* --gemm_kernel against the GEMMs it would run: 0, or -1 with the
 * combination named in err (a kernel named for fp32 GEMMs, or on a GPU). */
int config_check_gemm_kernel(const struct config *c, enum dtype gemm_dtype, bool on_gpu, char *err,
                             size_t err_len);
/* Whether a run on a GPU (--device as opened: cuda) can take --gpu_path
 * v2, the model's bf16 data path on device memory (model/gpt_acts.c:
 * acts_direct): 0, or -1 with err naming the combination v2 cannot run
 * (bf16 GEMMs and activations are its premise; full recompute and
 * sequence parallelism keep no bf16 store the kernels read; context
 * parallelism's ring has no device form on it yet). Never a quiet fall-back to v1's kernels. v1, and a run not on a
 * GPU (device_open refuses v2 there), always pass. */
int config_check_gpu_path(const struct config *c, char *err, size_t err_len);

/* What a grid can run (train/config/config_grid.c): 0 when the trainer
 * runs this configuration on grid g, else -1 with the reason (every rank
 * decides alike). */
struct grid;
int config_check_grid(const struct config *cfg, const struct grid *g, char err[CONFIG_ERR_LEN]);

#endif
