/* The CUDA build's cross-entropy kernels against the CPU's (make
 * cuda-test): the fused forward/backward (its row in shared memory, and a
 * row too long for it), the three vocabulary-parallel passes on one rank's
 * slice, and the fused form equal to the three passes. Inputs, poisoned
 * outputs and the CPU reference: layers_fixture.h. Bounds:
 *   bit for bit: the row max, exponentials and target logits, and
 *     crossentropy_finish's dlogits (given the same sums); padding dlogits
 *     exactly 0; the fused form's losses and dlogits equal the three
 *     passes' on the GPU
 *   relative b(V) = max(1e-5, 8 sqrt(V) 2^-24) per element (1.07e-4 at
 *     V = 50257; the CPU sums V floats left to right: sum_bound): the
 *     sums and dlogits (the target's column: b |dloss|, as p - 1
 *     cancels), the losses and total (b max(1, |loss|));
 *     crossentropy_finish's losses 1e-6 (CUDA's logf vs glibc's)
 *   FLOP counters: gemm, attention and other equal the CPU's exactly
 * Without a GPU every test says "skipped: no CUDA device" and the program
 * exits 0. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../model/cuda/layers_cuda.h"
#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"

/* The relative bound of a sum of n positive floats: the CPU adds them left
 * to right, whose rounding grows like sqrt(n) u (u = 2^-24) for random
 * data; the GPU's tree is closer. 8 sqrt(n) u: 1e-5 up to n of about 250,
 * 1.07e-4 at GPT-2's 50257 (4 sqrt(n) u, 5.35e-5, was met exactly by one
 * run's fresh inputs on the H100: a dlogit 5.35e-5 off, relative). */
static double sum_bound(int64_t n) { return fmax(1e-5, 8.0 * sqrt((double)n) * ldexp(1.0, -24)); }

/* dlogits per element: rel relative, the target's column rel |dloss|. */
static void expect_dlogits(const char *what, const float *want, const float *got, const int32_t *targets,
                           int64_t N, int64_t Vl, int64_t v0, float dloss, double rel) {
    for (int64_t i = 0; i < N; i++)
        for (int64_t v = 0; v < Vl; v++) {
            double c = want[i * Vl + v], g = got[i * Vl + v];
            double bound = v + v0 == targets[i] ? rel * fabs(dloss) : rel * fabs(c);
            if (!(fabs(g - c) <= bound))
                fail_msg("%s: row %lld column %lld: cpu %.9g, gpu %.9g, |diff| %.3g > %.3g", what, (long long)i,
                         (long long)v, c, g, fabs(g - c), bound);
        }
}

static void expect_rel(const char *what, const float *want, const float *got, int64_t n, double rel) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= rel * fabs(want[i])))
            fail_msg("%s: element %lld: cpu %.9g, gpu %.9g (relative bound %.0e)", what, (long long)i,
                     (double)want[i], (double)got[i], rel);
}

/* The GPU's three vocabulary-parallel passes over one whole slice (v0 0,
 * valid V, Vl Vp), from the same logits, give the fused form's losses and
 * dlogits (d_logits, d_losses: its results, left in place) bit for bit:
 * what lets a tp = 1 run take the fused form (model/tensor_parallel/vocab_parallel.c). */
static void expect_three_passes(const float *logits, const int32_t *d_targets, int64_t N, int64_t V, int64_t Vp,
                                float dloss, const float *d_logits, const float *d_losses) {
    float *d_l3 = dev_from(logits, F(N * Vp)), *d_maxv = dev_poisoned(F(N)), *d_scratch = dev_poisoned(F(2 * N));
    struct exec_ctx fc = {0};
    crossentropy_row_max_cuda(d_l3, d_maxv, N, Vp, V, NULL);
    crossentropy_exp_sum_cuda(d_l3, d_maxv, d_scratch, d_scratch + N, d_targets, N, Vp, 0, V, dloss != 0.0f, NULL);
    crossentropy_finish_cuda(d_l3, d_maxv, d_maxv, d_scratch, d_scratch + N, d_targets, N, Vp, 0, V, dloss, &fc);
    float *fused = malloc(F(N * Vp)), *three = back(d_l3, F(N * Vp), "crossentropy (three passes) dlogits");
    assert_int_equal(cudaMemcpy(fused, d_logits, F(N * Vp), cudaMemcpyDeviceToHost), cudaSuccess);
    expect_bits("crossentropy: three passes vs fused, dlogits", fused, three, N * Vp);
    free(three);
    three = back(d_maxv, F(N), "crossentropy (three passes) losses"); /* finish wrote the losses over the maxima */
    assert_int_equal(cudaMemcpy(fused, d_losses, F(N), cudaMemcpyDeviceToHost), cudaSuccess);
    expect_bits("crossentropy: three passes vs fused, losses", fused, three, N);
    free(three), free(fused);
    cudaFree(d_scratch);
}

static void test_crossentropy(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    /* N V Vp; the last row too long for one block's shared memory (ce_fused, not ce_fused_smem) */
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 257, 264}, {5, 1000, 1024}, {4, 50257, 50304}, {2, 70000, 70016}};
    const float dlosses[] = {0.0f, 1.0f / 32.0f};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 2; d++) {
            int64_t N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
            float dloss = dlosses[d];
            float *logits = rand_f32(N * Vp, 80 + s, 8.0f), *losses = malloc(F(N));
            int32_t *targets = rand_tokens(N, 90 + s, (int32_t)V);
            float *d_logits = dev_from(logits, F(N * Vp)), *d_losses = dev_poisoned(F(N));
            int32_t *d_targets = dev_from(targets, I(N));
            struct exec_ctx fc = {0}, gc = {0};
            double gtotal = crossentropy_forward_backward_cuda(d_logits, d_losses, d_targets, N, V, Vp, dloss, &gc);
            expect_three_passes(logits, d_targets, N, V, Vp, dloss, d_logits, d_losses);
            double ctotal = crossentropy_forward_backward_cpu(logits, losses, targets, N, V, Vp, dloss, &fc);
            float *got = back(d_losses, F(N), "crossentropy losses");
            double rel = sum_bound(V);
            for (int64_t i = 0; i < N; i++) /* log(sum) carries the sum's relative error as an absolute one */
                if (!(fabs((double)got[i] - losses[i]) <= rel * fmax(1.0, fabs(losses[i]))))
                    fail_msg("crossentropy loss %lld: cpu %.9g, gpu %.9g (bound %.3g)", (long long)i,
                             (double)losses[i], (double)got[i], rel);
            free(got);
            if (!(fabs(gtotal - ctotal) <= rel * fmax(1.0, fabs(ctotal))))
                fail_msg("crossentropy total: cpu %.17g, gpu %.17g", ctotal, gtotal);
            got = back(d_logits, F(N * Vp), "crossentropy dlogits");
            if (dloss != 0.0f) {
                expect_dlogits("crossentropy_forward_backward dlogits", logits, got, targets, N, Vp, 0, dloss, rel);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t v = V; v < Vp; v++) assert_true(f32_bits(got[i * Vp + v]) == 0);
            } else {
                expect_bits("crossentropy_forward_backward (dloss 0: logits unchanged)", logits, got, N * Vp);
            }
            free(got);
            expect_flops("crossentropy_forward_backward", &fc, &gc);
            cudaFree(d_targets);
            free(logits), free(losses), free(targets);
        }
}

/* The three vocabulary-parallel passes on one rank's slice [v0, v0 + Vl) of
 * which `valid` columns are real; each pass from the CPU's inputs. */
static void test_crossentropy_vocab_parallel(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][4] = {{1, 1, 0, 1}, {3, 264, 300, 257}, {6, 25152, 25152, 25105}}; /* N Vl v0 valid */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], Vl = shapes[s][1], v0 = shapes[s][2], valid = shapes[s][3];
        float dloss = 1.0f / 8.0f;
        float *logits = rand_f32(N * Vl, 100 + s, 8.0f);
        /* targets on this slice and off it */
        int32_t *targets = rand_tokens(N, 110 + s, (int32_t)(2 * valid));
        for (int64_t i = 0; i < N; i++) targets[i] += (int32_t)(i % 2 ? v0 : v0 + valid);
        float *maxv = malloc(F(N)), *sum = malloc(F(N)), *target = malloc(F(N)), *losses = malloc(F(N));
        float *d_logits = dev_from(logits, F(N * Vl)), *d_maxv = dev_poisoned(F(N));
        int32_t *d_targets = dev_from(targets, I(N));
        crossentropy_row_max_cuda(d_logits, d_maxv, N, Vl, valid, NULL);
        crossentropy_row_max_cpu(logits, maxv, N, Vl, valid, NULL);
        float *got = back(d_maxv, F(N), "crossentropy_row_max");
        expect_bits("crossentropy_row_max", maxv, got, N);
        free(got);
        d_maxv = dev_from(maxv, F(N));
        float *d_sum = dev_poisoned(F(N)), *d_target = dev_poisoned(F(N));
        crossentropy_exp_sum_cuda(d_logits, d_maxv, d_sum, d_target, d_targets, N, Vl, v0, valid, true, NULL);
        crossentropy_exp_sum_cpu(logits, maxv, sum, target, targets, N, Vl, v0, valid, true, NULL);
        got = back(d_target, F(N), "crossentropy_exp_sum target");
        expect_bits("crossentropy_exp_sum target", target, got, N);
        free(got);
        got = back(d_sum, F(N), "crossentropy_exp_sum sum");
        expect_rel("crossentropy_exp_sum sum", sum, got, N, sum_bound(valid));
        free(got);
        got = back(d_logits, F(N * Vl), "crossentropy_exp_sum exponentials");
        expect_bits("crossentropy_exp_sum exponentials (in place)", logits, got, N * Vl);
        free(got);
        /* finish from the CPU's exponentials, sums, max and target logits */
        d_logits = dev_from(logits, F(N * Vl));
        d_sum = dev_from(sum, F(N));
        d_target = dev_from(target, F(N));
        float *d_losses = dev_poisoned(F(N));
        struct exec_ctx fc = {0}, gc = {0};
        double g = crossentropy_finish_cuda(d_logits, d_losses, d_maxv, d_sum, d_target, d_targets, N, Vl, v0, valid,
                                            dloss, &gc);
        double c = crossentropy_finish_cpu(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss, &fc);
        got = back(d_logits, F(N * Vl), "crossentropy_finish dlogits");
        expect_bits("crossentropy_finish dlogits", logits, got, N * Vl);
        free(got);
        got = back(d_losses, F(N), "crossentropy_finish losses");
        for (int64_t i = 0; i < N; i++)
            if (!(fabs((double)got[i] - losses[i]) <= 1e-6 * fmax(1.0, fabs(losses[i]))))
                fail_msg("crossentropy_finish loss %lld: cpu %.9g, gpu %.9g", (long long)i, (double)losses[i],
                         (double)got[i]);
        free(got);
        if (!(fabs(g - c) <= 1e-6 * fmax(1.0, fabs(c)))) fail_msg("crossentropy_finish total: cpu %.17g, gpu %.17g", c, g);
        expect_flops("crossentropy_finish", &fc, &gc);
        cudaFree(d_maxv), cudaFree(d_sum), cudaFree(d_target), cudaFree(d_targets);
        free(logits), free(targets), free(maxv), free(sum), free(target), free(losses);
    }
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_crossentropy_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_crossentropy_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_crossentropy_vocab_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
