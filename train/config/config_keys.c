#include "config.h"
#include "crc32c.h"
#include "fileio.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum key_type { KEY_INT, KEY_LLONG, KEY_FLOAT, KEY_DOUBLE, KEY_BOOL, KEY_STRING, KEY_CHOICE };

enum { MAX_CHOICES = OPTIM_NUM_KINDS };

struct key {
    const char *name;
    enum key_type type;
    size_t offset;
    const char *default_value;
    const char *help;
    double min, max;                     /* numeric keys: inclusive range, but min_open */
    bool min_open;                       /* a float key's range excludes min (as stored: a float that
                                          * rounds to min is refused too) */
    const char *choices[MAX_CHOICES + 1]; /* KEY_CHOICE: names, index = enum value */
    bool planner_only; /* the planner's model keys: build/train refuses all but their defaults
                        * (config_check_grid) and leaves them out of its --help */
    const char *why;   /* numeric keys: why the range ends where it does, said when a value is refused */
};

#define F(field) offsetof(struct config, field)
#define NUM(lo, hi) .min = (lo), .max = (hi)
#define NUM_ABOVE(lo, hi) .min = (lo), .max = (hi), .min_open = true /* (lo, hi] */

static const struct key KEYS[] = {
    {"n_layer", KEY_INT, F(n_layer), "2", "transformer layers (L)", NUM(1, 1024)},
    {"d_model", KEY_INT, F(d_model), "64", "hidden size (C)", NUM(1, 65536)},
    {"n_head", KEY_INT, F(n_head), "4", "attention heads (NH); must divide d_model", NUM(1, 1024)},
    {"seq_len", KEY_INT, F(seq_len), "64", "sequence length (T)", NUM(1, 1 << 18)},
    {"max_seq_len", KEY_INT, F(max_seq_len), "0", "position-embedding rows (llm.c's max_seq_len), >= seq_len; 0: seq_len, or the --init_from file's", NUM(0, 1 << 18)},
    {"vocab_size", KEY_INT, F(vocab_size), "256", "vocabulary (V); padded to a multiple of 128 internally", NUM(2, 1 << 20)},
    {"arch", KEY_CHOICE, F(arch), "gpt2", "architecture: gpt2 (LayerNorm, GELU, biases, tied) or llama (RMSNorm, SwiGLU, GQA, RoPE, untied; sequence parallelism with fp32 activations; flash attention only as cp's ring)", .choices = {"gpt2", "llama"}},
    {"n_kv_head", KEY_INT, F(n_kv_head), "0", "key/value heads for GQA (llama); 0: n_head; must divide n_head", NUM(0, 1024)},
    {"ffn_dim", KEY_INT, F(ffn_dim), "0", "MLP inner size F (llama: each of SwiGLU's up and gate); 0: 4 * d_model", NUM(0, 1 << 20)},
    {"norm_eps", KEY_FLOAT, F(norm_eps), "1e-5", "llama: RMSNorm's eps", NUM_ABOVE(0, 1)},
    {"rope_theta", KEY_FLOAT, F(rope_theta), "10000", "llama: RoPE's base theta (LLaMA 3: 500000)", NUM_ABOVE(0, 1e9)},
    {"rope_scaled", KEY_BOOL, F(rope_scaled), "0", "llama: LLaMA 3.1's RoPE frequency scaling (factor 8, low 1, high 4, context 8192)", NUM(0, 1)},
    {"init_std", KEY_FLOAT, F(init_std), "0.02", "std of the normal weight init (GPT-2), in (0, 10]: at 0 every weight starts at 0 and nothing trains", NUM_ABOVE(0, 10), .why = "at 0 every weight starts at 0 and nothing trains"},
    {"micro_batch", KEY_INT, F(micro_batch), "4", "sequences per micro-batch (B)", NUM(1, 1 << 20)},
    {"grad_accum", KEY_INT, F(grad_accum), "1", "micro-batches accumulated per optimizer step", NUM(1, 1 << 20)},
    {"optimizer", KEY_CHOICE, F(optimizer), "adamw", "update rule: adamw, adamw8bit (m and v in 8 bits, block-wise), sgd (momentum), sgd8bit (its momentum in 8 bits), lion (Chen et al. 2023: the sign of an interpolation, one momentum), lion8bit (its momentum in 8 bits), adafactor (Shazeer and Stern 2018: a factored second moment, n + m floats per n x m matrix, update clipping, the run's LR schedule); a rule reads only its own keys of beta1, beta2, eps, momentum, nesterov, min_8bit_size, adafactor_*: another's set, even to its default, is an error", .choices = {"adamw", "adamw8bit", "sgd", "sgd8bit", "lion", "lion8bit", "adafactor"}},
    {"momentum", KEY_FLOAT, F(momentum), "0.9", "sgd, sgd8bit: momentum", NUM(0, 0.999999)},
    {"nesterov", KEY_BOOL, F(nesterov), "0", "sgd, sgd8bit: Nesterov momentum", NUM(0, 1)},
    {"adafactor_beta1", KEY_FLOAT, F(adafactor_beta1), "0", "adafactor: a first moment of the clipped update with this decay; 0: none (Shazeer and Stern's default: no bytes for it)", NUM(0, 0.999999)},
    {"adafactor_decay", KEY_FLOAT, F(adafactor_decay), "0.8", "adafactor: the second moment's decay beta2_t = 1 - t^-c at step t, this c (the paper's 0.8)", NUM(0, 1)},
    {"adafactor_eps", KEY_FLOAT, F(adafactor_eps), "1e-30", "adafactor: eps1, added to every squared gradient; above 0 (a zero gradient, as on the vocabulary's padding rows, would give 0/0)", NUM_ABOVE(0, 1), .why = "a zero gradient would give 0/0 = NaN"},
    {"adafactor_clip", KEY_FLOAT, F(adafactor_clip), "1.0", "adafactor: update clipping threshold d: a tensor's update is divided by max(1, RMS(update) / d)", NUM(1e-6, 1e30)},
    {"min_8bit_size", KEY_INT, F(min_8bit_size), "4096", "the 8-bit rules (adamw8bit, sgd8bit, lion8bit): tensors with fewer elements keep 32-bit states", NUM(0, INT_MAX)},
    {"recompute", KEY_CHOICE, F(recompute), "none", "activation checkpointing: keep all, drop attention probabilities (selective; with --attention flash there are none to drop: the same as none), or keep only layer inputs (full)", .choices = {"none", "selective", "full"}},
    {"attention", KEY_CHOICE, F(attention), "plain", "attention kernels: plain (saves the B NH T^2 probabilities) or flash (saves each row's log-sum-exp, B NH T fp32, and recomputes the probabilities in backward; FlashAttention-2: on a GPU the fused kernel with bf16 operands, on the CPU the same algorithm in fp32); with flash, recompute selective is the same as none (nothing left to drop)", .choices = {"plain", "flash"}},
    {"steps", KEY_INT, F(steps), "100", "optimizer steps to run", NUM(0, INT_MAX)},
    {"warmup_steps", KEY_INT, F(warmup_steps), "0", "linear LR warmup steps", NUM(0, INT_MAX)},
    {"lr", KEY_FLOAT, F(lr), "1e-3", "peak learning rate, in (0, 10]: at 0 (-0 and values that round to 0 as a float included) nothing trains", NUM_ABOVE(0, 10), .why = "at 0 nothing trains"},
    {"lr_schedule", KEY_CHOICE, F(lr_schedule), "cosine", "LR after warmup", .choices = {"cosine", "constant"}},
    {"min_lr_frac", KEY_FLOAT, F(min_lr_frac), "0.1", "cosine floor as a fraction of lr", NUM(0, 1)},
    {"weight_decay", KEY_FLOAT, F(weight_decay), "0.1", "weight decay: decoupled (w -= lr wd w) for adamw, lion and their 8-bit forms; L2 added to the gradient (PyTorch's SGD) for sgd and sgd8bit", NUM(0, 10)},
    {"decay_targets", KEY_CHOICE, F(decay_targets), "matrices", "which tensors decay: 2-D weights only, or all", .choices = {"matrices", "all"}},
    {"beta1", KEY_FLOAT, F(beta1), "0.9", "adamw, adamw8bit: first-moment decay; lion, lion8bit: the interpolation of m and g whose sign is the update (Lion's beta1)", NUM(0, 0.999999)},
    {"beta2", KEY_FLOAT, F(beta2), "0.95", "adamw, adamw8bit: second-moment decay; lion, lion8bit: the momentum's decay (Lion's beta2), whose default, where beta2 is not set, is the paper's 0.99 instead", NUM(0, 0.999999)},
    {"eps", KEY_FLOAT, F(eps), "1e-8", "adamw, adamw8bit: epsilon, in (0, 1]: the update divides by sqrt(v) + eps, and at 0 an entry whose gradient is 0 (the vocabulary's padding rows) is 0/0 = NaN", NUM_ABOVE(0, 1), .why = "adamw's update divides by sqrt(v) + eps: at 0 an entry whose gradient is 0 is 0/0 = NaN"},
    {"grad_clip", KEY_FLOAT, F(grad_clip), "1.0", "clip the global gradient norm to this (0 disables)", NUM(0, 1e30)},
    {"param_dtype", KEY_CHOICE, F(param_dtype), "bf16", "working weights; bf16 keeps an fp32 master copy", .choices = {"fp32", "bf16"}},
    {"grad_dtype", KEY_CHOICE, F(grad_dtype), "bf16", "stored gradients", .choices = {"fp32", "bf16"}},
    {"act_dtype", KEY_CHOICE, F(act_dtype), "bf16", "activations saved for backward", .choices = {"fp32", "bf16"}},
    {"rounding", KEY_CHOICE, F(rounding), "nearest", "fp32 master -> bf16 params rounding", .choices = {"nearest", "stochastic"}},
    {"train_data", KEY_STRING, F(train_data), "data/kjv_train.bin", "training token shard(s); a glob pattern selects several"},
    {"val_data", KEY_STRING, F(val_data), "data/kjv_val.bin", "validation token shard(s); empty disables validation"},
    {"shuffle", KEY_BOOL, F(shuffle), "1", "1: random batch order each epoch; 0: sequential", NUM(0, 1)},
    {"val_every", KEY_INT, F(val_every), "25", "validate every N steps (and at the end); 0 disables", NUM(0, INT_MAX)},
    {"val_batches", KEY_INT, F(val_batches), "8", "micro-batches per validation", NUM(1, INT_MAX)},
    {"seed", KEY_LLONG, F(seed), "1337", "seed for init, shuffling, rounding and sampling", NUM(0, 9.2e18)},
    {"init_from", KEY_STRING, F(init_from), "", "start from an llm.c model file instead of random init"},
    {"save", KEY_STRING, F(save), "", "write an llm.c model file at the end"},
    {"resume", KEY_STRING, F(resume), "", "continue from a resume state (bit-exact)"},
    {"save_state", KEY_STRING, F(save_state), "", "write a resume state at the end (and every save_state_every steps)"},
    {"save_state_every", KEY_INT, F(save_state_every), "0", "steps between resume states; 0: only at the end", NUM(0, INT_MAX)},
    {"allow_data_change", KEY_BOOL, F(allow_data_change), "0", "1: resume even if train_data is not the data the state was saved with (the data position is kept; the log says so)", NUM(0, 1)},
    {"on_nonfinite", KEY_CHOICE, F(on_nonfinite), "stop", "a NaN/Inf loss or gradient norm: stop with an error before the update (nothing saved), or skip_step: drop that update and go on", .choices = {"stop", "skip_step"}},
    {"max_skipped_steps", KEY_INT, F(max_skipped_steps), "10", "on_nonfinite skip_step: stop once more than this many updates were dropped (over the run, resumes included)", NUM(0, INT_MAX)},
    {"log_json", KEY_STRING, F(log_json), "", "also write JSON-lines metrics to this file"},
    {"trace", KEY_STRING, F(trace), "", "write a Chrome trace-event timeline of the run to this file (one track per rank: steps, forward/backward per micro-batch, collectives, optimizer, validation; open in https://ui.perfetto.dev)"},
    {"trace_events", KEY_INT, F(trace_events), "0", "trace: events kept per rank (later ones are counted as dropped); 0: enough for the run's steps, from its size", NUM(0, 1 << 26)},
    {"sample_tokens", KEY_INT, F(sample_tokens), "0", "generate this many tokens of text at the end", NUM(0, 1 << 20)},
    {"sample_temperature", KEY_FLOAT, F(sample_temperature), "0.8", "softmax temperature for sampling", NUM(1e-3, 100)},
    {"sample_prompt", KEY_STRING, F(sample_prompt), "And God said", "text the sample continues"},
    {"zero", KEY_INT, F(zero), "0", "ZeRO stage over the data-parallel ranks: 0 (DDP), 1 (optimizer states), 2 (+ grads), 3 (+ params)", NUM(0, 3)},
    {"tp", KEY_INT, F(tp), "1", "tensor-parallel degree: heads, FC features and vocabulary split over tp ranks (Megatron-LM)", NUM(1, 1024)},
    {"sequence_parallel", KEY_BOOL, F(sequence_parallel), "0", "with tp > 1: LayerNorms, residual adds and the stage boundary on each tp rank's seq_len/tp positions, all-gather/reduce-scatter instead of tp's all-reduces (Korthikanti et al. 2022); tp must divide seq_len; a no-op at tp = 1", NUM(0, 1)},
    {"cp", KEY_INT, F(cp), "1", "context-parallel degree: each micro-batch's seq_len positions cut into 2 cp chunks, cp rank r holding chunks r and 2 cp - 1 - r (the load-balanced causal split); ring attention over the cp ranks (needs --attention flash); gradients reduced and ZeRO sharded over dp x cp; seq_len a multiple of 2 cp", NUM(1, 1024)},
    {"pp", KEY_INT, F(pp), "1", "pipeline-parallel degree: stages, each a range of layers (the first also holds the embedding, the last the head)", NUM(1, PIPELINE_MAX_STAGES)},
    {"schedule", KEY_CHOICE, F(schedule), "1f1b", "pipeline schedule of a step's grad_accum micro-batches: gpipe (all forwards, then all backwards; holds every micro-batch) or 1f1b (one forward, one backward; stage s holds min(pp - s, grad_accum)) or interleaved (1F1B over virtual_stages model chunks per stage; grad_accum a multiple of pp)", .choices = {"gpipe", "1f1b", "interleaved"}},
    {"virtual_stages", KEY_INT, F(virtual_stages), "1", "model chunks per pipeline stage under --schedule interleaved (2 or more; 1 for gpipe and 1f1b): stage s holds chunks s, s + pp, ...", NUM(1, RANK_MAX_CHUNKS)},
    {"pp_layers", KEY_STRING, F(pp_layers), "", "layers per pipeline stage, e.g. 3,3,2 (pp counts summing to n_layer, pp x virtual_stages under the interleaved schedule, one per model chunk; 0: a stage of only the embedding or only the head); empty: an even split, the first n_layer % pp stages one more"},
    {"overlap", KEY_BOOL, F(overlap), "1", "hide collectives behind compute: ZeRO-3 prefetches the next unit's all-gather, ZeRO-2/3 reduce-scatter in the background, ZeRO-0 all-reduces gradient buckets during the last backward; 0: wait for each at once (bitwise the same results)", NUM(0, 1)},
    {"ddp_bucket_mb", KEY_DOUBLE, F(ddp_bucket_mb), "25", "ZeRO-0: MiB of gradients per all-reduce bucket, filled with whole units in backward order (PyTorch DDP's default); smaller buckets start sooner, each costs a call", NUM(0, 1048576)},
    {"explain", KEY_INT, F(explain), "0", "before training, 1: print the shard map (who owns what); 2: also each unit's life through one step (ZeRO's all_gather, use, release, reduce_scatter in order, with the bytes live beside their theory)", NUM(0, 2)},
    {"gemm_dtype", KEY_CHOICE, F(gemm_dtype), "auto", "the layer GEMMs' operands: fp32 (OpenBLAS's sgemm on the CPU, cuBLAS without TF32 on a GPU), bf16 (operands rounded to bf16, fp32 accumulation: on a GPU's tensor cores, or on the CPU by --gemm_kernel's choice: oneDNN, which needs AMX-BF16 or AVX512-BF16, or the reference; the attention's own products stay fp32), or auto (bf16 where param_dtype is bf16 and the machine has bf16 matrix units, else fp32)", .choices = {"fp32", "bf16", "auto"}},
    {"gemm_kernel", KEY_CHOICE, F(gemm_kernel), "auto", "what runs the CPU's bf16 GEMMs: onednn (oneDNN's matmul; needs AVX512-BF16 or AMX-BF16, and oneDNN's ISA not capped below them by DNNL_MAX_CPU_ISA), reference (the project's reference bf16 GEMM: operands rounded to bf16, products and sums in fp32 on OpenBLAS's sgemm; any CPU, slower), or auto (onednn; where it cannot run, the run is refused naming reference); naming one with gemm_dtype auto asks for bf16 GEMMs where param_dtype is bf16", .choices = {"auto", "onednn", "reference"}},
    {"device", KEY_CHOICE, F(device), "auto", "where the model runs: cpu, or cuda (one GPU per rank by local rank; the CUDA build only, make cuda: docs/GPU.md); auto: cuda in the CUDA build when a GPU is present, else cpu", .choices = {"auto", "cpu", "cuda"}},
    {"threads", KEY_INT, F(threads), "2", "threads for BLAS and the elementwise kernels", NUM(1, 1024)},
    {"threads_adapt", KEY_BOOL, F(threads_adapt), "1", "1: between steps the team follows the cores other processes leave free (1 to threads; a run's numbers do not depend on it, docs/THREADS.md); 0: always threads", NUM(0, 1)},
    {"peak_flops", KEY_DOUBLE, F(peak_flops), "0", "peak FLOP/s for MFU; 0: measure at start-up", NUM(0, 1e30)},
    {"gpu_unverified", KEY_BOOL, F(gpu_unverified), "0", "1: the CUDA build runs on a GPU without make cuda-test's stamp for this build and that GPU (build-cuda/gpu_verified.stamp, docs/GPU.md), and what no CUDA test covers (--gpu_path v2 over several ranks); the banner and the run record say UNVERIFIED and why. The GPU test scripts pass it, since they run before the stamp exists. 0: such a run refuses, naming make cuda-test", NUM(0, 1)},
    {"gpu_path", KEY_CHOICE, F(gpu_path), "v1", "the GPU's kernels (docs/GPU.md): v1, the fp32 data path; v2, the bf16 data path of issue 24 (one GPU rank: make cuda-test runs it on one). Either runs on a GPU when make cuda-test passed there (the banner says what verified it). v2 on a run that is not on a GPU is an error", .choices = {"v1", "v2"}},
    {"watts", KEY_DOUBLE, F(watts), "0", "the power per device for the planner's energy E = t x P beside the measured joules (build/plan --watts); 0: on a GPU its enforced power limit (NVML), on the CPU none (the estimate is left out)", NUM(0, 1e9)},
    {"force", KEY_BOOL, F(force), "0", "1: allocate even when the memory check (theory + libraries vs MemAvailable and the cgroup limit) says the run will not fit; a warning instead of the refusal", NUM(0, 1)},
};

enum { NUM_KEYS = sizeof KEYS / sizeof KEYS[0] };

static const struct key *find_key(const char *name) {
    for (int i = 0; i < NUM_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

static void list_keys(char err[CONFIG_ERR_LEN], size_t used) {
    for (int i = 0; i < NUM_KEYS && used + 32 < CONFIG_ERR_LEN; i++)
        used += (size_t)snprintf(err + used, CONFIG_ERR_LEN - used, "%s%s", i ? ", " : "", KEYS[i].name);
}

enum { SHOWN_LEN = 256 };

/* s as an error message may show it: at most SHOWN_LEN - 1 bytes, control
 * bytes (a garbage file's, which would drive the terminal) as \xHH. */
static const char *shown(const char *s, char out[SHOWN_LEN]) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < SHOWN_LEN; p++)
        if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(out + n, SHOWN_LEN - n, "\\x%02x", *p);
        else out[n++] = (char)*p;
    out[n] = '\0';
    return out;
}

static int range_error(const struct key *k, const char *value, char err[CONFIG_ERR_LEN]) {
    char v[SHOWN_LEN];
    if (k->type == KEY_FLOAT || k->type == KEY_DOUBLE)
        snprintf(err, CONFIG_ERR_LEN, "bad value '%s' for %s: expected a number in %c%g, %g]%s%s%s", shown(value, v),
                 k->name, k->min_open ? '(' : '[', k->min, k->max,
                 k->min_open ? " (the lower end excluded, also where a float rounds to it)" : "",
                 k->why ? ": " : "", k->why ? k->why : "");
    else /* integer keys: the range in integers (INT_MAX, not 2.14748e+09) */
        snprintf(err, CONFIG_ERR_LEN, "bad value '%s' for %s: expected an integer in [%.0f, %.0f]", shown(value, v),
                 k->name, k->min, k->max);
    return -1;
}

static int set_value(struct config *c, const struct key *k, const char *value, char err[CONFIG_ERR_LEN]) {
    char *field = (char *)c + k->offset;
    char *end = NULL;
    errno = 0;
    switch (k->type) {
    case KEY_INT:
    case KEY_LLONG:
    case KEY_BOOL: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || v < k->min || v > k->max) return range_error(k, value, err);
        if (k->type == KEY_INT) *(int *)field = (int)v;
        else if (k->type == KEY_LLONG) *(long long *)field = v;
        else *(bool *)field = v != 0;
        return 0;
    }
    case KEY_FLOAT:
    case KEY_DOUBLE: {
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v) || v < k->min || v > k->max)
            return range_error(k, value, err);
        const double stored = k->type == KEY_FLOAT ? (double)(float)v : v;
        if (k->min_open && stored <= k->min) return range_error(k, value, err);
        if (k->type == KEY_FLOAT) *(float *)field = (float)v;
        else *(double *)field = v;
        return 0;
    }
    case KEY_STRING:
        if (strlen(value) >= CONFIG_PATH_LEN) {
            snprintf(err, CONFIG_ERR_LEN, "value for %s is longer than %d characters", k->name, CONFIG_PATH_LEN - 1);
            return -1;
        }
        strcpy(field, value);
        return 0;
    case KEY_CHOICE:
        for (int i = 0; k->choices[i]; i++)
            if (strcmp(k->choices[i], value) == 0) {
                *(int *)field = i;
                return 0;
            }
        char v[SHOWN_LEN];
        size_t n = (size_t)snprintf(err, CONFIG_ERR_LEN, "bad value '%s' for %s: valid choices are", shown(value, v),
                                    k->name);
        for (int i = 0; k->choices[i] && n < CONFIG_ERR_LEN; i++)
            n += (size_t)snprintf(err + n, CONFIG_ERR_LEN - n, " %s", k->choices[i]);
        return -1;
    }
    return -1;
}

/* The key named `key` ('-' read as '_': --init-from == init_from); NULL,
 * with err listing the keys, when there is none. */
static const struct key *lookup(const char *key, char err[CONFIG_ERR_LEN]) {
    char name[64];
    size_t n = strlen(key);
    if (n >= sizeof name) n = sizeof name - 1;
    for (size_t i = 0; i < n; i++) name[i] = key[i] == '-' ? '_' : key[i];
    name[n] = '\0';
    const struct key *k = find_key(name);
    if (!k) {
        char v[SHOWN_LEN];
        size_t used = (size_t)snprintf(err, CONFIG_ERR_LEN, "unknown key '%s'; valid keys: ", shown(key, v));
        list_keys(err, used);
    }
    return k;
}

/* Records that the user set k, if it is an optimizer key (even to its
 * default: check_optimizer_keys refuses it under a rule that ignores it). */
static void note_set(struct config *c, const struct key *k) {
    for (int o = 0; o < OKEY_NUM; o++)
        if (strcmp(k->name, optim_key_name((enum optim_key)o)) == 0) c->optim_keys_set |= 1u << o;
}

int config_set(struct config *c, const char *key, const char *value, char err[CONFIG_ERR_LEN]) {
    const struct key *k = lookup(key, err);
    if (!k || set_value(c, k, value, err) != 0) return -1;
    note_set(c, k);
    return 0;
}

bool config_rule_defaults(struct config *c) {
    const struct optim_rule *r = optim_rule(c->optimizer);
    if ((c->optim_keys_set & (1u << OKEY_BETA2)) || r->beta2 == 0.0f || c->beta2 == r->beta2) return false;
    c->beta2 = r->beta2;
    return true;
}

void config_defaults(struct config *c) {
    memset(c, 0, sizeof *c);
    char err[CONFIG_ERR_LEN];
    for (int i = 0; i < NUM_KEYS; i++)
        if (set_value(c, &KEYS[i], KEYS[i].default_value, err) != 0) {
            fprintf(stderr, "internal error: default of %s: %s\n", KEYS[i].name, err);
            abort();
        }
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
    return s;
}

static const char UTF8_BOM[] = "\xEF\xBB\xBF";

/* Lines are read whole (getline), however long: a fixed buffer would cut a
 * long line in two and parse its tail, a long comment's included, as a
 * line of its own. A NUL byte would hide the rest of its line, so a line
 * with one is refused. */
int config_load_stream(struct config *c, FILE *f, const char *name, char err[CONFIG_ERR_LEN]) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    int set_on[NUM_KEYS] = {0}; /* the line that set each key; 0: none */
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, '\0', (size_t)len)) {
            snprintf(err, CONFIG_ERR_LEN, "%s:%d: NUL byte in the line (a config is text)", name, lineno);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        /* a UTF-8 byte-order mark (editors on Windows write one) opens the
         * file, not its first key */
        bool bom = lineno == 1 && strncmp(line, UTF8_BOM, sizeof UTF8_BOM - 1) == 0;
        char *s = trim(bom ? line + sizeof UTF8_BOM - 1 : line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            char v[SHOWN_LEN];
            snprintf(err, CONFIG_ERR_LEN, "%s:%d: expected 'key = value', got '%s'", name, lineno, shown(s, v));
            rc = -1;
            break;
        }
        *eq = '\0';
        char inner[CONFIG_ERR_LEN];
        const struct key *k = lookup(trim(s), inner);
        int *first = k ? &set_on[k - KEYS] : NULL;
        if (first && *first) /* the later line would win without a word */
            snprintf(inner, sizeof inner, "%s is set twice, on lines %d and %d", k->name, *first, lineno);
        if (!k || (first && *first) || set_value(c, k, trim(eq + 1), inner) != 0) {
            snprintf(err, CONFIG_ERR_LEN, "%s:%d: %.*s", name, lineno, CONFIG_ERR_LEN - 300, inner);
            rc = -1;
        } else {
            note_set(c, k);
        }
        if (first) *first = lineno;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, CONFIG_ERR_LEN, "cannot read config %.400s: %s", name, strerror(errno));
        rc = -1;
    }
    free(line);
    return rc;
}

int config_load_file(struct config *c, const char *path, char err[CONFIG_ERR_LEN]) {
    /* before fopen: a FIFO blocks it for ever, a folder reads as empty (defaults, silently) */
    char e2[FILEIO_ERR_LEN];
    if (path_check_input(path, "config", e2) != 0) {
        snprintf(err, CONFIG_ERR_LEN, "%s", e2);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, CONFIG_ERR_LEN, "cannot open config %.400s: %s", path, strerror(errno));
        return -1;
    }
    int rc = config_load_stream(c, f, path, err);
    fclose(f);
    return rc;
}

/* The option at argv[*i], "--key value" (two arguments) or "--key=value"
 * (one); *i moves past it. */
static int next_option(int argc, char **argv, int *i, char key[CONFIG_PATH_LEN], const char **value,
                       char err[CONFIG_ERR_LEN]) {
    const char *a = argv[*i], *eq = strchr(a, '=');
    char v[SHOWN_LEN];
    if (strncmp(a, "--", 2) != 0) {
        snprintf(err, CONFIG_ERR_LEN, "unexpected argument '%s': options are --key value or --key=value (see --help)",
                 shown(a, v));
        return -1;
    }
    if (eq) {
        snprintf(key, CONFIG_PATH_LEN, "%.*s", (int)(eq - a - 2), a + 2);
        *value = eq + 1;
        *i += 1;
        return 0;
    }
    if (*i + 1 >= argc) {
        snprintf(err, CONFIG_ERR_LEN, "option %s needs a value", shown(a, v));
        return -1;
    }
    snprintf(key, CONFIG_PATH_LEN, "%s", a + 2);
    *value = argv[*i + 1];
    *i += 2;
    return 0;
}

int config_parse_args(struct config *c, int argc, char **argv, bool *help, char err[CONFIG_ERR_LEN]) {
    *help = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) *help = true;
    if (*help) return 0;
    /* two passes: the config files first, then the other options over them */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 1; i < argc;) {
            char key[CONFIG_PATH_LEN];
            const char *value;
            if (next_option(argc, argv, &i, key, &value, err) != 0) return -1;
            bool is_config = strcmp(key, "config") == 0;
            if (pass == 0 && is_config && c->n_config_files == CONFIG_FILES_MAX) {
                snprintf(err, CONFIG_ERR_LEN, "more than %d --config files", CONFIG_FILES_MAX);
                return -1;
            }
            if (pass == 0 && is_config && config_load_file(c, value, err) != 0) return -1;
            if (pass == 0 && is_config) c->config_files[c->n_config_files++] = value;
            if (pass == 1 && !is_config && config_set(c, key, value, err) != 0) return -1;
        }
    config_rule_defaults(c);
    return 0;
}

static void format_value(const struct config *c, const struct key *k, char *out, size_t n);

/* The optimizer keys that are not the chosen rule's must be left unset
 * and keep their defaults (a value there, even the default written out,
 * would be ignored without a word). */
static int check_optimizer_keys(const struct config *c, char err[CONFIG_ERR_LEN]) {
    const struct optim_rule *r = optim_rule(c->optimizer);
    struct config d;
    config_defaults(&d);
    for (int k = 0; k < OKEY_NUM; k++) {
        if (r->keys & (1u << k)) continue;
        const struct key *key = find_key(optim_key_name((enum optim_key)k));
        char mine[64], dflt[64];
        format_value(c, key, mine, sizeof mine);
        format_value(&d, key, dflt, sizeof dflt);
        const bool set = c->optim_keys_set & (1u << k);
        if (!set && strcmp(mine, dflt) == 0) continue;
        size_t n = (size_t)snprintf(err, CONFIG_ERR_LEN, "%s = %s%s does not belong to optimizer %s (its keys:",
                                    key->name, mine, set && strcmp(mine, dflt) == 0 ? " (set explicitly, to its default)" : "",
                                    r->name);
        for (int j = 0; j < OKEY_NUM && n < CONFIG_ERR_LEN; j++)
            if (r->keys & (1u << j))
                n += (size_t)snprintf(err + n, CONFIG_ERR_LEN - n, " %s", optim_key_name((enum optim_key)j));
        if (n < CONFIG_ERR_LEN) snprintf(err + n, CONFIG_ERR_LEN - n, "); leave it out or choose a rule that reads it");
        return -1;
    }
    return 0;
}

int config_validate(const struct config *c, char err[CONFIG_ERR_LEN]) {
    if (check_optimizer_keys(c, err) != 0) return -1;
    if (c->d_model % c->n_head != 0) {
        snprintf(err, CONFIG_ERR_LEN, "n_head (%d) must divide d_model (%d)", c->n_head, c->d_model);
        return -1;
    }
    if (c->n_kv_head != 0 && c->n_head % c->n_kv_head != 0) {
        snprintf(err, CONFIG_ERR_LEN, "n_kv_head (%d) must divide n_head (%d)", c->n_kv_head, c->n_head);
        return -1;
    }
    if (c->param_dtype == DTYPE_FP32 && c->rounding == ROUND_STOCHASTIC) {
        snprintf(err, CONFIG_ERR_LEN, "rounding = stochastic needs param_dtype = bf16 (fp32 params are never rounded)");
        return -1;
    }
    if (c->steps == 0 && c->save_state[0]) { /* the loop never runs, so no state would be written */
        snprintf(err, CONFIG_ERR_LEN,
                 "steps = 0 with save_state %.300s: no step runs, so no resume state would be written "
                 "(set steps >= 1, or drop save_state; save writes a model file at step 0)",
                 c->save_state);
        return -1;
    }
    if (c->max_seq_len != 0 && c->max_seq_len < c->seq_len) {
        snprintf(err, CONFIG_ERR_LEN, "max_seq_len (%d) must be 0 or at least seq_len (%d): a sequence uses one "
                 "position-table row per token", c->max_seq_len, c->seq_len);
        return -1;
    }
    /* every rule shrinks each weight by lr x weight_decay of itself per
     * step (decoupled, or through the gradient for sgd); in float, as the
     * rules compute 1 - lr x weight_decay */
    if (c->lr * c->weight_decay > 1.0f) {
        snprintf(err, CONFIG_ERR_LEN, "lr %g x weight_decay %g = %g: above 1 the decay flips every weight's sign each "
                 "step, and from 2 on the weights grow without bound to Inf (lower lr or weight_decay)",
                 (double)c->lr, (double)c->weight_decay, (double)(c->lr * c->weight_decay));
        return -1;
    }
    if (c->vocab_size > 65536) {
        snprintf(err, CONFIG_ERR_LEN, "vocab_size %d does not fit the uint16 token shards (max 65536)", c->vocab_size);
        return -1;
    }
    return config_check_sizes(c, err);
}

int config_warnings(const struct config *c, FILE *out) {
    int n = 0;
    if (c->warmup_steps > c->steps) {
        fprintf(out, "warning: warmup_steps %d is longer than the run (steps %d): the learning rate never "
                     "reaches lr %g\n", c->warmup_steps, c->steps, (double)c->lr);
        n++;
    }
    return n;
}

static void format_value(const struct config *c, const struct key *k, char *out, size_t n) {
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(out, n, "%d", *(const int *)field); break;
    case KEY_LLONG: snprintf(out, n, "%lld", *(const long long *)field); break;
    case KEY_BOOL: snprintf(out, n, "%d", *(const bool *)field ? 1 : 0); break;
    /* the shortest form that reads back to the same value (plain %g keeps
     * only 6 digits, so config_print did not round-trip) */
    case KEY_FLOAT: {
        const float x = *(const float *)field;
        for (int p = 6; p <= 9; p++) {
            snprintf(out, n, "%.*g", p, (double)x);
            if ((float)strtod(out, NULL) == x) break;
        }
        break;
    }
    case KEY_DOUBLE: {
        const double x = *(const double *)field;
        for (int p = 6; p <= 17; p++) {
            snprintf(out, n, "%.*g", p, x);
            if (strtod(out, NULL) == x) break;
        }
        break;
    }
    case KEY_STRING: snprintf(out, n, "%s", field); break;
    case KEY_CHOICE: snprintf(out, n, "%s", k->choices[*(const int *)field]); break;
    }
}

void config_print_help(FILE *f, const char *program, bool planner_keys) {
    fprintf(f, "usage: %s [--config FILE] [--key value ...]\n\n", program);
    fprintf(f, "Keys may be set in a config file (key = value) or on the command line\n");
    fprintf(f, "(--key value, --key=value or --key-name value); the command line wins.\n\n");
    for (int i = 0; i < NUM_KEYS; i++) {
        const struct key *k = &KEYS[i];
        if (k->planner_only && !planner_keys) continue;
        char choices[128] = "";
        if (k->type == KEY_CHOICE) {
            size_t n = (size_t)snprintf(choices, sizeof choices, " {");
            for (int j = 0; k->choices[j]; j++)
                n += (size_t)snprintf(choices + n, sizeof choices - n, "%s%s", j ? "|" : "", k->choices[j]);
            snprintf(choices + n, sizeof choices - n, "}");
        }
        fprintf(f, "  --%-20s %s%s (default: %s)\n", k->name, k->help, choices,
                *k->default_value ? k->default_value : "\"\"");
    }
}

void config_print_optimizer(FILE *f, const struct config *c) {
    const struct optim_rule *r = optim_rule(c->optimizer);
    fprintf(f, "optimizer: %s", r->name);
    for (int o = 0; o < OKEY_NUM; o++) {
        if (!(r->keys & (1u << o))) continue;
        const struct key *k = find_key(optim_key_name((enum optim_key)o));
        char v[64];
        format_value(c, k, v, sizeof v);
        const bool ruled = o == OKEY_BETA2 && r->beta2 != 0.0f && !(c->optim_keys_set & (1u << o));
        fprintf(f, ", %s %s%s", k->name, v, ruled ? " (this rule's default)" : "");
    }
    char wd[64];
    format_value(c, find_key("weight_decay"), wd, sizeof wd);
    fprintf(f, ", weight_decay %s\n", wd);
}

/* Whether key k is an optimizer key the user left unset at the key
 * table's default: config_print writes it as a comment, so that the text
 * loads back with the same keys set (and stays valid for a rule that does
 * not read it). */
static bool unset_optimizer_default(const struct config *c, const struct key *k) {
    for (int o = 0; o < OKEY_NUM; o++) {
        if (strcmp(k->name, optim_key_name((enum optim_key)o)) != 0) continue;
        if (c->optim_keys_set & (1u << o)) return false;
        struct config d;
        config_defaults(&d);
        char mine[64], dflt[64];
        format_value(c, k, mine, sizeof mine);
        format_value(&d, k, dflt, sizeof dflt);
        return strcmp(mine, dflt) == 0;
    }
    return false;
}

void config_print(FILE *f, const struct config *c) {
    for (int i = 0; i < NUM_KEYS; i++) {
        char v[CONFIG_PATH_LEN + 32];
        format_value(c, &KEYS[i], v, sizeof v);
        fprintf(f, "%s%s = %s\n", unset_optimizer_default(c, &KEYS[i]) ? "# (not set) " : "", KEYS[i].name, v);
    }
}

int config_num_keys(void) { return NUM_KEYS; }

const char *config_key_name(int i) { return KEYS[i].name; }

const char *config_choice_name(const char *key, int value) {
    const struct key *k = find_key(key);
    if (!k || k->type != KEY_CHOICE || value < 0 || value >= MAX_CHOICES || !k->choices[value]) return "?";
    return k->choices[value];
}

uint32_t config_key_hash(const struct config *c, int i) {
    char v[CONFIG_PATH_LEN + 32];
    format_value(c, &KEYS[i], v, sizeof v);
    return crc32c(0, v, strlen(v));
}
