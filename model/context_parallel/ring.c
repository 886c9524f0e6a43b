/* Ring attention over the cp group (model/context_parallel/cp.h), on host
 * memory, fp32, one OpenMP thread per (sequence, head) as the flash
 * attention it extends (model/cpu/attention_lse.c). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cp.h"
#include "../cpu/attention_rows.h"

/* Tags of the ring's three streams (messages between two ranks with one
 * tag arrive in the order sent). */
enum { TAG_KV = 0, TAG_KV_BACKWARD = 1, TAG_DKV = 2 };

/* fc->other per score and per merged row (the merge: two exponentials, a
 * log, and out = out wa + o_b wb over hs) */
enum { OTHER_PER_SCORE = 5, OTHER_PER_MERGE = 6, OTHER_PER_MERGE_HS = 3, BWD_PER_ROW_HS = 4 };

/* The ring's buffers, carved from m->ring (gpt_set_context_parallel). */
struct ring {
    float *kv[2];   /* (B, T/cp, 2 Cl): a block's keys then values per position; one computed, one arriving */
    float *dkv[2];  /* (B, T/cp, 2 Cl): a block's dK, dV accumulator; one filled, one in flight */
    float *dkv_in;  /* (B, T/cp, 2 Cl): the accumulator arriving from rank - 1 */
    float *o_blk;   /* (B, T/cp, Cl): a block's partial output, before the merge */
    float *lse_blk; /* (B, NHl, T/cp) */
};

static size_t kv_numel(const struct gpt *m) { return (size_t)m->B * m->shape.T * 2 * m->Cl; }

static size_t ring_numel(const struct gpt *m) {
    size_t o = (size_t)m->B * m->shape.T * m->Cl, l = (size_t)m->B * m->NHl * m->shape.T;
    return 5 * kv_numel(m) + o + l;
}

static struct ring ring_of(const struct gpt *m) {
    size_t n = kv_numel(m);
    float *p = m->ring;
    return (struct ring){.kv = {p, p + n}, .dkv = {p + 2 * n, p + 3 * n}, .dkv_in = p + 4 * n, .o_blk = p + 5 * n,
                         .lse_blk = p + 5 * n + (size_t)m->B * m->shape.T * m->Cl};
}

void gpt_set_context_parallel(struct gpt *m, struct collectives *cp, struct mem_tracker *mem) {
    m->cp = cp;
    if (!cp_ring_on(m)) return;
    m->ring = mem_alloc(mem, m->space, MEM_SCRATCH, "ring attention K,V, dK,dV, block output (fp32)",
                        ring_numel(m) * sizeof(float));
}

size_t gpt_ring_bytes(int B, int T_local, int Cl, int NHl) {
    size_t kv = (size_t)B * T_local * 2 * Cl;
    return (5 * kv + (size_t)B * T_local * Cl + (size_t)B * NHl * T_local) * sizeof(float);
}

/* kv (B, T/cp, 2 Cl) <- the keys and values of qkv (B, T/cp, 3 Cl). */
static void pack_kv(const struct gpt *m, float *kv, const float *qkv) {
    size_t rows = (size_t)m->B * m->shape.T, Cl = (size_t)m->Cl;
    for (size_t i = 0; i < rows; i++) memcpy(kv + i * 2 * Cl, qkv + i * 3 * Cl + Cl, 2 * Cl * sizeof *kv);
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
static struct exchange post_exchange(struct collectives *c, float *send, float *recv, size_t n, int tag) {
    struct exchange x;
    x.recv = c->irecv(c, recv, n, DTYPE_FP32, prev_rank(c), tag);
    x.send = c->isend(c, send, n, DTYPE_FP32, next_rank(c), tag);
    return x;
}
static void wait_exchange(struct collectives *c, struct exchange x, const char *what) {
    wait_ok(c, x.send, what);
    wait_ok(c, x.recv, what);
}

/* One block's work: this rank's queries against the keys of cp rank src. */
struct block {
    int64_t B, T, NH, Cl, hs;
    float scale;
    struct cp_split me, them;
};

static struct block block_of(const struct gpt *m, int src) {
    struct block k = {.B = m->B, .T = m->shape.T, .NH = m->NHl, .Cl = m->Cl, .hs = m->Cl / m->NHl,
                      .me = cp_model_split(m)};
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

/* Sequence b, head h (bh = b NH + h) of the block: its query rows in qkv
 * (3 Cl apart), the block's key and value rows in kv (2 Cl apart). */
struct head_rows {
    int64_t b, h;
    const float *q, *k, *v;
};
static struct head_rows head_rows(const struct block *k, int64_t bh, const float *qkv, const float *kv) {
    int64_t b = bh / k->NH, h = bh % k->NH;
    const float *key = kv + b * k->T * 2 * k->Cl + h * k->hs;
    return (struct head_rows){.b = b, .h = h, .q = qkv + b * k->T * 3 * k->Cl + h * k->hs, .k = key, .v = key + k->Cl};
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

/* This rank's queries against the keys and values kv of cp rank src; the
 * first block (src = this rank) writes out and lse, later ones merge. */
static void block_forward(struct gpt *m, float *out, float *lse, const float *qkv, const float *kv, int src,
                          bool first, const struct ring *r) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, NH = k.NH, Cl = k.Cl, hs = k.hs;
#pragma omp parallel for
    for (int64_t bh = 0; bh < k.B * NH; bh++) {
        const struct head_rows x = head_rows(&k, bh, qkv, kv);
        for (int64_t t = 0; t < T; t++) {
            int n = block_keys(&k, t);
            if (n == 0) continue;
            size_t row = (size_t)(x.b * T + t) * Cl + x.h * hs;
            if (first) {
                attention_lse_forward_row(out + row, lse + bh * T + t, x.q + t * 3 * Cl, x.k, x.v, n, hs, 2 * Cl,
                                          k.scale);
                continue;
            }
            float *lb = r->lse_blk + bh * T + t;
            attention_lse_forward_row(r->o_blk + row, lb, x.q + t * 3 * Cl, x.k, x.v, n, hs, 2 * Cl, k.scale);
            merge_row(out + row, lse + bh * T + t, r->o_blk + row, *lb, hs);
        }
    }
    double heads = (double)k.B * NH, scores = block_scores(&k);
    m->flops->attention += heads * scores * 2 * 2 * hs; /* QK^T and PV */
    double merges = first ? 0 : (double)T * (OTHER_PER_MERGE + OTHER_PER_MERGE_HS * hs);
    m->flops->other += heads * (scores * OTHER_PER_SCORE + merges);
}

void cp_ring_attention_forward(struct gpt *m, float *out, float *lse, const float *qkv) {
    struct collectives *c = m->cp;
    struct ring r = ring_of(m);
    size_t n = kv_numel(m);
    pack_kv(m, r.kv[0], qkv);
    for (int i = 0; i < c->size; i++) {
        int src = (c->rank - i + c->size) % c->size;
        bool more = i < c->size - 1;
        struct exchange x = {{0}, {0}};
        if (more) x = post_exchange(c, r.kv[i % 2], r.kv[(i + 1) % 2], n, TAG_KV); /* the next block in flight */
        block_forward(m, out, lse, qkv, r.kv[i % 2], src, i == 0, &r);
        if (more) wait_exchange(c, x, "the next K,V block");
    }
}

/* This rank's queries against the block of cp rank src: dQ rows (unscaled)
 * accumulate in dqkv, the block's dK, dV (unscaled) into dkv. */
static void block_backward(struct gpt *m, float *dqkv, float *dkv, const float *dout, const float *qkv,
                           const float *kv, const float *lse, const float *D, int src) {
    const struct block k = block_of(m, src);
    const int64_t T = k.T, NH = k.NH, Cl = k.Cl, hs = k.hs;
#pragma omp parallel for
    for (int64_t bh = 0; bh < k.B * NH; bh++) {
        const struct head_rows x = head_rows(&k, bh, qkv, kv);
        /* this head's gradients: dQ in dqkv's layout, dK and dV in the block's */
        float *dq = dqkv + (x.q - qkv), *dk = dkv + (x.k - kv), *dv = dk + Cl;
        for (int64_t t = 0; t < T; t++) {
            int n = block_keys(&k, t);
            if (n == 0) continue;
            attention_lse_backward_row(dq + t * 3 * Cl, dk, dv, x.q + t * 3 * Cl, dout + (x.b * T + t) * Cl + x.h * hs,
                                       x.k, x.v, lse[bh * T + t], D[bh * T + t], n, hs, 2 * Cl, k.scale);
        }
    }
    double heads = (double)k.B * NH, scores = block_scores(&k);
    m->flops->attention += heads * scores * 5 * 2 * hs; /* QK^T, dP, dV, dQ, dK */
    m->flops->other += heads * scores * OTHER_PER_SCORE;
}

void cp_ring_attention_backward(struct gpt *m, float *dqkv, float *D, const float *dout, const float *qkv,
                                const float *out, const float *lse) {
    struct collectives *c = m->cp;
    struct ring r = ring_of(m);
    const int64_t B = m->B, T = m->shape.T, NH = m->NHl, Cl = m->Cl, hs = Cl / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    size_t n = kv_numel(m);
    /* D_t = dout_t . out_t per row and head; dQ starts at zero */
#pragma omp parallel for
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        for (int64_t t = 0; t < T; t++) {
            size_t at = (size_t)(b * T + t) * Cl + h * hs;
            D[bh * T + t] = attention_dot(dout + at, out + at, hs);
            memset(dqkv + (b * T + t) * 3 * Cl + h * hs, 0, (size_t)hs * sizeof *dqkv);
        }
    }
    pack_kv(m, r.kv[0], qkv);
    /* the accumulators arrive from rank - 1, one per step after the first
     * and the last one (this rank's own block, whole) after the loop */
    struct coll_request in = c->irecv(c, r.dkv_in, n, DTYPE_FP32, prev_rank(c), TAG_DKV);
    struct coll_request sent[2] = {{0}, {0}};
    for (int i = 0; i < c->size; i++) {
        int src = (c->rank - i + c->size) % c->size;
        bool more = i < c->size - 1;
        struct exchange x = {{0}, {0}};
        if (more) x = post_exchange(c, r.kv[i % 2], r.kv[(i + 1) % 2], n, TAG_KV_BACKWARD);
        float *acc = r.dkv[i % 2];
        if (i >= 2) wait_ok(c, sent[i % 2], "a dK,dV block sent"); /* acc's last send, two steps ago */
        memset(acc, 0, n * sizeof *acc);
        block_backward(m, dqkv, acc, dout, qkv, r.kv[i % 2], lse, D, src);
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
    /* this rank's dK, dV home: into dqkv, and the 1/sqrt(hs) of dQ and dK */
    for (int64_t i = 0; i < B * T; i++) {
        float *dq = dqkv + i * 3 * Cl;
        const float *g = r.dkv_in + i * 2 * Cl;
        for (int64_t d = 0; d < Cl; d++) {
            dq[d] *= scale;
            dq[Cl + d] = g[d] * scale;
            dq[2 * Cl + d] = g[Cl + d];
        }
    }
    m->flops->other += (double)B * NH * T * BWD_PER_ROW_HS * hs;
}
