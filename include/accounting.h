/* The trainer's theory column: what the formulas say this run's buffers,
 * FLOPs and traffic should be, computed from the config alone, itemised so
 * each line of a measured table has its formula beside it. */
#ifndef SHARDLAB_ACCOUNTING_H
#define SHARDLAB_ACCOUNTING_H

#include "config.h"
#include "mem.h"

/* Model states (ZeRO 3.1 accounting, one rank): bytes per category and the
 * rule in words. The vocabulary padding rows (Vp - V) are named separately. */
struct state_line {
    enum mem_category category;
    double bytes_per_param;  /* w_p, 4 for master, w_g, K */
    double psi_bytes;        /* bytes_per_param x Psi */
    double padding_bytes;    /* bytes_per_param x (Vp - V) C */
    const char *rule;        /* e.g. "2 B x Psi (bf16)" */
};

enum { MAX_STATE_LINES = 4 };

struct state_theory {
    double psi;      /* parameters, real vocabulary */
    double padding;  /* padding parameters: (Vp - V) C */
    int n;
    struct state_line lines[MAX_STATE_LINES];
};

struct state_theory theory_trainer_states(const struct config *c);

/* Activation bytes for exactly the tensors model/gpt.c saves (one
 * micro-batch), and Korthikanti's eq. (1) for the same shape. */
struct activation_theory {
    double per_layer;        /* (16 C e + NH T e + 16) B T */
    double layers;           /* L x per_layer */
    double head;             /* last residual + final LN out (e) + LN stats + fp32 logits + losses + ids */
    double total;
    double korthikanti_layer; /* s b h (34 + 5 a s / h), 16-bit, with dropout */
    double korthikanti_total; /* L x that + output layer 4 s b h (1 + V / h) */
};

struct activation_theory theory_trainer_activations(const struct config *c);

/* FLOPs of one optimizer step, as issued by this code and per the papers. */
struct flop_theory {
    double tokens;            /* B T accum per step */
    double gemm;              /* 6 tokens (12 L C^2 + Vp C): every sgemm, forward and backward */
    double attention;         /* 6 L B C T (T + 1) accum: causal QK^T and AV incl. the diagonal */
    double model;             /* tokens (6 N + 6 L C T): PaLM App. B, causal half of 12 L H Q T */
    double n_gemm_params;     /* N: parameters used in GEMMs (Psi - wpe) */
};

struct flop_theory theory_trainer_flops(const struct config *c);

#endif
