/* Ring attention over the cp group (model/context_parallel/cp.h), on host
 * memory, fp32, one OpenMP thread per (sequence, head) as the flash
 * attention it extends (model/cpu/attention_lse.c). With grouped-query
 * attention (llama: KV key/value heads, each read by NH/KV query heads)
 * K and V travel at KV heads' width, and the backward runs one thread per
 * (sequence, key/value head), its group's query heads in turn, so their
 * dK, dV sums have one writer; with KV = NH (GPT-2) that is the plain
 * ring, step for step. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cp.h"
#include "../cpu/act_io.h"
#include "../cpu/attention_rows.h"
#include "../gpt_acts.h"

/* Tags of the ring's three streams (messages between two ranks with one
 * tag arrive in the order sent). */
enum { TAG_KV = 0, TAG_KV_BACKWARD = 1, TAG_DKV = 2 };

/* fc->other per score and per merged row (the merge: two exponentials, a
 * log, and out = out wa + o_b wb over hs) */
enum { OTHER_PER_SCORE = 5, OTHER_PER_MERGE = 6, OTHER_PER_MERGE_HS = 3, BWD_PER_ROW_HS = 4 };

/* The ring's buffers, carved from m->ring (gpt_set_context_parallel). */
struct ring {
    void *kv[2];    /* (B, T/cp, 2 KVw): a block's keys then values per position, in the stores' dtype
                       (ring_kv_dtype); one computed, one arriving */
    float *dkv[2];  /* (B, T/cp, 2 KVw): a block's dK, dV accumulator; one filled, one in flight */
    float *dkv_in;  /* (B, T/cp, 2 KVw): the accumulator arriving from rank - 1 */
    float *o;       /* (B, T/cp, Cl): fp32 path: a block's partial output, before the merge; bf16 path:
                       the running output (forward), dQ (backward), whole before rounded once */
    float *lse_blk; /* (B, NHl, T/cp) */
};

/* The dtype K and V are stored and sent in: the saved qkv's on the bf16
 * data path (acts_stores_direct), else fp32. The dK, dV accumulators stay fp32
 * (each rank adds to them: rounding there would round cp times). */
static enum dtype ring_kv_dtype(const struct gpt *m) { return acts_stores_direct(m) ? DTYPE_BF16 : DTYPE_FP32; }

/* This rank's key/value heads, their width KVw (= Cl without GQA), and a
 * qkv row's: NHl query heads, then KVl key and KVl value heads. */
static int64_t head_dim(const struct gpt *m) { return m->Cl / m->NHl; }
static int64_t kv_heads_local(const struct gpt *m) { return (int64_t)kv_heads(&m->shape) * m->NHl / m->shape.NH; }
static int64_t kv_width(const struct gpt *m) { return kv_heads_local(m) * head_dim(m); }
static int64_t qkv_width(const struct gpt *m) { return m->Cl + 2 * kv_width(m); }

static size_t kv_numel(const struct gpt *m) { return (size_t)m->B * m->shape.T * 2 * (size_t)kv_width(m); }

static struct ring ring_of(const struct gpt *m) {
    size_t n = kv_numel(m), kv_bytes = n * dtype_size(ring_kv_dtype(m));
    char *p = (char *)m->ring;
    float *f = (float *)(p + 2 * kv_bytes); /* n is even: 4-byte aligned */
    return (struct ring){.kv = {p, p + kv_bytes}, .dkv = {f, f + n}, .dkv_in = f + 2 * n, .o = f + 3 * n,
                         .lse_blk = f + 3 * n + (size_t)m->B * m->shape.T * m->Cl};
}

void gpt_set_context_parallel(struct gpt *m, struct collectives *cp, struct mem_tracker *mem) {
    m->cp = cp;
    if (!cp_ring_on(m)) return; /* one rank: the plain model's points stay */
    m->cpp = &CONTEXT_PARALLEL_POINTS;
    m->ring = mem_alloc(mem, m->space, MEM_SCRATCH, "ring attention K,V, dK,dV, block output",
                        gpt_ring_bytes(m->B, m->shape.T, m->Cl, (int)kv_width(m), m->NHl, dtype_size(ring_kv_dtype(m))));
    if (m->rope_pos) m->cpp->rope_positions(m, m->rope_pos); /* llama: its rows' global positions */
}

size_t gpt_ring_bytes(int B, int T_local, int Cl, int KVw, int NHl, size_t kv_bytes) {
    size_t kv = (size_t)B * T_local * 2 * KVw;
    return 2 * kv * kv_bytes + (3 * kv + (size_t)B * T_local * Cl + (size_t)B * NHl * T_local) * sizeof(float);
}

/* kv (B, T/cp, 2 KVw) <- the keys and values of qkv (B, T/cp, Cl + 2 KVw),
 * each of element size e (the stores' dtype: a copy, no conversion). */
static void pack_kv(const struct gpt *m, void *kv, const void *qkv, size_t e) {
    size_t rows = (size_t)m->B * m->shape.T, Cl = (size_t)m->Cl, W = (size_t)kv_width(m), ld = (size_t)qkv_width(m);
    for (size_t i = 0; i < rows; i++)
        memcpy((char *)kv + i * 2 * W * e, (const char *)qkv + (i * ld + Cl) * e, 2 * W * e);
}

static int prev_rank(const struct collectives *c) { return (c->rank + c->size - 1) % c->size; }
static int next_rank(const struct collectives *c) { return (c->rank + 1) % c->size; }

static void wait_ok(struct collectives *c, struct coll_request r, const char *what) {
    if (c->wait(c, r) != 0) fprintf(stderr, "ring attention: cp rank %d of %d: waiting for %s failed\n", c->rank, c->size, what);
}

/* One step's exchange: block `send` goes to rank + 1, the next arrives
 * from rank - 1 into `recv`. */
struct exchange {
    struct coll_request send, recv;
};
static struct exchange post_exchange(struct collectives *c, void *send, void *recv, size_t n, enum dtype dt, int tag) {
    struct exchange x;
    x.recv = c->irecv(c, recv, n, dt, prev_rank(c), tag);
    x.send = c->isend(c, send, n, dt, next_rank(c), tag);
    return x;
}
static void wait_exchange(struct collectives *c, struct exchange x, const char *what) {
    wait_ok(c, x.send, what);
    wait_ok(c, x.recv, what);
}

/* One block's work: this rank's queries against the keys of cp rank src. */
struct block {
    int64_t B, T, NH, Cl, hs;
    int64_t KV, W, ld; /* key/value heads, their width, a qkv row's width */
    float scale;
    struct cp_split me, them;
};

static struct block block_of(const struct gpt *m, int src) {
    struct block k = {.B = m->B, .T = m->shape.T, .NH = m->NHl, .Cl = m->Cl, .hs = head_dim(m),
                      .KV = kv_heads_local(m), .W = kv_width(m), .ld = qkv_width(m), .me = cp_model_split(m)};
    k.scale = 1.0f / sqrtf((float)k.hs);
    k.them = k.me;
    k.them.rank = src;
    return k;
}

/* The block's keys local query row t sees: a prefix of them (0: every
 * one is in the query's future, a fully masked row of the block, skipped). */
static int block_keys(const struct block *k, int64_t t) {
    return cp_visible_keys(k->them, cp_global_position(k->me, (int)t));
}

/* One head's fp32 operands in a block: its query rows (q_ld apart) and
 * the block's key and value rows (kv_ld apart): views into the fp32 qkv
 * and kv (fp32 path), or this thread's tiles widened from the bf16 stores
 * (bf16 path). The rows' sums do not depend on the strides: the bf16 path
 * computes the fp32 path's values on the widened operands, bit for bit. */
struct head_ops {
    int64_t b, h;
    const float *q, *k, *v;
    int64_t q_ld, kv_ld;
};

/* Sequence b, query head h (bh = b NH + h) of the block as the fp32 path
 * reads it: q in qkv (ld apart), k and v of its key/value head h / (NH/KV)
 * in kv (2 W apart). */
static struct head_ops head_rows(const struct block *k, int64_t bh, const float *qkv, const float *kv) {
    int64_t b = bh / k->NH, h = bh % k->NH;
    const float *key = kv + b * k->T * 2 * k->W + h / (k->NH / k->KV) * k->hs;
    return (struct head_ops){.b = b, .h = h, .q = qkv + b * k->T * k->ld + h * k->hs, .k = key, .v = key + k->W,
                             .q_ld = k->ld, .kv_ld = 2 * k->W};
}

/* The same head widened (exact) from the bf16 qkv and kv into this
 * thread's tiles q, k, v (T x hs each, packed: ld hs). */
static struct head_ops head_tiles(const struct block *k, int64_t bh, const bf16 *qkv, const bf16 *kv, float *q) {
    int64_t b = bh / k->NH, h = bh % k->NH, T = k->T, hs = k->hs, W = k->W;
    float *kt = q + T * hs, *vt = kt + T * hs;
    const bf16 *key = kv + b * T * 2 * W + h / (k->NH / k->KV) * hs;
    act_widen_rows(q, qkv + b * T * k->ld + h * hs, k->ld, T, hs);
    act_widen_rows(kt, key, 2 * W, T, hs);
    act_widen_rows(vt, key + W, 2 * W, T, hs);
    return (struct head_ops){.b = b, .h = h, .q = q, .k = kt, .v = vt, .q_ld = hs, .kv_ld = hs};
}

/* Query-key pairs one (sequence, head) computes in the block. */
static double block_scores(const struct block *k) {
    double n = 0;
    for (int64_t t = 0; t < k->T; t++) n += block_keys(k, t);
    return n;
}

/* Merges a block's (o_b, lse_b) into the row's running (out, lse). */
static void merge_row(float *out, float *lse, const float *o_b, float lse_b, int64_t hs) {
    float hi = *lse > lse_b ? *lse : lse_b;
    float merged = hi + logf(expf(*lse - hi) + expf(lse_b - hi));
    float wa = expf(*lse - merged), wb = expf(lse_b - merged);
    for (int64_t d = 0; d < hs; d++) out[d] = out[d] * wa + o_b[d] * wb;
    *lse = merged;
}

/* One head's query rows against the block x: the first block (src = this
 * rank) writes the running out (rows Cl apart) and lse, later ones write
 * their partial o_b (rows ob_ld apart) and lse_b, then merge. */
static void head_forward(const struct block *k, struct head_ops x, float *out, float *lse, float *o_b,
                         int64_t ob_ld, float *lse_b, bool first) {
    for (int64_t t = 0; t < k->T; t++) {
        int n = block_keys(k, t);
        if (n == 0) continue;
        const float *q = x.q + t * x.q_ld;
        if (first) {
            attention_lse_forward_row(out + t * k->Cl, lse + t, q, x.k, x.v, n, k->hs, x.kv_ld, k->scale);
            continue;
        }
        attention_lse_forward_row(o_b + t * ob_ld, lse_b + t, q, x.k, x.v, n, k->hs, x.kv_ld, k->scale);
        merge_row(out + t * k->Cl, lse + t, o_b + t * ob_ld, lse_b[t], k->hs);
    }
}

static void count_forward(struct gpt *m, const struct block *k, bool first) {
    double heads = (double)k->B * k->NH, scores = block_scores(k);
    m->flops->attention += heads * scores * 2 * 2 * k->hs; /* QK^T and PV */
    double merges = first ? 0 : (double)k->T * (OTHER_PER_MERGE + OTHER_PER_MERGE_HS * k->hs);
    m->flops->other += heads * (scores * OTHER_PER_SCORE + merges);
}

/* This rank's queries against the keys and values kv of cp rank src; the
 * first block (src = this rank) writes out and lse, later ones merge. */
static void block_forward(struct gpt *m, float *out, float *lse, const float *qkv, const float *kv, int src,
                          bool first, const struct ring *r) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, Cl = k.Cl, hs = k.hs;
#pragma omp parallel for
    for (int64_t bh = 0; bh < k.B * k.NH; bh++) {
        const struct head_ops x = head_rows(&k, bh, qkv, kv);
        size_t at = (size_t)x.b * T * Cl + x.h * hs;
        head_forward(&k, x, out + at, lse + bh * T, r->o + at, Cl, r->lse_blk + bh * T, first);
    }
    count_forward(m, &k, first);
}

/* The same on the bf16 path: each thread widens its head's q and the
 * block's k, v into its tiles (scratch: attention_lse_bf16_scratch's q, k,
 * v and out tiles, the last the block's partial output); the running
 * output is r->o, fp32, rounded once into out16 after the last block. */
static void block_forward_bf16(struct gpt *m, bf16 *out16, float *lse, const bf16 *qkv, const bf16 *kv, int src,
                               bool first, bool last, const struct ring *r, float *scratch) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, Cl = k.Cl, hs = k.hs;
#pragma omp parallel for num_threads(attention_lse_threads(k.B, k.NH))
    for (int64_t bh = 0; bh < k.B * k.NH; bh++) {
        float *q = attention_lse_tiles(scratch, k.B, T, k.NH, hs), *o_b = q + 3 * T * hs;
        const struct head_ops x = head_tiles(&k, bh, qkv, kv, q);
        size_t at = (size_t)x.b * T * Cl + x.h * hs;
        head_forward(&k, x, r->o + at, lse + bh * T, o_b, hs, r->lse_blk + bh * T, first);
        if (!last) continue;
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < hs; d++) out16[at + t * Cl + d] = f32_to_bf16(r->o[at + t * Cl + d]);
    }
    count_forward(m, &k, first);
}

/* The forward's ring over both paths: out, qkv fp32 (scratch unused) or
 * bf16 (the stores; scratch the bf16 flash attention's). */
static void ring_forward(struct gpt *m, void *out, float *lse, const void *qkv, float *scratch) {
    struct collectives *c = m->cp;
    struct ring r = ring_of(m);
    enum dtype dt = ring_kv_dtype(m);
    size_t n = kv_numel(m);
    pack_kv(m, r.kv[0], qkv, dtype_size(dt));
    for (int i = 0; i < c->size; i++) {
        int src = (c->rank - i + c->size) % c->size;
        bool more = i < c->size - 1;
        struct exchange x = {{0}, {0}};
        if (more) x = post_exchange(c, r.kv[i % 2], r.kv[(i + 1) % 2], n, dt, TAG_KV); /* the next block in flight */
        if (dt == DTYPE_BF16) block_forward_bf16(m, out, lse, qkv, r.kv[i % 2], src, i == 0, !more, &r, scratch);
        else block_forward(m, out, lse, qkv, r.kv[i % 2], src, i == 0, &r);
        if (more) wait_exchange(c, x, "the next K,V block");
    }
}

void cp_ring_attention_forward(struct gpt *m, float *out, float *lse, const float *qkv) {
    ring_forward(m, out, lse, qkv, NULL);
}

void cp_ring_attention_forward_bf16(struct gpt *m, bf16 *out, float *lse, const bf16 *qkv, float *scratch) {
    ring_forward(m, out, lse, qkv, scratch);
}

/* One head's query rows against the block x: dQ rows (dq_ld apart,
 * unscaled) accumulate in dq, the block's dK, dV (unscaled, rows x.kv_ld
 * apart as its keys) in dk, dv; dy rows Cl apart. */
static void head_backward(const struct block *k, struct head_ops x, float *dq, int64_t dq_ld, float *dk, float *dv,
                          const float *dy, const float *lse, const float *D) {
    for (int64_t t = 0; t < k->T; t++) {
        int n = block_keys(k, t);
        if (n == 0) continue;
        attention_lse_backward_row(dq + t * dq_ld, dk, dv, x.q + t * x.q_ld, dy + t * k->Cl, x.k, x.v, lse[t], D[t],
                                   n, k->hs, x.kv_ld, k->scale);
    }
}

static void count_backward(struct gpt *m, const struct block *k) {
    double heads = (double)k->B * k->NH, scores = block_scores(k);
    m->flops->attention += heads * scores * 5 * 2 * k->hs; /* QK^T, dP, dV, dQ, dK */
    m->flops->other += heads * scores * OTHER_PER_SCORE;
}

/* This rank's queries against the block of cp rank src: dQ rows (unscaled)
 * accumulate in dqkv, the block's dK, dV (unscaled) into dkv; one thread
 * per (sequence, key/value head), its query heads in turn. */
static void block_backward(struct gpt *m, float *dqkv, float *dkv, const float *dout, const float *qkv,
                           const float *kv, const float *lse, const float *D, int src) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, Cl = k.Cl, hs = k.hs, group = k.NH / k.KV;
#pragma omp parallel for
    for (int64_t bg = 0; bg < k.B * k.KV; bg++)
        for (int64_t bh = bg * group; bh < (bg + 1) * group; bh++) { /* b NH + h, h in the group */
            const struct head_ops x = head_rows(&k, bh, qkv, kv);
            /* this head's gradients: dQ in dqkv's layout, dK and dV in the block's */
            float *dk = dkv + (x.k - kv);
            head_backward(&k, x, dqkv + (x.q - qkv), k.ld, dk, dk + k.W, dout + (x.b * T) * Cl + x.h * hs,
                          lse + bh * T, D + bh * T);
        }
    count_backward(m, &k);
}

/* The same on the bf16 path: the head's q, k, v widened into this
 * thread's tiles, dQ into dq (B, T/cp, Cl, fp32), the head's dK, dV into
 * its dk, dv tiles (from zero, as dkv's rows: the same sums), then copied
 * into the block's accumulator dkv. */
static void block_backward_bf16(struct gpt *m, float *dq, float *dkv, const float *dout, const bf16 *qkv,
                                const bf16 *kv, const float *lse, float *scratch, int src) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, Cl = k.Cl, hs = k.hs, W = k.W, group = k.NH / k.KV;
#pragma omp parallel for num_threads(attention_lse_threads(k.B, k.KV))
    for (int64_t bg = 0; bg < k.B * k.KV; bg++) {
        float *q = attention_lse_tiles(scratch, k.B, T, k.NH, hs), *dk = q + 4 * T * hs, *dv = dk + T * hs;
        memset(dk, 0, (size_t)(2 * T * hs) * sizeof *dk);
        int64_t b = 0;
        for (int64_t bh = bg * group; bh < (bg + 1) * group; bh++) { /* the group's query heads, in turn */
            const struct head_ops x = head_tiles(&k, bh, qkv, kv, q);
            size_t at = (size_t)x.b * T * Cl + x.h * hs;
            head_backward(&k, x, dq + at, Cl, dk, dv, dout + at, lse + bh * T, scratch + bh * T);
            b = x.b;
        }
        float *g = dkv + (size_t)b * T * 2 * W + bg % k.KV * hs;
        for (int64_t j = 0; j < T; j++) {
            memcpy(g + j * 2 * W, dk + j * hs, (size_t)hs * sizeof *g);
            memcpy(g + j * 2 * W + W, dv + j * hs, (size_t)hs * sizeof *g);
        }
    }
    count_backward(m, &k);
}

/* D_t = dout_t . out_t per row and head, and dQ's accumulator zeroed: fp32
 * path dQ's rows of dqkv, from the fp32 out; bf16 path r->o, from the out
 * store, each head's rows widened into its thread's out tile first. */
static void backward_begin(struct gpt *m, float *dqkv, float *D, const float *dout, const float *out) {
    const int64_t B = m->B, T = m->shape.T, NH = m->NHl, Cl = m->Cl, hs = Cl / NH, ld = qkv_width(m);
#pragma omp parallel for
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        for (int64_t t = 0; t < T; t++) {
            size_t at = (size_t)(b * T + t) * Cl + h * hs;
            D[bh * T + t] = attention_dot(dout + at, out + at, hs);
            memset(dqkv + (b * T + t) * ld + h * hs, 0, (size_t)hs * sizeof *dqkv);
        }
    }
}

static void backward_begin_bf16(struct gpt *m, float *dq, float *scratch, const float *dout, const bf16 *out) {
    const int64_t B = m->B, T = m->shape.T, NH = m->NHl, Cl = m->Cl, hs = Cl / NH;
#pragma omp parallel for num_threads(attention_lse_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        float *y = attention_lse_tiles(scratch, B, T, NH, hs) + 3 * T * hs;
        size_t at = (size_t)b * T * Cl + h * hs;
        act_widen_rows(y, out + at, Cl, T, hs);
        for (int64_t t = 0; t < T; t++) {
            scratch[bh * T + t] = attention_dot(dout + at + t * Cl, y + t * hs, hs);
            memset(dq + at + t * Cl, 0, (size_t)hs * sizeof *dq);
        }
    }
}

/* The backward's ring over both paths (bf16: dqkv16, qkv16 set, the fp32
 * pointers NULL, D the bf16 scratch's head). dQ's rows accumulate in dq
 * (ld dq_ld): dqkv's (fp32) or r.o (bf16). */
static void ring_backward(struct gpt *m, float *dqkv, bf16 *dqkv16, float *D, const float *dout, const float *qkv,
                          const bf16 *qkv16, const float *lse) {
    struct collectives *c = m->cp;
    struct ring r = ring_of(m);
    enum dtype dt = ring_kv_dtype(m);
    size_t n = kv_numel(m);
    pack_kv(m, r.kv[0], qkv16 ? (const void *)qkv16 : (const void *)qkv, dtype_size(dt));
    /* the accumulators arrive from rank - 1, one per step after the first
     * and the last one (this rank's own block, whole) after the loop */
    struct coll_request in = c->irecv(c, r.dkv_in, n, DTYPE_FP32, prev_rank(c), TAG_DKV);
    struct coll_request sent[2] = {{0}, {0}};
    for (int i = 0; i < c->size; i++) {
        int src = (c->rank - i + c->size) % c->size;
        bool more = i < c->size - 1;
        struct exchange x = {{0}, {0}};
        if (more) x = post_exchange(c, r.kv[i % 2], r.kv[(i + 1) % 2], n, dt, TAG_KV_BACKWARD);
        float *acc = r.dkv[i % 2];
        if (i >= 2) wait_ok(c, sent[i % 2], "a dK,dV block sent"); /* acc's last send, two steps ago */
        memset(acc, 0, n * sizeof *acc);
        if (qkv16) block_backward_bf16(m, r.o, acc, dout, qkv16, r.kv[i % 2], lse, D, src);
        else block_backward(m, dqkv, acc, dout, qkv, r.kv[i % 2], lse, D, src);
        if (i > 0) { /* what ranks before this one added to src's block */
            wait_ok(c, in, "a dK,dV block");
            for (size_t j = 0; j < n; j++) acc[j] += r.dkv_in[j];
            in = c->irecv(c, r.dkv_in, n, DTYPE_FP32, prev_rank(c), TAG_DKV);
        }
        sent[i % 2] = c->isend(c, acc, n, DTYPE_FP32, next_rank(c), TAG_DKV);
        if (more) wait_exchange(c, x, "the next K,V block");
    }
    wait_ok(c, in, "this rank's dK,dV");
    for (int i = c->size - 2 < 0 ? 0 : c->size - 2; i < c->size; i++) wait_ok(c, sent[i % 2], "a dK,dV block sent");
    /* this rank's dK, dV home: into dqkv, and the 1/sqrt(hs) of dQ and dK
     * (bf16: each rounded once as it is stored) */
    const int64_t B = m->B, T = m->shape.T, NH = m->NHl, Cl = m->Cl, hs = Cl / NH, W = kv_width(m), ld = qkv_width(m);
    const float scale = 1.0f / sqrtf((float)hs);
    for (int64_t i = 0; i < B * T; i++) {
        const float *g = r.dkv_in + i * 2 * W;
        if (dqkv16) {
            bf16 *d = dqkv16 + i * ld;
            const float *q = r.o + i * Cl;
            for (int64_t e = 0; e < Cl; e++) d[e] = f32_to_bf16(q[e] * scale);
            for (int64_t e = 0; e < W; e++) {
                d[Cl + e] = f32_to_bf16(g[e] * scale);
                d[Cl + W + e] = f32_to_bf16(g[W + e]);
            }
            continue;
        }
        float *dq = dqkv + i * ld;
        for (int64_t d = 0; d < Cl; d++) dq[d] *= scale;
        for (int64_t d = 0; d < W; d++) {
            dq[Cl + d] = g[d] * scale;
            dq[Cl + W + d] = g[W + d];
        }
    }
    m->flops->other += (double)B * NH * T * BWD_PER_ROW_HS * hs;
}

void cp_ring_attention_backward(struct gpt *m, float *dqkv, float *D, const float *dout, const float *qkv,
                                const float *out, const float *lse) {
    backward_begin(m, dqkv, D, dout, out);
    ring_backward(m, dqkv, NULL, D, dout, qkv, NULL, lse);
}

void cp_ring_attention_backward_bf16(struct gpt *m, bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv,
                                     const bf16 *out, const float *lse) {
    struct ring r = ring_of(m);
    backward_begin_bf16(m, r.o, scratch, dout, out);
    ring_backward(m, NULL, dqkv, scratch, dout, NULL, qkv, lse);
}

/* The room's table (model/parallel_points.h): what model/gpt.c calls at cp > 1. */
const struct cp_points CONTEXT_PARALLEL_POINTS = {
    .positions_add = cp_positions_add, .embedding_backward = cp_embedding_backward, .rope_positions = cp_rope_positions,
    .attention_forward = cp_ring_attention_forward, .attention_backward = cp_ring_attention_backward,
    .attention_forward_bf16 = cp_ring_attention_forward_bf16, .attention_backward_bf16 = cp_ring_attention_backward_bf16};
