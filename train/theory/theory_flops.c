/* FLOPs per token, training time at an MFU, and energy. A FLOP is one
 * multiply or one add (a GEMM (m x k)(k x n) costs 2mkn). */
#include "theory.h"

/* Per training token (forward + backward, no recomputation):
 *  - dense = 6 Psi: Kaplan et al. 2020 §2.1 (C ~ 6N); the seeds use it with
 *    Psi = every parameter, embeddings included, so we do too.
 *  - attention = 12 L a d_h s: PaLM (Chowdhery et al. 2022) App. B, the
 *    QK^T and AV GEMMs with the full s x s score matrix, times 3 for
 *    forward + backward. A causal kernel executes about half of it.
 *  GQA does not shrink this term: it scales with the query heads a. */
struct theory_flops theory_flops_per_token(const struct theory_model *m, double psi) {
    struct theory_flops f;
    f.dense = 6.0 * psi;
    f.attention = 12.0 * m->L * (double)m->a * m->d_h * m->s;
    f.model = f.dense + f.attention;
    return f;
}

/* Executed FLOPs (HFU basis), THEORY.md 4.4:
 *  - full recomputation repeats the forward: 8 Psi + 16 L a d_h s
 *    (Narayanan et al. 2021 eq. 3's 96 B s l h^2 = 4/3 of 72);
 *  - selective recomputation repeats only core attention; Korthikanti et
 *    al. 2022 write it as 72 B s l h^2 (1 + s/(3h) + ...), i.e. the
 *    attention term doubles: 6 Psi + 24 L a d_h s. */
double theory_hardware_flops_per_token(const struct theory_model *m, double psi, enum recompute_mode r) {
    struct theory_flops f = theory_flops_per_token(m, psi);
    switch (r) {
    case RECOMPUTE_NONE: return f.model;
    case RECOMPUTE_SELECTIVE: return f.dense + 2.0 * f.attention;
    case RECOMPUTE_FULL: return f.dense * 4.0 / 3.0 + f.attention * 4.0 / 3.0;
    }
    return f.model;
}

/* Time = FLOPs / (devices x peak x MFU): the MFU definition (PaLM App. B)
 * solved for time; Narayanan et al. 2021 eq. 4 is the same with 8 T P. */
double theory_training_seconds(double total_flops, double devices, double peak_flops, double mfu) {
    double rate = devices * peak_flops * mfu;
    return rate > 0 ? total_flops / rate : 0.0;
}

/* Accelerator energy only: devices x board power x time (no cooling, host
 * or network; multiply by the site PUE for a facility figure). */
double theory_energy_joules(double seconds, double devices, double watts) { return seconds * devices * watts; }
