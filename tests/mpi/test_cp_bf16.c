/* The model's bf16 data path with context parallelism (every rank one cp
 * group: cp = 2, 3, 4), on the CPU's reference GEMMs (bf16 operands; a
 * test's counter carries no oneDNN context, so every CPU runs it, as
 * tests/test_model.c's bf16 path tests):
 *   - the engine takes the path: the ring reads and writes the bf16 stores
 *     and the activation gradients are bf16 (acts_direct);
 *   - one micro-batch's loss and gradient (each rank its T/cp positions,
 *     dloss 1/cp, the gradients summed over the group) equal the one-process
 *     bf16 data path's on the whole sequences within the bounds the bf16
 *     path's equality tests use (loss 0.02; cosine > 0.999, relative L2 <
 *     0.05; tests/test_model.c test_bf16_gemms_match_fp32);
 *   - the scratch it saves against the same cp run with fp32 GEMMs (whose
 *     ring reads fp32 copies, K and V fp32) equals train/theory's to the
 *     byte on every rank, and so do the ring's bytes sent and received (K
 *     and V in bf16; theory_trainer_cp_comm, the [cp] row's). */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <mpi.h>

#include "../../train/theory/accounting.h"
#include "context_parallel.h"
#include "grid.h"
#include "../grid_single.h"
#include "mpi_fixture.h"
#include "../engine_fixture.h"
#include "../../model/context_parallel/cp.h"
#include "../../model/gpt_acts.h"

enum { L = 2, C = 16, NH = 2, V = 64, B = 2, T = 24, SEED = 7 }; /* T: a multiple of 2 cp for cp 2, 3, 4 */

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/* An engine on grid g for the bf16 dtypes with gemm's operands, flash
 * attention, the grid's cp; tracker and counter its own. */
struct harness {
    struct config cfg;
    struct mem_tracker mem;
    struct exec_ctx flops;
    struct engine e;
};

static struct harness *harness_of(struct grid *g, enum gemm_dtype_choice gemm) {
    struct harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    config_defaults(&h->cfg);
    struct config *c = &h->cfg;
    c->n_layer = L, c->d_model = C, c->n_head = NH, c->seq_len = T, c->vocab_size = V, c->micro_batch = B;
    c->param_dtype = c->grad_dtype = c->act_dtype = DTYPE_BF16;
    c->gemm_dtype = gemm, c->attention = ATTENTION_FLASH, c->recompute = RECOMPUTE_NONE, c->seed = SEED;
    c->cp = g->cp;
    c->threads = omp_get_max_threads(); /* the attention's per-thread tiles, as theory counts them */
    fixture_engine_init(&h->e, c, g, &h->mem, &h->flops);
    engine_init_params(&h->e);
    return h;
}

static void harness_free(struct harness *h) {
    engine_free(&h->e);
    mem_free_all(&h->mem);
    free(h);
}

/* n tokens in [0, V) from a small LCG (the same on every rank). */
static void tokens(int32_t *out, size_t n) {
    uint64_t s = 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((s >> 33) % V);
    }
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* The engine's bf16 gradient (ZeRO-0: full, its units padded to a
 * multiple of the dp ranks), widened into layout order. */
static float *grads_of(const struct harness *h) {
    const struct model_layout *lay = &h->e.lay;
    float *g = malloc(lay->total * sizeof *g);
    assert_non_null(g);
    const bf16 *gb = h->e.z.st.grads;
    for (int u = 0; u < lay->n_units; u++) {
        const bf16 *src = gb + shard_padded_offset(&h->e.z.sh, u);
        float *dst = g + layout_unit_offset(lay, u);
        for (size_t i = 0; i < layout_unit_size(lay, u); i++) dst[i] = bf16_to_f32(src[i]);
    }
    return g;
}

static void test_cp_bf16_path_equals_one_process(void **state) {
    (void)state;
    struct grid one, g;
    char err[GRID_ERR_LEN];
    grid_init_single(&one);
    assert_int_equal(grid_init(&g, 1, world_size(), 1, err), 0); /* every rank in one cp ring */
    int cp = g.cp;
    int32_t whole[2 * B * T], local[2 * B * T];
    tokens(whole, 2 * B * T);
    memcpy(local, whole, sizeof whole);
    struct cp_split s = {.T = T, .cp = cp, .rank = g.cp_rank};
    cp_keep_positions(s, local, B);
    cp_keep_positions(s, local + B * T, B);

    struct harness *h1 = harness_of(&one, GEMM_DTYPE_BF16), *hc = harness_of(&g, GEMM_DTYPE_BF16);
    bool path = acts_direct(&hc->e.model) && cp_ring_on(&hc->e.model);
    size_t psi = h1->e.lay.total;
    engine_zero_grads(&h1->e);
    engine_zero_grads(&hc->e);
    float l1 = fixture_forward_backward(&h1->e, whole, whole + B * T, 1.0f);
    struct comm_counters c0 = g.cp_comm.counters;
    double lc = fixture_forward_backward(&hc->e, local, local + B * T, 1.0f / (float)cp) / cp;
    double sent = g.cp_comm.counters.bytes[COLL_SEND] - c0.bytes[COLL_SEND];
    double received = g.cp_comm.counters.bytes[COLL_RECV] - c0.bytes[COLL_RECV];
    g.cp_comm.all_reduce_scalars(&g.cp_comm, &lc, 1);
    engine_reduce_grads(&hc->e); /* summed over dp x cp (every rank) */
    float *g1 = grads_of(h1), *gc = grads_of(hc);
    double n1 = sqrt(dot(g1, g1, psi)), nc = sqrt(dot(gc, gc, psi)), diff2 = 0.0;
    for (size_t i = 0; i < psi; i++) diff2 += ((double)gc[i] - g1[i]) * ((double)gc[i] - g1[i]);
    double cosine = dot(g1, gc, psi) / (n1 * nc), rel = sqrt(diff2) / n1;
    if (g.world_rank == 0)
        printf("  cp %d bf16 data path vs one process: loss %.5f vs %.5f, gradient cosine %.6f, relative L2 %.4f\n",
               cp, lc, (double)l1, cosine, rel);
    bool ok = path && fabs(lc - l1) < 0.02 && cosine > 0.999 && rel < 0.05;

    /* the scratch the path saves, against fp32 GEMMs at the same cp */
    struct harness *h32 = harness_of(&g, GEMM_DTYPE_FP32);
    struct rank_place p = rank_place_of(&hc->cfg, g.world_size, g.world_rank);
    double measured = (double)h32->mem.live[MEM_SCRATCH] - (double)hc->mem.live[MEM_SCRATCH];
    double theory = theory_trainer_scratch(&h32->cfg, p).persistent - theory_trainer_scratch(&hc->cfg, p).persistent;
    if (g.world_rank == 0)
        printf("  cp %d scratch, fp32 GEMMs minus the bf16 data path: measured %.0f B, theory %.0f B\n", cp, measured,
               theory);
    ok = ok && measured == theory && measured > 0;
    /* the ring's bytes (one micro-batch: a step of grad_accum 1), K and V
     * in bf16: the [cp] row's theory */
    struct cp_comm_theory ct = theory_trainer_cp_comm(&hc->cfg, p);
    if (g.world_rank == 0)
        printf("  cp %d ring bytes sent per micro-batch: measured %.0f B, theory %.0f B (KV %.0f B, %.0f B each)\n",
               cp, sent, ct.send, ct.kv, ct.kv_elem);
    ok = ok && sent == ct.send && received == ct.recv && ct.kv_elem == sizeof(bf16);
    if (!ok)
        fprintf(stderr, "cp rank %d of %d: path %d, loss %g vs %g, cosine %g, rel %g, scratch %g vs theory %g, "
                "sent %g vs %g\n", g.cp_rank, cp, (int)path, lc, (double)l1, cosine, rel, measured, theory, sent,
                ct.send);
    free(g1), free(gc);
    harness_free(h32);
    harness_free(hc);
    harness_free(h1);
    grid_free(&g);
    assert_true(all_ok(ok));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cp_bf16_path_equals_one_process),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
