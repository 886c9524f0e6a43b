/* The theory column: parameter counts, FLOPs, model-state and activation
 * bytes, and communication volumes, computed from the config alone. The
 * trainer prints these beside what it measures; build/plan prints them
 * without training. Pure functions: no printing, no globals. Counts,
 * bytes and FLOPs are doubles: products such as 6 Psi D reach 1e25.
 *
 * Every formula cites its source (the paper) in the .c file; docs/THEORY.md
 * says what each computes and why.
 * Symbols follow the papers: L layers, h hidden, a query heads, n_kv
 * key/value heads, d_h head dim, F FFN inner size, s sequence length,
 * b micro-batch, V vocabulary, t TP degree, p PP degree, d (= N_d) DP degree,
 * Psi parameters, K optimizer bytes per parameter. */
#ifndef SHARDLAB_THEORY_H
#define SHARDLAB_THEORY_H

#include <stdbool.h>

#include "../config/config.h"

/* The shape facts the formulas need, derived once from a config. */
struct theory_model {
    int L, h, a, n_kv, d_h, F, s, V, Vp;
    int max_s;               /* position-table rows (max_seq_len; s when the config leaves it 0) */
    enum model_arch arch;    /* the blocks (include/layout.h); the flags below follow from it */
    bool swiglu;             /* 3 FFN matrices (gate, up, down) instead of 2 */
    bool rmsnorm;            /* norm has a gain only (LayerNorm: gain + bias) */
    bool biases;             /* GEMM biases (GPT-2) */
    bool tied_embeddings;    /* the LM head reuses the token embedding */
    bool position_embedding; /* learned position table (GPT-2); RoPE has none */
};

/* Bytes per parameter / per activation element (ZeRO §3.1 notation). */
struct theory_dtypes {
    double w_p;   /* working weights */
    double w_g;   /* gradients */
    double K;     /* optimizer state incl. an fp32 master copy when w_p < 4 */
    double w_act; /* saved activations and communicated activations */
};

const char *theory_recompute_name(enum recompute_mode r);

void theory_model_from_config(struct theory_model *m, const struct config *c);
struct theory_dtypes theory_dtypes_from_config(const struct config *c);

/* ---- parameters (theory_params.c) ---- */
struct theory_params {
    double embedding; /* token embedding, plus the LM head when untied (real V) */
    double position;  /* learned position table */
    double attention; /* Q, K, V, O weights (+ biases) over all layers */
    double ffn;       /* MLP weights (+ biases) over all layers */
    double norms;     /* per-layer norms and the final norm */
    double total;     /* sum of the above */
    double padding;   /* extra rows from padding V to Vp; not in total */
};
struct theory_params theory_param_count(const struct theory_model *m);
/* The weights one layer's GEMMs read, biases and norms aside (the
 * layout's, layout_param_parts): attention 2 h (a + n_kv) d_h, MLP 2 h F
 * (SwiGLU 3 h F); GPT-2's 12 h^2. */
double theory_layer_gemm_weights(const struct theory_model *m);

/* ---- FLOPs (theory_flops.c) ---- */
struct theory_flops {
    double dense;     /* 6 Psi per token (Kaplan 2020 §2.1; the seeds' convention) */
    double attention; /* 12 L a d_h s per token, full (non-causal) scores */
    double model;     /* dense + attention (PaLM App. B model FLOPs) */
};
struct theory_flops theory_flops_per_token(const struct theory_model *m, double psi);
/* FLOPs actually executed per token, recomputation included (HFU basis). */
double theory_hardware_flops_per_token(const struct theory_model *m, double psi, enum recompute_mode r);
double theory_training_seconds(double total_flops, double devices, double peak_flops, double mfu);
double theory_energy_joules(double seconds, double devices, double watts);

/* ---- memory (theory_memory.c) ---- */
struct theory_state {
    double params, grads, optimizer, total; /* bytes per rank */
};
/* ZeRO stage 0 (plain DP) .. 3 over N ranks; general form with w_p, w_g, K. */
struct theory_state theory_model_state_bytes(double w_p, double w_g, double K, double psi, int stage, int N);

/* Activation bytes saved by one layer for one micro-batch of b sequences on
 * one TP rank (Korthikanti 2022 Table 2, generalised to GQA and F). */
double theory_activation_layer_bytes(const struct theory_model *m, double b, int t, bool sequence_parallel,
                                     enum recompute_mode r);
/* Output-layer activations (final norm input, head input, fp32 logits). */
double theory_activation_output_bytes(const struct theory_model *m, double b, int t);
/* Peak activation bytes on the busiest pipeline stage under 1F1B with
 * m micro-batches per step. */
double theory_activation_device_bytes(const struct theory_model *m, double b, int t, int p, double m_micro,
                                      bool sequence_parallel, enum recompute_mode r);

/* The seed's back-of-envelope estimate: weights + optimizer + n_ckpt
 * checkpoints of width h per layer for every token of a batch. */
struct theory_ckpt_estimate {
    double params, optimizer, checkpoints, total; /* bytes, whole job */
};
struct theory_ckpt_estimate theory_checkpoint_estimate(double psi, double w_p, double opt_bytes, double batch_tokens,
                                                       int h, int L, int n_ckpt, double ckpt_bytes);

/* ---- communication (theory_comm.c); bytes each rank sends ---- */
double theory_allreduce_bytes(double M, int N);     /* M: buffer bytes */
double theory_reduce_scatter_bytes(double M, int N);
double theory_allgather_bytes(double M, int N);
/* DP traffic of one optimizer step for ZeRO stage 0..3 over N ranks with
 * `accum` micro-batches per step (ZeRO-2/3 communicate every micro-batch). */
double theory_dp_step_bytes(double psi, double w_p, double w_g, int stage, int N, double accum);
/* All-reduces of one (b, s, h) activation per layer per micro-batch under
 * Megatron TP as this code issues them: 4; 5 with full recompute. The
 * planner and the trainer's theory both count with it. */
int theory_tp_layer_allreduces(enum recompute_mode r);
/* The tp group's collectives of one layer for one micro-batch as
 * model/gpt.c issues them. Without sequence parallelism: the all-reduces
 * above. With it (Korthikanti et al. 2022 section 4.2.2): reduce-scatters
 * and all-gathers of (b, s, h) instead (g-bar and g), 4 and 6 (full
 * recompute 5 and 8: the backward gathers ln1 and ln2 again, since the
 * whole LayerNorm outputs are not kept), and one all-reduce of the norms'
 * weight (and bias) gradients, each rank's partial sum over its s/t
 * tokens. The planner and the trainer's theory both count with it. */
struct theory_tp_layer_calls {
    int all_reduces;     /* of (b, s, h) */
    int reduce_scatters; /* of (b, s, h) */
    int all_gathers;     /* of (b, s, h) */
    int norm_all_reduces; /* of the layer's norm gradients (theory_tp_norm_grad_bytes) */
};
struct theory_tp_layer_calls theory_tp_layer_collectives(enum recompute_mode r, bool sequence_parallel);
/* Bytes of one layer's norm gradients, all-reduced under sequence
 * parallelism: 2 norms x (gain + bias; RMSNorm gain only) x h, fp32 (the
 * gradient accumulators' type in gpt.c, whatever w_g is). */
double theory_tp_norm_grad_bytes(const struct theory_model *m);
/* Megatron TP traffic of one layer for one micro-batch, every collective
 * of theory_tp_layer_collectives, ring volumes (w_act: bytes of the
 * reduced element; shardlab's gpt.c reduces fp32). */
double theory_tp_layer_bytes(const struct theory_model *m, double b, int t, double w_act, enum recompute_mode r,
                             bool sequence_parallel);
/* Pipeline traffic across one stage boundary for one step (forward
 * activations + backward gradients of m micro-batches; each tp rank's
 * share: with sequence parallelism it sends its s/t slice). The trainer's
 * send and recv theory (theory_trainer_pp_comm) is half of this per
 * boundary. */
double theory_pp_boundary_bytes(const struct theory_model *m, double b, double m_micro, int t,
                                bool sequence_parallel, double w_act);
/* Context parallelism's ring per layer per micro-batch (bytes a cp rank
 * sends, forward and backward: (cp - 1) + (2 cp - 1) blocks of keys and
 * values or their gradients, + (cp - 1) with full recompute), a block
 * b (s/cp) 2 n_kv d_h / t x w_act; 0 at cp = 1. The trainer's ring
 * (theory_trainer_cp_comm) is this with w_act = 4 (it sends fp32) and
 * n_kv d_h = h. */
double theory_cp_layer_bytes(const struct theory_model *m, double b, int t, int cp, double w_act,
                             enum recompute_mode r);

/* ---- layouts (theory_layout.c) ---- */
/* The pipeline bubble: the idle share of a step, (p - 1) / (v m + p - 1),
 * for p stages, m micro-batches and v model chunks per stage (v = 1: GPipe
 * and 1F1B; Narayanan et al. 2021, sections 2.2 and 2.2.2), when every
 * stage's forward and backward take the same time. The trainer prints it
 * beside the bubble it measures; the planner's step time uses it. */
double theory_pipeline_bubble(int p, double m, int v);
/* Bubble time beside `compute` seconds of work: compute x (p - 1) / (v m),
 * the same fraction of the step. */
double theory_pipeline_bubble_seconds(double compute, int p, double m, int v);

/* link_bandwidth: a device's link within its node (NVLink), one direction;
 * inter_node_bandwidth: its share of the node's network (InfiniBand) for
 * groups that span more than devices_per_node devices (0 either: one
 * network, link_bandwidth everywhere; theory_layout_evaluate). */
struct theory_cluster {
    double devices, memory, peak_flops, mfu, link_bandwidth, watts;
    double inter_node_bandwidth, devices_per_node;
};
/* A layout of devices = tp x cp x pp x dp (cp 0 reads as 1): context
 * parallelism divides each sequence's positions, hence the activations and
 * the tp and pp traffic, by cp, adds the ring's traffic, and shards ZeRO
 * over dp x cp (the ranks that hold the same weights). */
struct theory_layout {
    int tp, pp, dp, zero_stage;
    int cp;
    enum recompute_mode recompute;
    bool sequence_parallel;
};
struct theory_layout_eval {
    bool batch_ok;                /* at least one micro-batch per pipeline */
    double sequences;             /* global batch B = floor(batch_tokens / s) whole sequences */
    double micro_batches;         /* m = floor(B / (b d)), an integer (a double: B may pass 2^31) */
    double step_tokens;           /* tokens a step trains: max(m, 1) b d s (at most batch_tokens) */
    double psi_device;            /* Psi / (t p) */
    struct theory_state state;    /* model states per device */
    double activations, memory;   /* bytes per device; memory = state + activations */
    bool fits;                    /* memory <= cluster memory (and batch_ok) */
    double compute_s, bubble_s;   /* per step */
    double dp_comm_s, tp_comm_s, pp_comm_s, cp_comm_s, comm_s;
    double step_s;                /* max(compute, comm) + bubble */
    double days;                  /* training days: tokens / step_tokens steps of step_s (theory_plan) */
    bool comm_bound;              /* comm_s > compute_s */
    /* the groups whose devices span more than a node, on the inter-node link */
    bool tp_inter, cp_inter, pp_inter, dp_inter;
};
struct theory_layout_eval theory_layout_evaluate(const struct theory_model *m, const struct theory_dtypes *dt,
                                                 double psi, double micro_batch, double batch_tokens,
                                                 const struct theory_layout *lay,
                                                 const struct theory_cluster *cl);
/* The largest context-parallel degree the planner searches (powers of 2;
 * LLaMA 3's long-context stage used 16). */
enum { THEORY_MAX_CP = 16 };
/* The largest pipeline degree the planner searches (LLaMA 3 405B's PP 16,
 * Dubey et al. 2024 Table 4). */
enum { THEORY_MAX_PP = 16 };
/* Whether the search tries p stages: p <= min(L, THEORY_MAX_PP) and p
 * divides L or is a power of 2 (then stages of ceil(L/p) layers, as
 * LLaMA 3 405B's 126 layers on 16 stages). */
bool theory_pp_searched(const struct theory_model *m, int p);
/* Smallest device count n (1..max_devices) with some layout t in {1,2,4,8},
 * cp in {1, 2, ..., THEORY_MAX_CP} (2 cp dividing s), p theory_pp_searched,
 * d = n / (t cp p), using zero_stage and recompute, that fits.
 * Returns n and fills *best, or 0 when none fits up to max_devices. */
int theory_smallest_fit(const struct theory_model *m, const struct theory_dtypes *dt, double psi,
                        double micro_batch, double batch_tokens, int zero_stage, enum recompute_mode r,
                        double memory, int max_devices, struct theory_layout *best);

/* ---- accelerators (theory_devices.c) ---- */
/* Bytes in a GiB: memory is said in GiB, as the trainer's tables say it. */
#define THEORY_GIB (1024.0 * 1024.0 * 1024.0)
#define THEORY_SECONDS_PER_DAY 86400.0
/* Dense 16-bit peak, memory and link bandwidth of common training
 * devices, from the vendors' data sheets. */
struct theory_device {
    const char *name;
    double peak_flops;     /* dense bf16 FLOP/s */
    double memory;         /* bytes (the data sheet's "80GB" of HBM is 80 GiB) */
    double link_bandwidth; /* bytes/s one direction on the device's fastest link (NVLink, ICI) */
    const char *gpu;       /* a part of the CUDA device name (cudaGetDeviceProperties) that identifies it; NULL: none */
    double inter_node_bandwidth; /* bytes/s one direction per device between nodes (its NIC); 0: one network */
    int devices_per_node;  /* devices that share the fast link (an HGX board); 0: every device */
};
/* NULL when the name is unknown. */
const struct theory_device *theory_device_find(const char *name);
/* The device whose `gpu` part a CUDA device name holds (a GPU run's MFU
 * divides by its peak); NULL when none does. */
const struct theory_device *theory_device_of_gpu(const char *cuda_name);
/* "a100, h100, ..." for error messages. */
const char *theory_device_names(void);

/* ---- the planner's whole report (theory_plan.c) ---- */
enum { THEORY_PLAN_MAX_REQUESTED = 8 }; /* build/plan --layout, at most this many */
struct theory_plan_input {
    double devices, memory, peak_flops, mfu, tokens, batch_tokens, link_bandwidth, watts;
    double inter_node_bandwidth, devices_per_node; /* struct theory_cluster's; 0: one network */
    int zero_stage;                  /* for the layout table and smallest fit */
    enum recompute_mode recompute; /* idem */
    int ckpt_per_layer;              /* the seed-style estimate's checkpoints */
    int n_requested;                 /* layouts asked for by name (build/plan --layout; tp, cp, pp: dp is the
                                      * rest of the devices, which t cp p must divide), evaluated too */
    struct theory_layout requested[THEORY_PLAN_MAX_REQUESTED];
};
/* 4 t x 5 cp x at most 16 p */
enum { THEORY_PLAN_MAX_LAYOUTS = 320 };
/* The planner's table by default: at most this many rows (build/plan --all
 * prints every layout). */
enum { THEORY_PLAN_TABLE_ROWS = 12 };
struct theory_plan {
    struct theory_model model;
    struct theory_dtypes dtypes;
    struct theory_params params;
    struct theory_flops flops;           /* per token */
    double total_flops_dense, total_flops_model;
    double seconds_dense, seconds_model; /* on `devices` at `mfu` */
    double energy_dense_j;
    struct theory_state state[4];        /* ZeRO 0..3 over all devices */
    double act_layer[3], act_device[3];  /* per recompute mode; b = micro_batch, t = p = 1 */
    int n_layouts;
    struct theory_layout layouts[THEORY_PLAN_MAX_LAYOUTS];
    struct theory_layout_eval evals[THEORY_PLAN_MAX_LAYOUTS];
    /* layouts[order[0..n_layouts)]: those that fit, fastest (fewest days)
     * first, then the rest, least memory first */
    int order[THEORY_PLAN_MAX_LAYOUTS];
    int n_fit;                           /* how many fit: order[0..n_fit) */
    int n_table;                         /* the useful rows, order[0..n_table): those that fit, or when none
                                          * does the nearest; at most THEORY_PLAN_TABLE_ROWS */
    int fastest;                         /* index of the fastest layout that fits; -1: none fits */
    int n_requested;                     /* the input's requested layouts, dp filled in, and their evals */
    struct theory_layout requested[THEORY_PLAN_MAX_REQUESTED];
    struct theory_layout_eval requested_evals[THEORY_PLAN_MAX_REQUESTED];
    int smallest_fit;                    /* 0: none up to the search limit */
    struct theory_layout smallest_layout;
    struct theory_ckpt_estimate ckpt;    /* seed-style estimate */
    double ckpt_devices_ratio;           /* ckpt.total / memory */
    double ckpt_min_devices;             /* ceil of the ratio (a double: tiny memory gives huge counts) */
    double ckpt_per_device;              /* ckpt.total / devices */
};
void theory_plan(struct theory_plan *out, const struct config *c, const struct theory_plan_input *in);

#endif
