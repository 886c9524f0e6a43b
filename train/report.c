/* The measured-vs-theory tables. Measured numbers come from the tagged
 * allocator and the FLOP counters; theory from train/accounting.c. */
#include <sys/resource.h>

#include "accounting.h"
#include "trainer.h"

static double mib(double b) { return b / (1024.0 * 1024.0); }

void report_buffers(FILE *out, const struct trainer *tr) {
    const struct mem_tracker *m = &tr->mem;
    fprintf(out, "\nbuffers (tagged allocator):\n  %-12s %-34s %14s %10s\n", "category", "buffer", "bytes", "MiB");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        for (int i = 0; i < m->n_records; i++) {
            const struct mem_record *r = &m->records[i];
            if ((int)r->category == c)
                fprintf(out, "  %-12s %-34s %14zu %10.2f\n", mem_category_name(r->category), r->name, r->bytes,
                        mib((double)r->bytes));
        }
}

static void memory_row(FILE *out, FILE *json, const char *category, double measured, double theory,
                       const char *rule) {
    char th[32] = "-";
    if (theory >= 0) snprintf(th, sizeof th, "%.0f", theory);
    fprintf(out, "  %-13s %14.0f %14s  %s\n", category, measured, th, rule);
    if (json && theory >= 0)
        fprintf(json, "{\"type\":\"memory\",\"rank\":0,\"category\":\"%s\",\"measured_bytes\":%.0f,"
                      "\"theory_bytes\":%.0f}\n", category, measured, theory);
}

void report_memory(FILE *out, FILE *json, const struct trainer *tr, const char *when) {
    const struct config *c = tr->cfg;
    const struct mem_tracker *m = &tr->mem;
    struct state_theory st = theory_trainer_states(c);
    struct activation_theory at = theory_trainer_activations(c);
    fprintf(out, "\nmemory, rank 0, %s (bytes; Psi = %.0f parameters, vocab padding = %.0f)\n", when, st.psi,
            st.padding);
    fprintf(out, "  %-13s %14s %14s  %s\n", "category", "measured", "theory", "rule");
    double states_measured = 0, states_theory = 0;
    char rule[160];
    for (int i = 0; i < st.n; i++) {
        const struct state_line *l = &st.lines[i];
        snprintf(rule, sizeof rule, "%s + padding %.0f B/param x %.0f", l->rule, l->bytes_per_param, st.padding);
        double measured = (double)m->live[l->category];
        memory_row(out, json, mem_category_name(l->category), measured, l->psi_bytes + l->padding_bytes, rule);
        states_measured += measured;
        states_theory += l->psi_bytes + l->padding_bytes;
    }
    snprintf(rule, sizeof rule, "%.0f B/param (ZeRO: w_p + w_g + K), equal to the byte: %s",
             states_theory / (st.psi + st.padding), states_measured == states_theory ? "yes" : "NO");
    memory_row(out, NULL, "model states", states_measured, states_theory, rule);
    double act = (double)m->peak[MEM_ACTIVATIONS];
    snprintf(rule, sizeof rule, "L x (16 C e + NH T e + 16) B T + head (docs/THEORY.md); %+.2f%%",
             100.0 * (act - at.total) / at.total);
    memory_row(out, json, "activations", act, at.total, rule);
    snprintf(rule, sizeof rule, "Korthikanti eq. (1) for this shape, 16-bit with dropout: %.0f", at.korthikanti_total);
    fprintf(out, "  %-13s %14s %14s  %s\n", "", "", "", rule);
    memory_row(out, NULL, "scratch", (double)m->live[MEM_SCRATCH], -1, "fp32 working buffers (listed at start)");
    memory_row(out, NULL, "tracked", (double)m->live_total, -1, "all tagged buffers");
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double rss = (double)ru.ru_maxrss * 1024.0;
        memory_row(out, NULL, "peak RSS", rss, -1, "getrusage: tagged + allocator, MPI, BLAS, OpenMP, code");
        memory_row(out, NULL, "untracked", rss - (double)m->peak_total, -1, "peak RSS - peak tracked");
    }
    if (json) fflush(json);
}

void report_flops(FILE *out, const struct trainer *tr, int steps) {
    if (steps <= 0) return;
    const struct flop_counter *f = &tr->flops;
    struct flop_theory th = theory_trainer_flops(tr->cfg);
    double secs = tr->train_seconds / steps;
    fprintf(out, "\nFLOPs per optimizer step, averaged over %d steps (%.0f tokens per step)\n", steps, th.tokens);
    fprintf(out, "  %-11s %14s %14s  %s\n", "part", "measured", "theory", "rule");
    fprintf(out, "  %-11s %14.4e %14.4e  6 x tokens x (12 L C^2 + Vp C): every sgemm, fwd + bwd\n", "GEMMs",
            f->gemm / steps, th.gemm);
    fprintf(out, "  %-11s %14.4e %14.4e  6 L B C T (T+1) x accum: causal QK^T and AV, diagonal included\n",
            "attention", f->attention / steps, th.attention);
    fprintf(out, "  %-11s %14.4e %14s  norms, GELU, softmax, biases, AdamW (no paper formula)\n", "other",
            f->other / steps, "-");
    fprintf(out, "  %-11s %14s %14.4e  PaLM App. B, causal: tokens x (6 N + 6 L C T), N = %.0f (Psi - wpe)\n",
            "model", "", th.model, th.n_gemm_params);
    double issued = (f->gemm + f->attention) / steps;
    fprintf(out, "  achieved: %.2f GFLOP/s issued (GEMM + attention), %.2f GFLOP/s model; %.1f%% of step time in sgemm\n",
            issued / secs / 1e9, th.model / secs / 1e9, 100.0 * f->gemm_seconds / tr->train_seconds);
    if (tr->peak_flops > 0)
        fprintf(out, "  peak %.1f GFLOP/s (%s): MFU %.1f%%, HFU %.1f%%\n", tr->peak_flops / 1e9,
                tr->cfg->peak_flops > 0 ? "peak_flops from the config" : "measured FMA microbenchmark",
                100.0 * th.model / secs / tr->peak_flops, 100.0 * issued / secs / tr->peak_flops);
}

void report_comm(FILE *out, const struct trainer *tr) {
    (void)tr;
    fprintf(out, "\ncommunication per step, rank 0: measured 0 B, theory 0 B (1 rank: no collectives)\n");
}
