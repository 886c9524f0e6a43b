/* --gpu_path v2's one-pass gradient-norm sums (model/cuda/v2/
 * sumsq_segments.cu) against their host reference (sumsq_table.h): fp32
 * segments bit for bit (each chunk's partial as sumsq_chunk_reference
 * computes it, the totals in chunk order in double), bf16 segments within
 * fp32's bound of a double sum of the widened values; sizes off the chunk
 * (0, 1, 16385, 40000, 7 elements), the totals' device buffers poisoned
 * first; and the same through bufops.h's buf_sumsq_* names (the norm's
 * v2 call). Without a GPU: skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_fixture.h"
#include "bufops.h"
#include "dtype.h"
#include "../../model/cuda/v2/sumsq_segments.h"

enum { NSEG = 5 };
static const int64_t SIZES[NSEG] = {0, 1, 16385, 40000, 7};

static void test_sumsq_segments(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    float *x[NSEG];
    uint16_t *b[NSEG];
    const void *dev[2 * NSEG];
    unsigned char is_bf16[2 * NSEG];
    int64_t n[2 * NSEG];
    uint64_t r = 12345;
    for (int s = 0; s < NSEG; s++) { /* segment s fp32, segment NSEG + s its bf16 rounding */
        size_t m = (size_t)(SIZES[s] > 0 ? SIZES[s] : 1);
        x[s] = malloc(m * sizeof(float));
        b[s] = malloc(m * sizeof(uint16_t));
        for (int64_t i = 0; i < SIZES[s]; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            x[s][i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * (float)(s + 1);
            b[s][i] = f32_to_bf16(x[s][i]);
        }
        void *dx = dev_poisoned(m * sizeof(float)), *db = dev_poisoned(m * sizeof(uint16_t));
        assert_int_equal(cudaMemcpy(dx, x[s], (size_t)SIZES[s] * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        assert_int_equal(cudaMemcpy(db, b[s], (size_t)SIZES[s] * sizeof(uint16_t), cudaMemcpyHostToDevice), cudaSuccess);
        dev[s] = dx, dev[NSEG + s] = db;
        is_bf16[s] = 0, is_bf16[NSEG + s] = 1;
        n[s] = n[NSEG + s] = SIZES[s];
    }
    struct sumsq_plan p;
    assert_int_equal(sumsq_plan_open(&p, dev, is_bf16, n, 2 * NSEG), 0);
    assert_int_equal(cudaMemset(p.totals, 0xff, 2 * NSEG * sizeof(double)), cudaSuccess);
    const double *got = sumsq_plan_run(&p, 0);
    struct sumsq_chunk t[16];
    int64_t first[NSEG + 1];
    int64_t nc = sumsq_chunk_table(SIZES, NSEG, SUMSQ_CHUNK, t, 16, first);
    float partials[16];
    for (int64_t c = 0; c < nc; c++) partials[c] = sumsq_chunk_reference(x[t[c].segment], t[c]);
    double bound = (double)(SUMSQ_CHUNK / SUMSQ_THREADS + 8 + 1) * ldexp(1.0, -24);
    for (int s = 0; s < NSEG; s++) {
        double want = sumsq_segment_total(partials, first, s), wide = 0.0;
        assert_memory_equal(&got[s], &want, sizeof want); /* fp32: bit for bit */
        for (int64_t i = 0; i < SIZES[s]; i++) wide += (double)bf16_to_f32(b[s][i]) * bf16_to_f32(b[s][i]);
        assert_true(fabs(got[NSEG + s] - wide) <= bound * wide);
        cudaFree((void *)dev[s]);
        cudaFree((void *)dev[NSEG + s]);
        free(x[s]);
        free(b[s]);
    }
    sumsq_plan_close(&p);
}

/* The same through include/bufops.h's names on device memory (what the
 * norm calls under --gpu_path v2: parallel/zero/zero.c): one dtype a list,
 * each segment's sum the plan's, and again on a second run (the table is
 * the run's). */
static void test_sumsq_dispatch(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    float *x[NSEG];
    const void *dev[NSEG];
    size_t n[NSEG];
    int64_t n64[NSEG];
    unsigned char is_bf16[NSEG] = {0};
    uint64_t r = 777;
    for (int s = 0; s < NSEG; s++) {
        size_t m = (size_t)(SIZES[s] > 0 ? SIZES[s] : 1);
        x[s] = malloc(m * sizeof(float));
        for (int64_t i = 0; i < SIZES[s]; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            x[s][i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
        }
        dev[s] = dev_from(x[s], m * sizeof(float));
        n[s] = (size_t)SIZES[s], n64[s] = SIZES[s];
    }
    struct sumsq_plan p;
    assert_int_equal(sumsq_plan_open(&p, dev, is_bf16, n64, NSEG), 0);
    double want[NSEG];
    memcpy(want, sumsq_plan_run(&p, 0), sizeof want);
    sumsq_plan_close(&p);
    struct sumsq_list *l = buf_sumsq_open(MEM_DEVICE, dev, DTYPE_FP32, n, NSEG);
    assert_non_null(l);
    assert_int_equal(buf_sumsq_count(l), NSEG);
    for (int run = 0; run < 2; run++) assert_memory_equal(buf_sumsq_run(l), want, sizeof want);
    buf_sumsq_close(l);
    for (int s = 0; s < NSEG; s++) cudaFree((void *)dev[s]), free(x[s]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sumsq_segments), cmocka_unit_test(test_sumsq_dispatch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
