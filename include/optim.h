/* Update rules on a contiguous range of a flat buffer (a whole model, or the
 * shard a rank owns), plus the LR schedule and global-norm clipping. The
 * caller walks the layout's tensor table so each call sees one tensor (or the
 * part of it inside a shard) and knows whether it decays. */
#ifndef SHARDLAB_OPTIM_H
#define SHARDLAB_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "counters.h"
#include "dtype.h"
#include "mem_space.h"

/* The update rules, in the order of the config's `optimizer` choices (a
 * resume state stores the index: new rules go at the end). */
enum optimizer_kind {
    OPTIM_ADAMW, OPTIM_ADAMW8BIT, OPTIM_SGD, OPTIM_SGD8BIT, OPTIM_LION, OPTIM_LION8BIT, OPTIM_ADAFACTOR,
    OPTIM_NUM_KINDS
};
enum decay_targets { DECAY_MATRICES, DECAY_ALL };
enum lr_schedule { LR_COSINE, LR_CONSTANT };

/* Learning-rate schedule: linear warmup to lr, then constant or cosine
 * decay to lr * min_lr_frac at the last of `steps` steps. */
struct lr_options {
    float lr, min_lr_frac;
    int warmup_steps, steps;
    enum lr_schedule schedule;
};

/* Everything the update rules need from a run's configuration. */
struct optim_options {
    enum optimizer_kind kind;
    struct lr_options lr;
    float beta1, beta2, eps, weight_decay, grad_clip;
    enum decay_targets decay_targets;
    float momentum;       /* sgd, sgd8bit */
    bool nesterov;        /* sgd, sgd8bit */
    int min_8bit_size;    /* the 8-bit rules: smaller tensors keep fp32 states */
    float adafactor_beta1, adafactor_decay, adafactor_eps, adafactor_clip; /* adafactor (below) */
};

/* The configuration keys an update rule may read besides lr and its
 * schedule, weight_decay and grad_clip (which every rule reads). */
enum optim_key {
    OKEY_BETA1, OKEY_BETA2, OKEY_EPS, OKEY_MOMENTUM, OKEY_NESTEROV, OKEY_MIN_8BIT_SIZE,
    OKEY_ADAFACTOR_BETA1, OKEY_ADAFACTOR_DECAY, OKEY_ADAFACTOR_EPS, OKEY_ADAFACTOR_CLIP, OKEY_NUM
};

/* What a rule keeps per parameter and which keys are its own
 * (optim/optim_rules.c, the one table of them): `states` per-element
 * moments (fp32, or 8-bit codes with an fp32 maximum per block where
 * `quantized`), state 1 signed, state 2 (AdamW's v) unsigned. */
struct optim_rule {
    const char *name;          /* the config's choice */
    int states;                /* 1 or 2 per-element states (adafactor: 0, its statistics are its own) */
    bool quantized;            /* block-wise 8-bit (tensors >= min_8bit_size; smaller ones fp32) */
    enum optimizer_kind twin;  /* the 32-bit form of a quantized rule; the 8-bit form of a 32-bit one, or itself */
    unsigned keys;             /* bit k set: optim_key k belongs to the rule */
    const char *state_name[2]; /* what each state is, for the memory table ("adam m") */
    float beta2;               /* beta2 where the user did not set it; 0: the key table's (AdamW's 0.95) */
};

const struct optim_rule *optim_rule(enum optimizer_kind k);
/* The config key's name of k ("beta1"). */
const char *optim_key_name(enum optim_key k);
/* The rule's state bytes per parameter in the seeds' table's terms, for
 * plans: 4 per fp32 state, 1 + 4/256 per 8-bit state (every tensor
 * quantized), 0 for adafactor (its n + m floats per n x m matrix vanish
 * beside n m; the first moment adds 4 when beta1 > 0). The run's theory
 * counts the bytes exactly instead (train/theory/theory_rank.c). */
double optim_bytes_per_param(const struct optim_rule *r, float adafactor_beta1);
/* Bytes of optimizer state for a rule: n_q quantized elements in
 * n_blocks blocks and n_f32 elements with fp32 states, per state. */
double optim_state_bytes(const struct optim_rule *r, size_t n_q, size_t n_blocks, size_t n_f32);

struct adamw_hparams {
    float lr, beta1, beta2, eps;
    float weight_decay;  /* 0 for tensors that do not decay */
    float grad_scale;    /* multiplies every gradient (clipping) */
    int64_t t;           /* 1-based step, for bias correction */
};

/* Where the updated fp32 weights go besides w itself: nowhere (fp32 params
 * are w), or rounded into bf16 params (nearest-even, or stochastic with
 * noise drawn from (seed, step, element index)). */
struct param_writeback {
    bf16 *params;             /* NULL: w are the params */
    enum rounding_mode rounding;
    uint64_t seed;
    uint64_t noise_index;     /* global element index of element 0 of this range */
};

/* AdamW (Loshchilov & Hutter 2019) as PyTorch does it: decoupled decay
 * w -= lr*wd*w first, then the bias-corrected Adam step. grad is in
 * grad_dtype; m, v and w are fp32. */
void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);

/* A step's constants of AdamW and 8-bit AdamW: step_size = lr / (1 -
 * beta1^t) and isb = 1 / sqrt(1 - beta2^t) (Kingma & Ba's bias
 * corrections), decay = 1 - lr weight_decay (decoupled, Loshchilov &
 * Hutter). Every implementation, the GPU's included, takes them from here,
 * so all compute the same floats. */
struct adamw_step_consts {
    float step_size, isb, decay;
};
struct adamw_step_consts adamw_step_consts(const struct adamw_hparams *h);

/* Learning rate for 0-based step. */
float lr_at(const struct lr_options *o, int step);

/* Factor that brings the global norm down to max_norm (1 when max_norm is 0
 * or the norm is already within it). */
float clip_scale(double global_norm, float max_norm);

/* ---- 8-bit AdamW (Dettmers, Lewis, Shleifer, Zettlemoyer 2021, "8-bit
 * Optimizers via Block-wise Quantization", arXiv:2110.02861; checked against
 * bitsandbytes' kOptimizerStatic8bit2StateBlockwise). THEORY.md section 2. */

enum { QMAP_SIZE = 256, ADAMW8BIT_BLOCK = 256 };

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7,
 * total_bits=8): 256 float32 codes in [-1, 1] (signed, for m) or [0, 1]
 * (unsigned, for v), sorted ascending, into a caller-owned array. */
void qmap_dynamic(float map[QMAP_SIZE], bool is_signed);

/* bitsandbytes (quantize_2D / dQuantize<0>) walks a 7-level binary tree from
 * pivot 127 to an even leaf p, then rounds at the float midpoint between p and
 * the neighbour on x's side, with an exact tie going to p. Equivalently: find
 * the bracket map[k] < x <= map[k+1], round at fl((map[k]+map[k+1])*0.5) and
 * send an exact tie to whichever of k, k+1 is even. That is what this does,
 * with a branch-free lower_bound. x below map[0] gives 0, above map[255] 255;
 * NaN gives 0 (every comparison is false), like the reference. */
/* Which kernels quantize and dequantize: the scalar code below, or AVX2 /
 * AVX-512 versions of it that give the same codes and values bit for bit
 * (optim/qmap_codec.c). Picked once, when an index is built, from what the
 * CPU supports. */
enum qmap_isa { QMAP_ISA_SCALAR, QMAP_ISA_AVX2, QMAP_ISA_AVX512, QMAP_NUM_ISAS };

/* A search index over a sorted code book: below[b] = how many codes are
 * less than the smallest float whose order key (the bits made monotone) has
 * top 16 bits b. A lookup then leaves at most a few codes to compare, where
 * the binary search takes 8 dependent loads: it made the 8-bit step 50x
 * slower than AdamW's. The result equals qmap_nearest's exactly.
 *
 * For the vector kernels, the nearest code is a step function of x with its
 * steps at the midpoints (ties to the even code), and no bucket of 2^16 keys
 * holds more than one midpoint on these maps: step[b] says which code the
 * bucket starts at and where in it (the key's low 16 bits) the next one
 * starts, so one table load and one compare find a code. The build checks
 * the map allows it, and picks the kernels (qmap_isa_best), scalar if not. */
struct qmap_index {
    uint16_t below[1 << 16];
    uint32_t step[1 << 16];  /* bits 24-31: the bucket's first code; bits 0-16: the low 16 key bits
                                of the midpoint to the next code, 0x10000 where none lies in the bucket */
    uint8_t planes[4][QMAP_SIZE]; /* byte p of map[c] (little-endian): AVX-512 dequantizes by byte lookups */
    uint16_t n_negative;     /* codes with the sign bit set (they come first: the map is sorted) */
    enum qmap_isa isa;       /* the kernels used with this index */
};

/* The best kernels this CPU runs, and whether it runs `isa`. */
enum qmap_isa qmap_isa_best(void);
bool qmap_isa_available(enum qmap_isa isa);

void qmap_index_build(struct qmap_index *ix, const float map[QMAP_SIZE]);

static inline uint32_t qmap_order_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Given k = the number of codes < x: round at the midpoint of the bracket
 * map[k-1] < x <= map[k], an exact tie to the even index. */
static inline uint8_t qmap_round(const float map[QMAP_SIZE], unsigned k, float x) {
    if (k == 0) return 0;
    if (k == QMAP_SIZE) return QMAP_SIZE - 1;
    const unsigned lo = k - 1, hi = k;
    const float mid = (map[lo] + map[hi]) * 0.5f;
    if (x < mid) return (uint8_t)lo;
    if (x > mid) return (uint8_t)hi;
    return (uint8_t)((lo & 1u) ? hi : lo);
}

static inline uint8_t qmap_nearest(const float map[QMAP_SIZE], float x) {
    unsigned k = 0; /* number of entries < x, 0..256 */
    for (unsigned step = QMAP_SIZE / 2; step; step >>= 1)
        if (map[k + step - 1] < x) k += step;
    return qmap_round(map, k, x);
}

/* qmap_nearest through the index. NaN keeps qmap_nearest's answer (0). */
static inline uint8_t qmap_nearest_indexed(const float map[QMAP_SIZE], const struct qmap_index *ix, float x) {
    if (x != x) return 0;
    unsigned k = ix->below[qmap_order_key(x) >> 16];
    while (k < QMAP_SIZE && map[k] < x) k++;
    return qmap_round(map, k, x);
}

/* Block-wise codec (optim/qmap_codec.c) with isa's kernels, at most ix->isa
 * (what the index was built for, on this CPU); ix NULL: scalar (dequantize
 * only; quantize needs the index).
 * Quantize: q[i] = qmap_nearest(map, x[i] / absmax), absmax > 0; with
 * sign_fix (8-bit AdamW's m, as bitsandbytes) a code whose sign differs from
 * x[i]'s moves one code toward x[i]'s side, in 8-bit wrap-around arithmetic.
 * Dequantize: out[i] = map[q[i]] * absmax. */
void qmap_quantize(const float map[QMAP_SIZE], const struct qmap_index *ix, enum qmap_isa isa, float absmax,
                   const float *x, size_t n, bool sign_fix, uint8_t *q);
void qmap_dequantize(const float map[QMAP_SIZE], const struct qmap_index *ix, enum qmap_isa isa, float absmax,
                     const uint8_t *q, size_t n, float *out);


/* Number of absmax entries (per state) for a range of n elements. */
size_t adamw8bit_blocks(size_t n);

/* AdamW with m and v stored as 8-bit codes, block-wise quantized: block b
 * (elements [256b, 256b+256) of the range, the last one may be partial) has
 * absmax1[b], absmax2[b]; m = map_signed[q1] * absmax1, v = map_unsigned[q2]
 * * absmax2. Codes 0 with absmax 0 are the zero state. Same hyperparameters
 * and decay order as adamw_update (decay first), so the two differ only in
 * the quantization of m and v. A NaN/Inf gradient zeroes that element's m
 * and v and leaves its weight alone (as bitsandbytes does). w is fp32; the
 * params are written back through `out` like adamw_update. */
void adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                      float *absmax2, const float *map_signed, const float *map_unsigned,
                      const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);

/* The 8-bit states of a range to and from fp32, block by block as
 * adamw8bit_update lays them out (checkpoints: parallel/zero/states_io.c).
 * Dequantize: out[i] = map[q[i]] * absmax[i / 256].
 * Quantize: absmax[b] = the largest |x| of block b (NaN skipped, +0 when
 * none), q[i] = qmap_nearest(map, x[i] / absmax[b]), or of 0 when absmax[b]
 * is 0; no sign fix (the update's quantizer has one, for m). ix (may be
 * NULL) only speeds up the search; the codes are qmap_nearest's. */
/* The space is where the states and the fp32 values both live (mem_space.h:
 * the caller's, struct zero's), as for the buffer operations (bufops.h). */
void adamw8bit_dequantize(enum mem_space space, const float map[QMAP_SIZE], const uint8_t *q, const float *absmax,
                          size_t n, float *out);
void adamw8bit_quantize(enum mem_space space, const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x,
                        size_t n, uint8_t *q, float *absmax);

/* ---- SGD with momentum as PyTorch's torch.optim.SGD (dampening 0):
 *   g   = grad * grad_scale + weight_decay * w     (coupled L2 decay)
 *   buf = g on the first step, else momentum * buf + g
 *   upd = nesterov ? g + momentum * buf : buf
 *   w  -= lr * upd
 * buf is an fp32 buffer of n floats. */
struct sgd_hparams {
    float lr, momentum, weight_decay, grad_scale;
    bool nesterov;
    bool first_step; /* buf holds nothing yet: buf = g (PyTorch's clone) */
};

void sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad, enum dtype grad_dtype,
                const struct param_writeback *out, struct exec_ctx *fc);

/* ---- 8-bit SGD: sgd_update's algorithm with the momentum buffer stored
 * as block-wise 8-bit codes of the signed map (absmax per 256-element
 * block, the sign fix of adamw8bit's m), as bitsandbytes' SGD8bit with
 * block-wise quantization. Within a step the buffer is fp32; first_step
 * ignores the stored codes. A NaN/Inf gradient zeroes that element's buffer
 * and leaves its weight alone (adamw8bit's convention). */
void sgd8bit_update(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax, const float *map_signed,
                    const struct qmap_index *ix_signed, const void *grad, enum dtype grad_dtype,
                    const struct param_writeback *out, struct exec_ctx *fc);

/* ---- Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
 * Algorithms", arXiv:2302.06675, Program 1), one momentum m:
 *   c  = beta1 m + (1 - beta1) g
 *   w  = w (1 - lr weight_decay) - lr sign(c)      (decoupled decay)
 *   m  = beta2 m + (1 - beta2) g
 * sign(0) = 0 (torch.sign); m and w are fp32. */
struct lion_hparams {
    float lr, beta1, beta2;
    float weight_decay;  /* 0 for tensors that do not decay */
    float grad_scale;    /* multiplies every gradient (clipping) */
};

/* The decoupled decay factor 1 - lr weight_decay of a Lion step: every
 * implementation, the GPU's included, takes it from here. */
float lion_decay(const struct lion_hparams *h);

void lion_update(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad, enum dtype grad_dtype,
                 const struct param_writeback *out, struct exec_ctx *fc);
/* Lion with m in 8 bits, as sgd8bit_update keeps its buffer (the same
 * codec, blocks and NaN convention). */
void lion8bit_update(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                     const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);

/* ---- Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive Learning Rates
 * with Sublinear Memory Cost", arXiv:1804.04235, Algorithms 4 and 5 with
 * update clipping; relative step off: the step size is the run's LR
 * schedule). With G^2 + eps1 (eps1 = adafactor_eps) and
 * beta2_t = 1 - t^-c (c = adafactor_decay):
 *   a matrix (n x m): R = beta2_t R + (1 - beta2_t) rowsums, C the same with
 *                     column sums, V = (R / sum(C)) C^T   (n + m floats)
 *   a vector:         V = beta2_t V + (1 - beta2_t) (G^2 + eps1)
 *   U = G / sqrt(V);  U /= max(1, RMS(U) / d)   (d = adafactor_clip, the
 *                     RMS over the whole tensor)
 *   m = beta1 m + (1 - beta1) U    (only with adafactor_beta1 > 0)
 *   w = w (1 - lr weight_decay) - lr (m or U)    (decoupled decay)
 * sum(C) stands for the paper's 1^T R (the same sum of the same EMA): a rank
 * that holds only some rows of a matrix then needs no other rank's rows.
 * The RMS and the statistics cover whole tensors, so the caller walks a
 * tensor's pieces in phases (parallel/zero/factored.c sums them across the
 * ranks that share it); these are the per-piece kernels. */
struct adafactor_hparams {
    float lr, beta1, eps1, clip;
    float beta2t;        /* adafactor_beta2t */
    float weight_decay;  /* 0 for tensors that do not decay */
    float grad_scale;    /* multiplies every gradient (clipping by the global norm) */
};

float adafactor_beta2t(float decay, int64_t t);
/* The FLOPs a step of n elements counts (with the first moment or not),
 * whichever backend runs it. */
double adafactor_flops(size_t n, bool moment);
/* w's decoupled decay factor, 1 - lr weight_decay (one expression for both backends). */
float adafactor_decay_factor(const struct adafactor_hparams *h);

/* The second moment a piece of n elements sees: factored (rows != NULL)
 * element k lies at column (c0 + k) % ncols of row (c0 + k) / ncols, rows
 * counted from the piece's first; unfactored: v[k]. Every pointer is in the
 * call's memory space, sum(C) too (a device kernel reads it where the
 * device computed it, parallel/zero/factored.c). */
struct adafactor_moment {
    const float *rows, *cols; /* R of the piece's rows, C of all the matrix's columns */
    const float *col_total;   /* sum(C) */
    size_t c0;
    int ncols;
    const float *v;           /* unfactored */
};

/* Each runs on the backend of `space` (adafactor_apply: fc->space), as the
 * update rules above do (optim/optim_dispatch.c). */

/* Adds G^2 + eps1 of a piece of a matrix into rows[] and cols[] (as the
 * moment's rows and columns are indexed): each row's and each column's sum
 * in the piece's element order. */
void adafactor_square_sums(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                           float eps1, size_t c0, int ncols, float *rows, float *cols);
/* stat = beta2t stat + (1 - beta2t) sums, n entries. */
void adafactor_ema(enum mem_space space, size_t n, float *stat, const float *sums, float beta2t);
/* The unfactored moment of a vector's piece: v = beta2t v + (1 - beta2t) (G^2 + eps1). */
void adafactor_vector_ema(enum mem_space space, size_t n, float *v, const void *grad, enum dtype grad_dtype,
                          float grad_scale, float eps1, float beta2t);
/* *dst = (accumulate ? *dst : 0) + src[0] + ... + src[n - 1], in that order
 * (fp32): sum(C), the cut rows' parts. */
void adafactor_total(enum mem_space space, size_t n, const float *src, float *dst, bool accumulate);
/* V of the piece's elements into out (resume states: the second moment per element). */
void adafactor_moment_values(enum mem_space space, size_t n, const struct adafactor_moment *s, float *out);
/* *sum += the sum of U^2 over the piece (for the RMS), in double. The CPU
 * adds in element order; the CUDA form in a fixed tree (deterministic, not
 * the CPU's order): its double sum is within 2 n 2^-53 of the CPU's,
 * relatively (all terms are positive). */
void adafactor_update_squares(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype,
                              float grad_scale, const struct adafactor_moment *s, double *sum);
/* The step of a piece, U scaled by clip_scale = 1 / max(1, RMS / d); m
 * NULL when beta1 is 0. */
void adafactor_apply(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                     const struct param_writeback *out, struct exec_ctx *fc);

/* ---- The backends. The update rules above and the
 * codec are optim/optim_dispatch.c's: each runs the form of the table
 * (optim/optim_ops.h: optim_ops_cpu of the X_cpu, optim_ops_cuda of the
 * X_cuda) that the space of the call chooses (the update rules: fc->space,
 * counters.h; the others: their argument), and the updates are timed into
 * fc's kernel profile (KERNEL_OPTIMIZER).
 *   X_cpu   optim/{adamw,sgd,lion,adamw8bit,sgd8bit,lion8bit,adamw8bit_state,adafactor}.c:
 *           host memory.
 *   X_cuda  optim/cuda/optim_device.c with the kernels of adamw.cu,
 *           sgd.cu, lion.cu, adamw8bit.cu, onestate8bit.cu and adafactor.cu
 *           (the CUDA build only; adafactor.cu compiled, not yet run on a GPU): w, the states,
 *           grad and the bf16 params in device memory. The
 *           hyperparameters, the exec_ctx, the 8-bit maps and search
 *           indexes are host memory (the maps travel to the kernels by
 *           value; the CUDA quantizer needs no index). The codec's fp32
 *           side (out of dequantize, x of quantize) may be in either space
 *           (out_on_device, x_on_device; host memory goes through a
 *           temporary device buffer).
 * Semantics are the ones above; the CUDA versions give the CPU's bits
 * (optim/cuda/optim_kernels.h says how). Each X_cuda call returns when its
 * results are in place (it synchronizes); a CUDA failure prints the
 * function and CUDA's reason and exits non-zero. */
void adamw_update_cpu(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void sgd_update_cpu(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                    enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void sgd8bit_update_cpu(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                        const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                        enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void lion_update_cpu(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void lion8bit_update_cpu(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                         const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                         enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void adamw8bit_update_cpu(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                          float *absmax1, float *absmax2, const float *map_signed, const float *map_unsigned,
                          const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                          enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void adafactor_square_sums_cpu(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                               size_t c0, int ncols, float *rows, float *cols);
void adafactor_ema_cpu(size_t n, float *stat, const float *sums, float beta2t);
void adafactor_vector_ema_cpu(size_t n, float *v, const void *grad, enum dtype grad_dtype, float grad_scale,
                              float eps1, float beta2t);
void adafactor_total_cpu(size_t n, const float *src, float *dst, bool accumulate);
void adafactor_moment_values_cpu(size_t n, const struct adafactor_moment *s, float *out);
void adafactor_update_squares_cpu(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                                  const struct adafactor_moment *s, double *sum);
void adafactor_apply_cpu(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                         enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                         const struct param_writeback *out, struct exec_ctx *fc);
void adamw8bit_dequantize_cpu(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                              float *out);
void adamw8bit_quantize_cpu(const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x, size_t n,
                            uint8_t *q, float *absmax);

void adamw_update_cuda(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                       enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void sgd_update_cuda(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void sgd8bit_update_cuda(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                         const float *map_signed, const void *grad, enum dtype grad_dtype,
                         const struct param_writeback *out, struct exec_ctx *fc);
void lion_update_cuda(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc);
void lion8bit_update_cuda(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                          const float *map_signed, const void *grad, enum dtype grad_dtype,
                          const struct param_writeback *out, struct exec_ctx *fc);
void adamw8bit_update_cuda(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                           float *absmax1, float *absmax2, const float *map_signed, const float *map_unsigned,
                           const void *grad, enum dtype grad_dtype, const struct param_writeback *out,
                           struct exec_ctx *fc);
/* Adafactor's (optim/cuda/adafactor.cu): every pointer in device memory
 * but h, s itself (its pointers: device), out and fc. */
void adafactor_square_sums_cuda(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                                size_t c0, int ncols, float *rows, float *cols);
void adafactor_ema_cuda(size_t n, float *stat, const float *sums, float beta2t);
void adafactor_vector_ema_cuda(size_t n, float *v, const void *grad, enum dtype grad_dtype, float grad_scale,
                               float eps1, float beta2t);
void adafactor_total_cuda(size_t n, const float *src, float *dst, bool accumulate);
void adafactor_moment_values_cuda(size_t n, const struct adafactor_moment *s, float *out);
void adafactor_update_squares_cuda(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                                   const struct adafactor_moment *s, double *sum);
void adafactor_apply_cuda(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                          enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                          const struct param_writeback *out, struct exec_ctx *fc);
/* q and absmax in device memory; out / x where out_on_device / x_on_device
 * say (host memory goes through a temporary device buffer). */
void adamw8bit_dequantize_cuda(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                               float *out, bool out_on_device);
void adamw8bit_quantize_cuda(const float map[QMAP_SIZE], const float *x, bool x_on_device, size_t n, uint8_t *q,
                             float *absmax);

#endif
