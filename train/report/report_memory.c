/* The measured-vs-theory tables. Measured numbers come from each rank's
 * tagged allocator and counters; theory from train/theory/theory_rank.c. */
#include "../measure/machine.h"
#include "report.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../theory/accounting.h"

enum { MAX_RANK_COLUMNS = 4 };

static double mib(double b) { return b / MIB_BYTES; }

void rank_stats_collect(const struct trainer *tr, struct rank_stats *out) {
    const struct mem_tracker *m = &tr->mem;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
        out->live[c] = (double)m->live[c];
        out->peak[c] = (double)m->peak[c];
    }
    out->tracked_peak = (double)m->peak_space[MEM_HOST]; /* beside the RSS: host buffers (all of them on the CPU) */
    out->startup_tracked_peak = tr->startup_tracked_peak;
    out->startup_rss = tr->startup_rss;
    out->steady_tracked = (double)m->live_total;
    out->one_unit = tr->engine_open ? (double)engine_unit_staging_bytes(&tr->engine) : 0.0;
    out->rss = peak_rss_bytes();
    out->attention_flops = tr->flops.attention;
    for (int g = 0; g < GROUP_NUM; g++) {
        const struct comm_counters *cc = &grid_group(tr->grid, (enum grid_group)g)->counters;
        struct rank_comm *rc = &out->comm[g];
        for (int k = 0; k < COLL_NUM_KINDS; k++) {
            rc->bytes[k] = cc->bytes[k];
            rc->calls[k] = (double)cc->calls[k];
        }
        rc->seconds = cc->seconds;
        rc->exposed_seconds = cc->exposed_seconds;
    }
    out->pipe_total = tr->pipe_run.total;
    out->pipe_busy = tr->pipe_run.busy;
    out->pipe_waiting = tr->pipe_run.waiting;
    out->device_tracked_peak = (double)m->peak_space[MEM_DEVICE];
    out->device_used_peak = tr->device_used_peak;
    out->device_total = tr->device_total;
}

void report_buffers(FILE *out, const struct trainer *tr) {
    const struct mem_tracker *m = &tr->mem;
    fprintf(out, "\nbuffers of rank 0 (tagged allocator):\n  %-12s %-36s %14s %10s\n", "category", "buffer", "bytes",
            "MiB");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        for (int i = 0; i < m->n_records; i++) {
            const struct mem_record *r = &m->records[i];
            if ((int)r->category == c)
                fprintf(out, "  %-12s %-36s %14zu %10.2f\n", mem_category_name(r->category), r->name, r->bytes,
                        mib((double)r->bytes));
        }
}

/* One row: measured on up to MAX_RANK_COLUMNS ranks (then the max over
 * all), the theory per rank, and the rule. */
static void row(FILE *out, const char *name, const double *measured, int n, double theory, const char *rule) {
    fprintf(out, "  %-13s", name);
    int shown = n < MAX_RANK_COLUMNS ? n : MAX_RANK_COLUMNS;
    double max = 0;
    for (int r = 0; r < n; r++) max = measured[r] > max ? measured[r] : max;
    for (int r = 0; r < shown; r++) fprintf(out, " %13.0f", measured[r]);
    if (n > shown) fprintf(out, " %13.0f", max);
    if (theory >= 0) fprintf(out, " %13.0f", theory);
    else fprintf(out, " %13s", "-");
    fprintf(out, "  %s\n", rule);
}

static void header(FILE *out, int n, const char *first) {
    fprintf(out, "  %-13s", first);
    int shown = n < MAX_RANK_COLUMNS ? n : MAX_RANK_COLUMNS;
    for (int r = 0; r < shown; r++) fprintf(out, "       rank %-2d", r);
    if (n > shown) fprintf(out, " %13s", "max (all)");
    fprintf(out, " %13s  rule\n", "theory");
}

static void json_row(FILE *json, int rank, const char *category, double measured, double theory) {
    fprintf(json, "{\"type\":\"memory\",\"rank\":%d,\"category\":\"%s\",\"measured_bytes\":%.0f,", rank, category,
            measured);
    if (theory >= 0) fprintf(json, "\"theory_bytes\":%.0f}\n", theory);
    else fprintf(json, "\"theory_bytes\":null}\n");
}

/* Every rank's record of one category: its measured bytes (the live
 * bytes, or the peak for activations) beside its own theory (own[r]: under
 * pp and tp, and with 8-bit blocks, the ranks hold different parts). */
static void json_rows(FILE *json, const char *category, const struct rank_stats *ranks, int n, int c,
                      const double *own) {
    for (int r = 0; r < n; r++)
        json_row(json, r, category, c == MEM_ACTIVATIONS ? ranks[r].peak[c] : ranks[r].live[c], own[r]);
}

/* own[r] = theory(c, rank r's place) for every rank. */
static void own_theories(double *own, const struct config *c, int n,
                         double (*theory)(const struct config *, struct rank_place)) {
    for (int r = 0; r < n; r++) own[r] = theory(c, rank_place_of(c, n, r));
}

/* On GPUs the CUDA runtime, cuBLAS and NCCL keep host memory of their own
 * (about 0.8 GB measured on an H100 host: docs/GPU.md). */
static double rss_allowance(const struct rank_stats *ranks) {
    return (ranks[0].device_total > 0 ? (double)RSS_CUDA_ALLOWANCE : (double)RSS_LIBRARY_ALLOWANCE) +
           RSS_SANITIZER_ALLOWANCE;
}

/* Peak RSS against the tracked peak of host buffers: at start-up (after init or load) and
 * over the run (training and saves). The bound is tracked peak + the
 * libraries' allowance; "theory" of the RSS rows is that bound. */
static void rss_rows(FILE *out, FILE *json, const struct rank_stats *ranks, int n, double *col) {
    bool within = true;
    double allowance = rss_allowance(ranks);
    for (int r = 0; r < n; r++) col[r] = ranks[r].startup_tracked_peak;
    row(out, "start-up peak", col, n, -1, "tracked peak at the end of start-up (init / load, one-unit staging)");
    for (int r = 0; r < n; r++) {
        col[r] = ranks[r].startup_rss;
        within = within && col[r] <= ranks[r].startup_tracked_peak + allowance;
    }
    row(out, "start-up RSS", col, n, -1, "getrusage after start-up");
    for (int r = 0; r < n; r++) col[r] = ranks[r].tracked_peak;
    row(out, "tracked peak", col, n, -1, "tagged host buffers, whole run");
    for (int r = 0; r < n; r++) {
        col[r] = ranks[r].rss;
        within = within && col[r] <= ranks[r].tracked_peak + allowance;
    }
    row(out, "peak RSS", col, n, -1, "getrusage: tagged + allocator, MPI, BLAS, OpenMP, code");
    for (int r = 0; r < n; r++) col[r] = ranks[r].rss - ranks[r].tracked_peak;
    char rule[160];
    snprintf(rule, sizeof rule, "peak RSS - tracked peak; within the %.0f MiB library allowance%s%s at start-up "
                                "and over the run: %s", mib(allowance), ranks[0].device_total > 0 ? " (CUDA's)" : "",
                                RSS_SANITIZER_ALLOWANCE > 0 ? " (with ASan's shadow)" : "", within ? "yes" : "NO");
    row(out, "untracked", col, n, -1, rule);
    if (!json) return;
    for (int r = 0; r < n; r++) {
        const struct rank_stats *k = &ranks[r];
        json_row(json, r, "startup_tracked_peak", k->startup_tracked_peak, -1);
        json_row(json, r, "startup_peak_rss", k->startup_rss, k->startup_tracked_peak + rss_allowance(ranks));
        json_row(json, r, "tracked_peak", k->tracked_peak, -1);
        json_row(json, r, "peak_rss", k->rss, k->tracked_peak + rss_allowance(ranks));
        json_row(json, r, "untracked", k->rss - k->tracked_peak, rss_allowance(ranks));
        json_row(json, r, "steady_tracked", k->steady_tracked, -1);
        json_row(json, r, "one_unit", k->one_unit, -1);
    }
}

/* A GPU run: the tracked device bytes beside what the driver says is in
 * use on the GPU (cudaMemGetInfo: every allocation on it, the CUDA
 * context, cuBLAS's workspace and NCCL's buffers included, and any other
 * process's). Nothing on the CPU. */
static void device_rows(FILE *out, FILE *json, const struct rank_stats *ranks, int n, double *col) {
    if (ranks[0].device_total <= 0) return;
    for (int r = 0; r < n; r++) col[r] = ranks[r].device_tracked_peak;
    row(out, "device tracked peak", col, n, -1, "tagged buffers in GPU memory, whole run");
    for (int r = 0; r < n; r++) col[r] = ranks[r].device_used_peak;
    row(out, "device used peak", col, n, -1, "cudaMemGetInfo total - free, highest at start-up and step ends");
    for (int r = 0; r < n; r++) col[r] = ranks[r].device_used_peak - ranks[r].device_tracked_peak;
    row(out, "device untracked", col, n, -1,
        "used - tracked: CUDA context, cuBLAS (cuBLASLt's 32 MiB workspace), NCCL, the kernels' pool, rounding");
    if (!json) return;
    for (int r = 0; r < n; r++) {
        json_row(json, r, "device_tracked_peak", ranks[r].device_tracked_peak, -1);
        json_row(json, r, "device_used_peak", ranks[r].device_used_peak, -1);
        json_row(json, r, "device_total", ranks[r].device_total, -1);
    }
}

/* Each rank's theory of one row (with pp > 1 the stages differ). */
static double activations_of(const struct config *c, struct rank_place p) { return theory_trainer_activations(c, p).total; }
static double comm_buffers_of(const struct config *c, struct rank_place p) { return theory_trainer_comm_buffers(c, p); }
static double scratch_of(const struct config *c, struct rank_place p) { return theory_trainer_scratch(c, p).persistent; }

/* Recompute's saving beside no recompute, said where it is small: what it
 * drops per layer (selective: the probabilities, NH T e a token; full:
 * all but the layer input) it adds back as one layer's buffers in fp32, so
 * on a shallow model in bf16 (tiny: L = 2, e = 2) it saves little or
 * nothing; selective pays from L e > 4. */
static void recompute_note(FILE *out, const struct config *c, struct rank_place p, double total) {
    if (c->recompute == RECOMPUTE_NONE) return;
    struct config none = *c;
    none.recompute = RECOMPUTE_NONE;
    double before = theory_trainer_activations(&none, p).total, saved = before - total;
    if (saved > 0.1 * before) return;
    fprintf(out, "  (recompute %s saves %.0f of %.0f B here: it adds back one layer's buffers in fp32, about what it "
                 "drops on %d layer%s; it pays on deeper models, selective from L x bytes per activation > 4)\n",
            c->recompute == RECOMPUTE_FULL ? "full" : "selective", saved, before, c->n_layer, c->n_layer == 1 ? "" : "s");
}

/* "; every rank = its own theory: yes" (or NO) after a row's rule. */
static void own_theory(char *rule, size_t len, const struct config *c, const double *col, int n,
                       double (*theory)(const struct config *, struct rank_place)) {
    bool all = true;
    for (int r = 0; r < n; r++) all = all && col[r] == theory(c, rank_place_of(c, n, r));
    size_t used = strlen(rule);
    if (used < len) snprintf(rule + used, len - used, "; every rank = its own theory: %s", all ? "yes" : "NO");
}

/* The table's heading: ZeRO's N (the ranks that shard a unit: dp x cp)
 * and Psi named as what they are. Under tp or pp a rank holds a part of
 * the model (its slice, its stages), and that part, Psi_r, is what ZeRO
 * divides by N; rank 0's is the theory column's. */
static void print_setup(FILE *out, const struct trainer *tr, const struct state_theory *st, const char *when) {
    const struct config *c = tr->cfg;
    const struct grid *g = tr->grid;
    const struct model_layout *lay = &tr->engine.lay;
    int N = g->dp * g->cp;
    fprintf(out, "\nmemory per rank, %s (bytes): ZeRO-%d over N = %d rank%s (%s)", when, c->zero, N, N == 1 ? "" : "s",
            g->cp > 1 ? "dp x cp" : "dp");
    if (lay->total != lay->ref_total)
        fprintf(out, ", Psi = %zu parameters in the model, rank 0 holds Psi_r = %.0f of them (%s%s%s)", lay->ref_total,
                st->psi, g->tp > 1 ? "its tp slice" : "", g->tp > 1 && g->pp > 1 ? " of " : "",
                g->pp > 1 ? "its pp stage" : "");
    else fprintf(out, ", Psi = %.0f", st->psi);
    /* whole elements: the shard's count is an integer, Psi_r / N need not be */
    fprintf(out, "; padding %.0f elements (wte rows past V and units rounded up to a multiple of N), so a "
                 "shard holds (%.0f + %.0f) / %d = %.0f elements\n",
            st->padding, st->psi, st->padding, st->N, st->psi / st->N + st->shard_padding);
}

void report_memory(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                   const char *when) {
    const struct config *c = tr->cfg;
    struct state_theory st = theory_trainer_states(c, rank_place_of(c, n, 0));
    struct activation_theory at = theory_trainer_activations(c, rank_place_of(c, n, 0));
    double *col = calloc((size_t)n, sizeof *col), *own = calloc((size_t)n, sizeof *own);
    print_setup(out, tr, &st, when);
    if (c->pp > 1 || c->tp > 1)
        fprintf(out, "  (theory column: rank 0's; ranks hold different parts of the model, each checked against its own)\n");
    if (c->tp > 1) { /* the padding rows differ by tp rank: Vp = 128 t rounds V up, the last slices take the rest */
        struct model_layout lay;
        fprintf(out, "  (wte rows per tp rank [v0, v1), padding rows past V = %d:", c->vocab_size);
        for (int t = 0; t < c->tp; t++) {
            rank_place_layout(c, rank_place_of(c, n, t), &lay);
            struct vocab_rows v = rank_vocab_rows(&lay);
            fprintf(out, " [%d, %d) %d%s", v.v0, v.v1, v.padding, t + 1 < c->tp ? ";" : ")\n");
        }
    }
    header(out, n, "category");
    /* What the memory rows belong to, so build/report can label a run and
     * draw each rank's model states on its line: psi is rank 0's Psi_r (as
     * the heading names it), psi_model the model's Psi, psi_ranks each
     * rank's Psi_r (its tp slice of its pp stage), n_zero ZeRO's N (dp x cp). */
    if (json) {
        fprintf(json, "{\"type\":\"memory_setup\",\"zero\":%d,\"world_size\":%d,\"tp\":%d,\"pp\":%d,\"cp\":%d,"
                      "\"psi\":%.0f,\"recompute\":\"%s\",\"attention\":\"%s\",\"optimizer\":\"%s\",\"psi_model\":%zu,"
                      "\"n_zero\":%d,\"psi_ranks\":[",
                c->zero, n, c->tp, c->pp, c->cp, st.psi,
                c->recompute == RECOMPUTE_NONE ? "none" : c->recompute == RECOMPUTE_FULL ? "full" : "selective",
                c->attention == ATTENTION_FLASH ? "flash" : "plain", optim_rule(c->optimizer)->name,
                tr->engine.lay.ref_total, st.N);
        for (int r = 0; r < n; r++)
            fprintf(json, "%s%.0f", r ? "," : "", theory_trainer_states(c, rank_place_of(c, n, r)).psi);
        fprintf(json, "]}\n");
    }
    char rule[320];
    double states_theory = 0;
    bool exact = true;
    for (int i = 0; i < st.n; i++) {
        const struct state_line *l = &st.lines[i];
        double theory = l->psi_bytes + l->padding_bytes;
        /* the elements the buffer holds, padding included: a whole number */
        double elements = l->sharded ? st.psi / st.N + st.shard_padding : st.psi + st.padding;
        const char *held = l->sharded ? "a shard" : "Psi + padding";
        if (l->bytes_per_param == (double)(long)l->bytes_per_param)
            snprintf(rule, sizeof rule, "%s%s: %.0f B x %.0f elements (%s)", l->rule, l->sharded ? " / N" : "",
                     l->bytes_per_param, elements, held);
        else /* 8-bit states: codes, block scales and the small tensors' fp32 states */
            snprintf(rule, sizeof rule, "%s%s: over %.0f elements (%s)", l->rule, l->sharded ? " / N" : "", elements,
                     held);
        for (int r = 0; r < n; r++) { /* each rank against its own theory (8-bit blocks differ by rank) */
            struct state_theory sr = theory_trainer_states(c, rank_place_of(c, n, r));
            col[r] = ranks[r].live[l->category];
            own[r] = sr.lines[i].psi_bytes + sr.lines[i].padding_bytes;
            exact = exact && col[r] == own[r];
        }
        row(out, mem_category_name(l->category), col, n, theory, rule);
        if (json) json_rows(json, mem_category_name(l->category), ranks, n, l->category, own);
        states_theory += theory;
    }
    for (int r = 0; r < n; r++)
        col[r] = ranks[r].live[MEM_PARAMS] + ranks[r].live[MEM_MASTER] + ranks[r].live[MEM_GRADS] +
                 ranks[r].live[MEM_OPTIMIZER];
    snprintf(rule, sizeof rule, "model states; measured == theory to the byte: %s", exact ? "yes" : "NO");
    row(out, "model states", col, n, states_theory, rule);
    for (int r = 0; r < n; r++) col[r] = ranks[r].peak[MEM_ACTIVATIONS];
    static const char *const act_rules[] = {
        [RECOMPUTE_NONE] = "L (16 C e + NH T e + 16) B T + head",
        [RECOMPUTE_SELECTIVE] = "L (16 C e + 16) B T + 4 NH T B T (one layer) + head",
        [RECOMPUTE_FULL] = "L C e B T + one layer in fp32 + head"};
    /* at tp the rank's slices: ln1, res2, ln2 and the stream whole, the rest 1/t (docs/TP.md) */
    static const char *const act_rules_tp[] = {
        [RECOMPUTE_NONE] = "L ((4 + 12/t) C e + NH/t T e + 16) B T + head (Vp/t logits)",
        [RECOMPUTE_SELECTIVE] = "L ((4 + 12/t) C e + 16) B T + 4 NH/t T B T (one layer) + head (Vp/t logits)",
        [RECOMPUTE_FULL] = "L C e B T + one layer's slice in fp32 + head (Vp/t logits)"};
    /* with sp also ln1, res2, ln2, the stream, the stats and lnf on T/t positions */
    static const char *const act_rules_sp[] = {
        [RECOMPUTE_NONE] = "L ((4 + 12) C e / t + NH/t T e + 16 / t) B T + head (Vp/t logits)",
        [RECOMPUTE_SELECTIVE] = "L ((4 + 12) C e / t + 16 / t) B T + 4 NH/t T B T (one layer) + head (Vp/t logits)",
        [RECOMPUTE_FULL] = "L C e B T / t + one layer's slice in fp32 + head (Vp/t logits)"};
    /* flash attention: the fp32 lse (4 NH/t bytes a token) instead of the
     * probabilities, and selective keeps what none keeps (include/gpt.h) */
    static const char *const act_rules_flash[] = {"L (16 C e + 4 NH + 16) B T + head",
                                                  "L ((4 + 12/t) C e + 4 NH/t + 16) B T + head (Vp/t logits)",
                                                  "L ((4 + 12) C e / t + 4 NH/t + 16 / t) B T + head (Vp/t logits)"};
    bool sp = c->sequence_parallel && c->tp > 1, flash = c->attention == ATTENTION_FLASH;
    const char *act_rule = sp ? act_rules_sp[c->recompute]
                         : c->tp > 1 ? act_rules_tp[c->recompute] : act_rules[c->recompute];
    if (flash && c->recompute != RECOMPUTE_FULL) act_rule = act_rules_flash[sp ? 2 : c->tp > 1 ? 1 : 0];
    /* llama (model/llama.c): the stream and ln1, atty, res2, ln2 (5C), qkv
     * at GQA width, up, gate, SwiGLU (3F) in e; the probabilities (the
     * ring's lse) and two rstd in fp32 */
    static const char *const llama_rules[][2] = {
        [RECOMPUTE_NONE] = {"L ((5 C + (NH + 2 KV) hs + 3 F) e + 4 NH T + 8) B T + head",
                            "L ((5 C + (NH + 2 KV) hs + 3 F) e + 4 NH + 8) B T + head (the ring's lse: NH a token)"},
        [RECOMPUTE_SELECTIVE] = {"L ((5 C + (NH + 2 KV) hs + 3 F) e + 8) B T + 4 NH T B T (one layer) + head",
                                 "L ((5 C + (NH + 2 KV) hs + 3 F) e + 4 NH + 8) B T + head (the ring's lse: NH a "
                                 "token)"},
        [RECOMPUTE_FULL] = {"L C e B T + one layer's ((4 C + (NH + 2 KV) hs + 3 F) e + 4 NH T + 8) B T + head",
                            "L C e B T + one layer's ((4 C + (NH + 2 KV) hs + 3 F) e + 4 NH + 8) B T + head"}};
    if (c->arch == ARCH_LLAMA) act_rule = llama_rules[c->recompute][flash];
    snprintf(rule, sizeof rule, "%srecompute %s%s: %s%s; Korthikanti%s: %.0f", flash ? "attention flash, " : "",
             c->recompute == RECOMPUTE_NONE ? "none" : c->recompute == RECOMPUTE_FULL ? "full" : "selective",
             flash && c->recompute == RECOMPUTE_SELECTIVE ? " (= none)" : "", act_rule,
             c->pp > 1 ? ", x the schedule's slots" : "",
             sp ? " (tensor + sequence parallel row)" : c->tp > 1 ? " (tensor parallel row)" : "",
             at.korthikanti_total);
    own_theory(rule, sizeof rule, c, col, n, activations_of);
    row(out, "activations", col, n, at.total, rule);
    own_theories(own, c, n, activations_of);
    if (json) json_rows(json, "activations", ranks, n, MEM_ACTIVATIONS, own);
    recompute_note(out, c, rank_place_of(c, n, 0), at.total);
    double comm_theory = theory_trainer_comm_buffers(c, rank_place_of(c, n, 0));
    for (int r = 0; r < n; r++) col[r] = ranks[r].live[MEM_COMM];
    snprintf(rule, sizeof rule, "%s",
             c->zero >= 3 ? (c->overlap ? "gathered embedding, head and two layers (w_p) + two reduce-scatter buckets "
                                          "(w_g, each the largest padded unit + its 1/N ring receive)"
                                        : "gathered embedding, head and one layer (w_p) + reduce-scatter bucket (w_g, "
                                          "the largest padded unit + its 1/N ring receive)")
             : c->zero == 2 ? (c->overlap ? "two reduce-scatter buckets: the largest padded unit + its 1/N ring receive (w_g)"
                                          : "reduce-scatter bucket: the largest padded unit + its 1/N ring receive (w_g)")
                            : "none: collectives work in place");
    own_theory(rule, sizeof rule, c, col, n, comm_buffers_of);
    row(out, "comm", col, n, comm_theory, rule);
    own_theories(own, c, n, comm_buffers_of);
    if (json) json_rows(json, "comm", ranks, n, MEM_COMM, own);
    for (int r = 0; r < n; r++) col[r] = ranks[r].live[MEM_SCRATCH];
    snprintf(rule, sizeof rule, "fp32 unit views and accumulators, widened activations, backward temporaries, ids%s",
             c->sequence_parallel && c->tp > 1 ? ", sp's gathered (B,T,C) and LN grads" : "");
    own_theory(rule, sizeof rule, c, col, n, scratch_of);
    double scratch_theory = scratch_of(c, rank_place_of(c, n, 0));
    row(out, "scratch", col, n, scratch_theory, rule);
    own_theories(own, c, n, scratch_of);
    if (json) json_rows(json, "scratch", ranks, n, MEM_SCRATCH, own);
    rss_rows(out, json, ranks, n, col);
    device_rows(out, json, ranks, n, col);
    if (json) fflush(json);
    free(col);
    free(own);
}

void report_flops(FILE *out, const struct trainer *tr, int steps) {
    if (steps <= 0) return;
    const struct exec_ctx *f = &tr->flops;
    struct flop_theory th = theory_trainer_flops(tr->cfg, rank_place_of(tr->cfg, tr->grid->world_size, 0));
    double secs = tr->train_seconds / steps;
    fprintf(out, "\nFLOPs per optimizer step on rank 0, averaged over %d steps (%.0f tokens per rank per step)\n",
            steps, th.tokens);
    fprintf(out, "  %-11s %14s %14s  %s\n", "part", "measured", "theory", "rule");
    bool flash = tr->cfg->attention == ATTENTION_FLASH;
    bool full = tr->cfg->recompute == RECOMPUTE_FULL, any = tr->cfg->recompute != RECOMPUTE_NONE && (full || !flash);
    const char *per_t = tr->cfg->tp > 1 ? " / t" : "";
    fprintf(out, "  %-11s %14.4e %14.4e  6 x tokens x (%s + Vp C)%s%s: every weight sgemm\n", "layer GEMMs",
            f->gemm / steps, th.gemm, tr->cfg->arch == ARCH_LLAMA ? "L (C (NH + 2 KV) hs + C^2 + 3 C F)" : "12 L C^2",
            per_t, !full                         ? ""
                   : tr->cfg->arch == ARCH_LLAMA ? " + 2 L (C (NH + 2 KV) hs + C^2 + 2 C F) tokens recomputed"
                                                 : " + 16 L C^2 tokens recomputed");
    if (flash) /* model/cpu/attention_lse.c's count; a GPU's tiles issue more (flash_attention.h) */
        fprintf(out, "  %-11s %14.4e %14.4e  %s L B C T (T+1) x accum%s: flash, causal products (QK^T, PV; QK^T again, "
                     "dP, dV, dQ, dK), as the CPU issues them; a GPU issues whole 64 x 64 tiles\n",
                "attn GEMMs", f->attention / steps, th.attention, any ? "(7 + 2)" : "7", per_t);
    else
        fprintf(out, "  %-11s %14.4e %14.4e  %s L B C T^2 x accum%s: QK^T, PV and their gradients, full T x T squares\n",
                "attn GEMMs", f->attention / steps, th.attention, any ? "(12 + 4)" : "12", per_t);
    if (th.recompute > 0)
        fprintf(out, "  %-11s %14s %14.4e  recomputed (hardware FLOPs: in HFU, not in MFU)\n", "recompute", "",
                th.recompute);
    fprintf(out, "  %-11s %14.4e %14s  norms, GELU, softmax, biases, AdamW (no paper formula)\n", "other",
            f->other / steps, "-");
    fprintf(out, "  %-11s %14s %14.4e  PaLM App. B, causal: tokens x (6 N + 6 L C T)%s, N = %.0f (Psi - %s%s)\n",
            "model", "", th.model, per_t, th.n_gemm_params, tr->cfg->arch == ARCH_LLAMA ? "wte: its rows are looked up" : "wpe",
            tr->cfg->tp > 1 ? ", the stage at tp = 1" : "");
    fprintf(out, "  %-11s %14s %14.4e  6 L C T x tokens%s: %s\n", "  attention", "", th.attention_model, per_t,
            flash ? "PaLM's causal half of the T x T products" : "the causal half of the squares issued");
    double issued = (f->gemm + f->attention) / steps;
    fprintf(out, "  achieved: %.2f GFLOP/s issued (every GEMM: HFU), %.2f GFLOP/s model (MFU); %.1f%% of step time "
                 "in sgemm\n",
            issued / secs / 1e9, th.model / secs / 1e9, 100.0 * f->gemm_seconds / tr->train_seconds);
    if (tr->peak_flops <= 0) return;
    char source[192];
    const char *probed = tr->peak_source ? tr->peak_source : "source not recorded";
    if (tr->peak.raised_step >= 0) /* rank 0's own: each rank's peak follows its own rates */
        snprintf(source, sizeof source, "best rate observed: step %d's %s, above the start-up probe's %.1f (%s)",
                 tr->peak.raised_step, peak_rate_name(tr->peak.raised_by), tr->peak.probe / 1e9, probed);
    else snprintf(source, sizeof source, "%s%s", probed, tr->peak.follows ? "; no step ran faster" : "");
    /* the step lines' MFU is each step's own; this one is the mean over the
     * run, whose first steps make oneDNN's primitives and warm the caches */
    fprintf(out, "  peak %.1f GFLOP/s per rank (%s): MFU %.1f%%, HFU %.1f%% over all %d steps (each step line's MFU "
                 "is that step's own; the first steps pay the start-up)\n",
            tr->peak_flops / 1e9, source, 100.0 * th.model / secs / tr->peak_flops,
            100.0 * issued / secs / tr->peak_flops, steps);
}

/* Whether any rank made a call of kind k (k < 0: of any kind) in group g. */
static bool comm_used(const struct rank_stats *ranks, int n, int g, int k) {
    for (int r = 0; r < n; r++)
        for (int j = 0; j < COLL_NUM_KINDS; j++)
            if ((k < 0 || j == k) && ranks[r].comm[g].calls[j] > 0) return true;
    return false;
}

/* The rows a table shows, as JSON lines: one per rank, each rank's own
 * calls and its own theory (the table's rule names the busiest rank's
 * calls, its theory column rank 0's). */
static void comm_json_rows(FILE *json, const struct config *c, const struct rank_stats *ranks, int n, int steps,
                           int g, int k) {
    for (int r = 0; r < n; r++) {
        double theory = theory_trainer_group_comm(c, rank_place_of(c, n, r), (enum grid_group)g, (enum coll_kind)k);
        fprintf(json,
                "{\"type\":\"comm\",\"rank\":%d,\"group\":\"%s\",\"kind\":\"%s\",\"bytes_per_step\":%.17g,"
                "\"calls_per_step\":%.17g,",
                r, grid_group_name((enum grid_group)g), coll_kind_name((enum coll_kind)k),
                ranks[r].comm[g].bytes[k] / steps, ranks[r].comm[g].calls[k] / steps);
        if (theory >= 0) fprintf(json, "\"theory_bytes_per_step\":%.17g}\n", theory);
        else fprintf(json, "\"theory_bytes_per_step\":null}\n");
    }
}

/* One group's rows: dp always shows the kinds ZeRO's theory covers (and
 * the scalars), any group the kinds some rank used. */
static void comm_group_rows(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                            int steps, int g, double *col) {
    static const char *const what[GROUP_NUM] = {
        [GROUP_DP] = "data parallel", [GROUP_TP] = "tensor parallel", [GROUP_PP] = "pipeline parallel",
        [GROUP_TIE] = "first and last pipeline stage: tied embedding and LM head",
        [GROUP_CP] = "context parallel: ring attention's K,V forward, K,V and dK,dV backward"};
    int size = grid_group(tr->grid, (enum grid_group)g)->size;
    fprintf(out, "  [%s] %s, %d rank%s per group on rank 0\n", grid_group_name((enum grid_group)g), what[g], size,
            size == 1 ? "" : "s");
    struct rank_place p0 = rank_place_of(tr->cfg, n, 0);
    struct comm_theory th = theory_trainer_comm(tr->cfg, p0);
    struct tp_comm_theory tt = theory_trainer_tp_comm(tr->cfg, p0);
    double theory[COLL_NUM_KINDS]; /* "-": no theory */
    for (int k = 0; k < COLL_NUM_KINDS; k++) theory[k] = theory_trainer_group_comm(tr->cfg, p0, (enum grid_group)g, (enum coll_kind)k);
    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        bool always = g == GROUP_DP && (theory[k] >= 0 || k == COLL_SCALAR);
        if (!always && !comm_used(ranks, n, g, k)) continue;
        for (int r = 0; r < n; r++) col[r] = ranks[r].comm[g].bytes[k] / steps;
        char rule[192];
        /* The busiest rank's calls: every dp rank makes the same ones, but
         * in the tie group a middle stage makes none. */
        double calls = 0;
        for (int r = 0; r < n; r++) calls = ranks[r].comm[g].calls[k] > calls ? ranks[r].comm[g].calls[k] : calls;
        calls /= steps;
        if (k == COLL_SCALAR) snprintf(rule, sizeof rule, "loss and gradient norm (8 B each), not model traffic");
        else if (k == COLL_SEND && g == GROUP_PP)
            snprintf(rule, sizeof rule, "%.1f calls per step; m x B T C e per boundary%s", calls,
                     tr->cfg->sequence_parallel && tr->cfg->tp > 1 ? " / t (sp: the rank's T/t positions)" : "");
        else if (k == COLL_SEND && g == GROUP_CP) {
            struct cp_comm_theory cr = theory_trainer_cp_comm(tr->cfg, p0);
            snprintf(rule, sizeof rule, "%.1f calls per step; per layer per micro-batch %.0f forward + %.0f backward: "
                     "(cp-1, %scp-1) KV + cp dKV (fp32), KV = B T/cp %s x %.0f = %.0f", calls, cr.layer_forward,
                     cr.layer_backward, tr->cfg->recompute == RECOMPUTE_FULL ? "cp-1 + " : "",
                     tr->cfg->arch == ARCH_LLAMA ? "2 KV hs/t" : "2C/t", cr.kv_elem,
                     cr.kv);
        } else if (k == COLL_SEND) snprintf(rule, sizeof rule, "%.1f calls per step; payload n x dtype size", calls);
        else if (k == COLL_RECV) snprintf(rule, sizeof rule, "%.1f calls per step; payload received, not sent", calls);
        else if (g == GROUP_DP && k == COLL_ALL_REDUCE && tr->cfg->zero == 0)
            /* why a model far below ddp_bucket_mb still makes several calls */
            snprintf(rule, sizeof rule, "%.1f calls per step: %d bucket%s, each of units in the backward's order "
                     "(head, layers, embedding) that lie side by side in the gradient buffer, up to ddp_bucket_mb",
                     calls, tr->engine.z.n_ddp, tr->engine.z.n_ddp == 1 ? "" : "s");
        else if (g == GROUP_TIE && k == COLL_ALL_REDUCE)
            snprintf(rule, sizeof rule, "%.1f calls per step; tied wte's gradient, Vp C w_g%s", calls,
                     tr->engine.z.fac.tie_floats ? " + adafactor's R and C of it (first stage's)" : "");
        else if (g == GROUP_TP && k == COLL_ALL_REDUCE && tt.sp)
            snprintf(rule, sizeof rule, "%.1f calls per step (rank 0: %.0f); m (n LN grads 4C + head's LN 2C + CE "
                     "2 B T) x 4%s", calls, tt.calls, tt.optimizer > 0 ? " + adafactor's sums" : "");
        else if (g == GROUP_TP && k == COLL_ALL_REDUCE)
            snprintf(rule, sizeof rule, "%.1f calls per step (rank 0: %.0f); m (%d n + embedding + head + CE) of "
                     "B T C x 4 (CE: 2 B T x 4)%s", calls, tt.calls, tt.layer_all_reduces,
                     tt.optimizer > 0 ? " + adafactor's sums" : "");
        else if (g == GROUP_TP && k == COLL_REDUCE_SCATTER)
            snprintf(rule, sizeof rule, "%.1f calls per step (rank 0: %.0f); sp: m (%d n + embedding + head) of "
                     "B T C x 4, B calls each", calls, tt.calls_reduce_scatter, tt.layer.reduce_scatters);
        else if (g == GROUP_TP && k == COLL_ALL_GATHER)
            snprintf(rule, sizeof rule, "%.1f calls per step (rank 0: %.0f); sp: m (%d n + embedding + 2 head) of "
                     "B T C x 4, B calls each", calls, tt.calls_all_gather, tt.layer.all_gathers);
        else if (g == GROUP_TP && k == COLL_ALL_REDUCE_MAX)
            snprintf(rule, sizeof rule, "%.1f calls per step; m x the cross-entropy's row maxima, B T x 4", calls);
        else snprintf(rule, sizeof rule, "%.1f calls per step", calls);
        if (theory[k] >= 0 && (g != GROUP_DP || tr->cfg->pp > 1 || tr->cfg->tp > 1)) {
            bool all = true; /* the stages and tp slices differ: each rank against its own */
            for (int r = 0; r < n; r++) all = all && col[r] == theory_trainer_group_comm(tr->cfg, rank_place_of(tr->cfg, n, r),
                                                                     (enum grid_group)g, (enum coll_kind)k);
            size_t used = strlen(rule);
            snprintf(rule + used, sizeof rule - used, "; every rank = own: %s", all ? "yes" : "NO");
        }
        row(out, coll_kind_name((enum coll_kind)k), col, n, theory[k], rule);
        if (json) comm_json_rows(json, tr->cfg, ranks, n, steps, g, k);
    }
    if (g == GROUP_DP) {
        for (int r = 0; r < n; r++)
            col[r] = (ranks[r].comm[g].bytes[COLL_ALL_REDUCE] + ranks[r].comm[g].bytes[COLL_REDUCE_SCATTER] +
                      ranks[r].comm[g].bytes[COLL_ALL_GATHER]) / steps;
        row(out, "model total", col, n, th.total, "exact for padded units");
        fprintf(out, "  ZeRO's formula with Psi: %.0f B (%s)\n", th.zero_formula, th.rule);
        return;
    }
    for (int r = 0; r < n; r++) {
        col[r] = 0;
        for (int k = 0; k < COLL_NUM_KINDS; k++)
            if (k != COLL_RECV && k != COLL_SCALAR) col[r] += ranks[r].comm[g].bytes[k] / steps;
    }
    row(out, "total sent", col, n, -1, "every kind but recv and scalars");
}

/* One time line of rank 0: every group, then per group where several show. */
static void time_line(FILE *out, const struct trainer *tr, const struct rank_stats *ranks, int n, int steps,
                      int groups_shown, const char *what, bool exposed) {
    double seconds = 0;
    for (int g = 0; g < GROUP_NUM; g++) seconds += exposed ? ranks[0].comm[g].exposed_seconds : ranks[0].comm[g].seconds;
    fprintf(out, "  %s: %.1f ms per step on rank 0 (%.0f%% of the step)", what, 1e3 * seconds / steps,
            100.0 * seconds / tr->train_seconds);
    for (int g = 0; groups_shown > 1 && g < GROUP_NUM; g++)
        if (g == GROUP_DP || comm_used(ranks, n, g, -1)) {
            const struct rank_comm *rc = &ranks[0].comm[g];
            fprintf(out, "%s %s %.1f ms", g == GROUP_DP ? ":" : ",", grid_group_name((enum grid_group)g),
                    1e3 * (exposed ? rc->exposed_seconds : rc->seconds) / steps);
        }
    fprintf(out, "\n");
}

void report_comm(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                 int steps) {
    if (steps <= 0) return;
    double *col = calloc((size_t)n, sizeof *col);
    fprintf(out, "\ncommunication per optimizer step, bytes each rank sends (ring volumes), averaged over %d steps\n",
            steps);
    header(out, n, "collective");
    int groups_shown = 0;
    for (int g = 0; g < GROUP_NUM; g++)
        if (g == GROUP_DP || comm_used(ranks, n, g, -1)) {
            comm_group_rows(out, json, tr, ranks, n, steps, g, col);
            groups_shown++;
        }
    time_line(out, tr, ranks, n, steps, groups_shown, "time in collectives", false);
    if (tr->cfg->overlap) /* the share can pass 100%: say why where it is printed */
        fprintf(out, "  (with --overlap the collectives run in flight beside the compute: their time overlaps it and "
                     "may exceed the step; what the step waited for is the exposed time)\n");
    time_line(out, tr, ranks, n, steps, groups_shown, "exposed (compute thread waiting)", true);
    if (json) fflush(json);
    free(col);
}
