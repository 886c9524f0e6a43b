/* Ring attention (model/context_parallel/ring.c) over a context-parallel
 * group of every rank (cp = world: 2, 3 and 4 ranks), against the plain
 * attention of one process on the whole sequence (attention_forward's
 * probabilities, model/cpu/attention.c): each rank holds its positions of
 * the load-balanced split (chunks r and 2 cp - 1 - r of 2 cp); its output,
 * log-sum-exp and dQ, dK, dV equal the plain ones at those positions
 * (within 2e-6; the ring sums in another order), its attention FLOPs are
 * 1/cp of the one-process causal count (exactly: the split balances the
 * work), and the bytes it sends are the ring formula (model/context_parallel/cp.h):
 * forward (cp - 1) KV, backward (2 cp - 1) KV, KV = B T/cp 2 C x 4.
 * On the bf16 data path (the _bf16 forms: bf16 qkv, out and dqkv) the
 * ring equals the fp32 ring on the widened qkv bit for bit: the output and
 * dqkv are the fp32 ring's rounded once, the lse the same fp32 bits, the
 * FLOPs the same; K and V travel in bf16 (forward (cp - 1) KV/2, backward
 * (cp - 1) KV/2 + cp KV). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <mpi.h>

#include "context_parallel.h"
#include "grid.h"
#include "layers.h"
#include "mpi_fixture.h"
#include "rng.h"
#include "../../model/context_parallel/cp.h"
#include "../../model/cpu/act_io.h"

enum { B = 2, NH = 2, C = 8, T_PER_CHUNK = 3 }; /* hs = 4; T = 2 cp x 3 */

static struct grid G;

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

static int setup(void **state) {
    (void)state;
    char err[GRID_ERR_LEN];
    return grid_init(&G, 1, world_size(), 1, err); /* every rank in one cp ring */
}

static int teardown(void **state) {
    (void)state;
    grid_free(&G);
    return 0;
}

/* Values in [-1, 1), the same on every rank (drawn by index). */
static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(seed, 0, i) - 1.0f;
}

/* This rank's rows (B, T/cp, width) of a (B, T, width) tensor. */
static void local_rows(float *dst, const float *src, struct cp_split s, int width) {
    int Tl = cp_local_len(s);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++)
            for (int d = 0; d < width; d++)
                dst[((size_t)b * Tl + t) * width + d] =
                    src[((size_t)b * s.T + cp_global_position(s, t)) * width + d];
}

static float worst_diff(const float *a, const float *b, size_t n) {
    float w = 0;
    for (size_t i = 0; i < n; i++) w = fmaxf(w, fabsf(a[i] - b[i]));
    return w;
}

static void test_ring_equals_plain_attention(void **state) {
    (void)state;
    struct collectives *cp = &G.cp_comm;
    struct cp_split s = {.T = 2 * cp->size * T_PER_CHUNK, .cp = cp->size, .rank = cp->rank};
    const int T = s.T, Tl = cp_local_len(s);
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, l3 = (size_t)B * Tl * 3 * C, l1 = (size_t)B * Tl * C;
    float *qkv = malloc(n3 * 4), *dout = malloc(n1 * 4), *out = malloc(n1 * 4), *dqkv = malloc(n3 * 4);
    float *att = malloc((size_t)B * NH * T * T * 4), *lse = malloc((size_t)B * NH * T * 4);
    float *scratch = malloc(attention_backward_scratch(B, T, NH) * 4), *flash_out = malloc(n1 * 4);
    fill(qkv, n3, 1);
    fill(dout, n1, 2);
    /* one process: the plain attention, and the flash one for the lse */
    struct exec_ctx one = {0};
    attention_forward(out, att, qkv, B, T, C, NH, &one);
    attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, &one);
    struct exec_ctx flash = {0};
    attention_lse_forward(flash_out, lse, qkv, B, T, C, NH, &flash);
    double flash_fwd = flash.attention;
    float *flash_dqkv = malloc(n3 * 4), *flash_D = malloc(attention_lse_backward_scratch(B, T, NH) * 4);
    attention_lse_backward(flash_dqkv, flash_D, dout, qkv, flash_out, lse, B, T, C, NH, &flash);
    free(flash_dqkv), free(flash_D);

    /* this rank: its positions through the ring */
    static struct mem_tracker mem;
    struct exec_ctx fc = {0};
    struct gpt m = {.B = B, .shape = {.T = Tl, .C = C, .NH = NH}, .Cl = C, .NHl = NH, .space = MEM_HOST, .flops = &fc};
    gpt_set_context_parallel(&m, cp, &mem);
    float *q_l = malloc(l3 * 4), *dout_l = malloc(l1 * 4), *out_l = malloc(l1 * 4), *lse_l = malloc((size_t)B * NH * Tl * 4);
    float *dqkv_l = malloc(l3 * 4), *D = malloc((size_t)B * NH * Tl * 4), *want = malloc(l3 * 4);
    local_rows(q_l, qkv, s, 3 * C);
    local_rows(dout_l, dout, s, C);
    struct comm_counters c0 = cp->counters;
    cp_ring_attention_forward(&m, out_l, lse_l, q_l);
    struct comm_counters c1 = cp->counters;
    double fwd_flops = fc.attention;
    cp_ring_attention_backward(&m, dqkv_l, D, dout_l, q_l, out_l, lse_l);
    struct comm_counters c2 = cp->counters;

    local_rows(want, out, s, C);
    float out_diff = worst_diff(out_l, want, l1);
    float lse_diff = 0;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < Tl; t++)
            lse_diff = fmaxf(lse_diff, fabsf(lse_l[bh * Tl + t] - lse[(size_t)bh * T + cp_global_position(s, t)]));
    local_rows(want, dqkv, s, 3 * C);
    float grad_diff = worst_diff(dqkv_l, want, l3);
    double kv = (double)B * Tl * 2 * C * 4;
    bool ok = out_diff <= 2e-6f && lse_diff <= 2e-6f && grad_diff <= 2e-6f;
    /* the balanced split: every rank 1/cp of the causal products */
    ok = ok && fwd_flops * cp->size == flash_fwd && fc.attention * cp->size == flash.attention;
    ok = ok && c1.bytes[COLL_SEND] - c0.bytes[COLL_SEND] == (cp->size - 1) * kv;
    ok = ok && c2.bytes[COLL_SEND] - c1.bytes[COLL_SEND] == (2 * cp->size - 1) * kv;
    ok = ok && c2.bytes[COLL_RECV] - c0.bytes[COLL_RECV] == c2.bytes[COLL_SEND] - c0.bytes[COLL_SEND];
    if (!ok)
        fprintf(stderr, "cp rank %d of %d: |out| %g, |lse| %g, |dqkv| %g; FLOPs %g x cp vs %g; bytes %g, %g (KV %g)\n",
                cp->rank, cp->size, out_diff, lse_diff, grad_diff, fwd_flops, flash_fwd,
                c1.bytes[COLL_SEND] - c0.bytes[COLL_SEND], c2.bytes[COLL_SEND] - c1.bytes[COLL_SEND], kv);
    mem_free_all(&mem);
    free(qkv), free(dout), free(out), free(dqkv), free(att), free(lse), free(scratch), free(flash_out);
    free(q_l), free(dout_l), free(out_l), free(lse_l), free(dqkv_l), free(D), free(want);
    assert_true(all_ok(ok));
}

/* Elements whose bf16 values differ from the fp32 ones rounded (count). */
static size_t rounded_mismatches(const bf16 *got, const float *f32, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != f32_to_bf16(f32[i]);
    return bad;
}

static void test_ring_bf16_equals_fp32_ring_rounded(void **state) {
    (void)state;
    struct collectives *cp = &G.cp_comm;
    struct cp_split s = {.T = 2 * cp->size * T_PER_CHUNK, .cp = cp->size, .rank = cp->rank};
    const int T = s.T, Tl = cp_local_len(s);
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, l3 = (size_t)B * Tl * 3 * C, l1 = (size_t)B * Tl * C;
    size_t nl = (size_t)B * NH * Tl;
    float *qkv = malloc(n3 * 4), *dout = malloc(n1 * 4), *q_l = malloc(l3 * 4), *dout_l = malloc(l1 * 4);
    fill(qkv, n3, 3);
    fill(dout, n1, 4);
    local_rows(q_l, qkv, s, 3 * C);
    local_rows(dout_l, dout, s, C);
    bf16 *q16 = malloc(l3 * sizeof *q16), *out16 = malloc(l1 * sizeof *out16), *dqkv16 = malloc(l3 * sizeof *dqkv16);
    for (size_t i = 0; i < l3; i++) q16[i] = f32_to_bf16(q_l[i]), q_l[i] = bf16_to_f32(q16[i]); /* the store */

    /* the fp32 ring on the widened store */
    static struct mem_tracker mem;
    struct exec_ctx fc32 = {0}, fc16 = {0};
    struct gpt m32 = {.B = B, .shape = {.T = Tl, .C = C, .NH = NH}, .Cl = C, .NHl = NH, .space = MEM_HOST,
                      .flops = &fc32, .act_dtype = DTYPE_FP32, .gemm_dtype = DTYPE_FP32};
    gpt_set_context_parallel(&m32, cp, &mem);
    float *out = malloc(l1 * 4), *lse = malloc(nl * 4), *dqkv = malloc(l3 * 4), *D = malloc(nl * 4);
    cp_ring_attention_forward(&m32, out, lse, q_l);
    for (size_t i = 0; i < l1; i++) out[i] = bf16_to_f32(f32_to_bf16(out[i])); /* D from the stored output */
    cp_ring_attention_backward(&m32, dqkv, D, dout_l, q_l, out, lse);

    /* the bf16 data path's ring (acts_direct: bf16 activations and GEMMs, host) */
    struct gpt m16 = m32;
    m16.flops = &fc16, m16.act_dtype = DTYPE_BF16, m16.gemm_dtype = DTYPE_BF16;
    gpt_set_context_parallel(&m16, cp, &mem);
    float *lse16 = malloc(nl * 4), *scratch = malloc(attention_lse_bf16_scratch(B, Tl, C, NH) * 4);
    struct comm_counters c0 = cp->counters;
    cp_ring_attention_forward_bf16(&m16, out16, lse16, q16, scratch);
    struct comm_counters c1 = cp->counters;
    cp_ring_attention_backward_bf16(&m16, dqkv16, scratch, dout_l, q16, out16, lse16);
    struct comm_counters c2 = cp->counters;

    size_t bad_out = rounded_mismatches(out16, out, l1), bad_grad = rounded_mismatches(dqkv16, dqkv, l3);
    bool ok = bad_out == 0 && bad_grad == 0 && memcmp(lse16, lse, nl * 4) == 0;
    ok = ok && fc16.attention == fc32.attention && fc16.other == fc32.other;
    double kv16 = (double)B * Tl * 2 * C * 2, kv32 = 2 * kv16;
    ok = ok && c1.bytes[COLL_SEND] - c0.bytes[COLL_SEND] == (cp->size - 1) * kv16;
    ok = ok && c2.bytes[COLL_SEND] - c1.bytes[COLL_SEND] == (cp->size - 1) * kv16 + cp->size * kv32;
    ok = ok && c2.bytes[COLL_RECV] - c0.bytes[COLL_RECV] == c2.bytes[COLL_SEND] - c0.bytes[COLL_SEND];
    if (!ok)
        fprintf(stderr, "cp rank %d of %d, bf16 ring: %zu outputs and %zu gradients differ from the fp32 ring's "
                "rounded, lse %s; FLOPs %g vs %g; bytes %g, %g (KV bf16 %g)\n", cp->rank, cp->size, bad_out, bad_grad,
                memcmp(lse16, lse, nl * 4) ? "differs" : "equal", fc16.attention, fc32.attention,
                c1.bytes[COLL_SEND] - c0.bytes[COLL_SEND], c2.bytes[COLL_SEND] - c1.bytes[COLL_SEND], kv16);
    mem_free_all(&mem);
    free(qkv), free(dout), free(q_l), free(dout_l), free(q16), free(out16), free(dqkv16);
    free(out), free(lse), free(dqkv), free(D), free(lse16), free(scratch);
    assert_true(all_ok(ok));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ring_equals_plain_attention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_bf16_equals_fp32_ring_rounded, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
