/* Shared helpers for the layer tests: deterministic random fills and a
 * central finite-difference gradient checker.
 *
 * Technique: every layer test defines a scalar loss L(x) (usually
 * sum(out * g) for a fixed random g, so dout = g), computes the analytic
 * gradient with the layer's backward, then compares each element against
 *     num_i = (L(x + h e_i) - L(x - h e_i)) / (2h).
 * L is accumulated in double, so the only noise in L(x+h) - L(x-h) is the
 * fp32 rounding of the few outputs that depend on x_i (outputs that do not
 * depend on x_i are bit-identical in both runs and cancel exactly).
 *
 * Tolerance |num - ana| <= GC_ATOL + GC_RTOL * |ana|, justified:
 *  - roundoff: an affected output (|out| ~ 1) carries ~6e-8 relative fp32
 *    error; a handful of them times |g| <= 1, divided by 2h = 1e-2, gives
 *    ~1e-5 absolute noise in num;
 *  - truncation: central differences err by h^2/6 * L''' ~ 4e-6 * L''' for
 *    h = 5e-3; with O(1) inputs L''' is O(1..10) for GELU, LayerNorm and
 *    softmax, so <~ 1e-4 absolute.
 * Both sit an order of magnitude below 1e-3 absolute, while the typical
 * gradient element is O(0.1..1), so a wrong formula (a missing term, a
 * wrong scale, a sign flip) overshoots the bound by far. Each check also
 * requires the analytic gradient to be non-trivial (max |ana| > 1e-2),
 * so an all-zero backward cannot pass. gc_selftest proves the checker
 * rejects a slightly wrong gradient. */
#ifndef SHARDLAB_TESTS_GRADCHECK_H
#define SHARDLAB_TESTS_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "rng.h"

#define GC_H 5e-3f
#define GC_ATOL 1e-3
#define GC_RTOL 1e-2
#define GC_MIN_GRAD 1e-2

/* Uniform in [lo, hi), a pure function of (stream, index). */
static inline void fill_uniform(float *x, size_t n, float lo, float hi, uint64_t stream) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(1234, stream, i);
}

static inline void fill_const(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static inline float *alloc_f(size_t n) {
    float *p = calloc(n, sizeof *p);
    if (!p) abort();
    return p;
}

/* sum(out * g) in double */
static inline double dot_loss(const float *out, const float *g, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * (double)g[i];
    return s;
}

/* |a - b| <= tol in double, NaN fails; needs <cmocka.h> at the use site.
 * (cmocka 1.1.5's assert_float_equal works in float and also passes
 * anything within FLT_EPSILON relative, so it is not used.) */
#define assert_near(a, b, tol)                                                                          \
    do {                                                                                                \
        double a_ = (a), b_ = (b), t_ = (tol);                                                          \
        if (!(fabs(a_ - b_) <= t_))                                                                     \
            fail_msg("%s = %.9g vs %s = %.9g: |diff| %.3g > %.3g", #a, a_, #b, b_, fabs(a_ - b_), t_); \
    } while (0)

typedef double (*gc_loss_fn)(void *ctx);

/* Central difference of loss(ctx) w.r.t. x[i]; x is restored exactly. */
static inline double gc_numeric(gc_loss_fn loss, void *ctx, float *x, size_t i, float h) {
    float saved = x[i];
    x[i] = saved + h;
    double lp = loss(ctx);
    x[i] = saved - h;
    double lm = loss(ctx);
    x[i] = saved;
    /* divide by the step actually taken after fp32 rounding of x +- h */
    double step = (double)(saved + h) - (double)(saved - h);
    return (lp - lm) / step;
}

/* Compares ana[0..n) with finite differences of loss w.r.t. x[0..n).
 * Returns the number of elements outside the tolerance (0 when all pass)
 * and prints the worst error, so the caller asserts on it. A gradient with
 * max |ana| <= GC_MIN_GRAD also counts as a failure: a check against an
 * (almost) all-zero gradient proves nothing. */
static inline int gc_compare(const char *name, gc_loss_fn loss, void *ctx, float *x, const float *ana, size_t n,
                             float h, int verbose) {
    int bad = 0;
    double worst = 0.0, maxana = 0.0;
    for (size_t i = 0; i < n; i++) {
        double num = gc_numeric(loss, ctx, x, i, h);
        double err = fabs(num - (double)ana[i]);
        double tol = GC_ATOL + GC_RTOL * fabs((double)ana[i]);
        if (err > worst) worst = err;
        if (fabs((double)ana[i]) > maxana) maxana = fabs((double)ana[i]);
        if (!(err <= tol)) {
            if (verbose && bad < 5)
                fprintf(stderr, "  %s[%zu]: analytic %.6g numeric %.6g\n", name, i, (double)ana[i], num);
            bad++;
        }
    }
    if (!(maxana > GC_MIN_GRAD)) {
        if (verbose) fprintf(stderr, "  %s: analytic gradient is (almost) zero, max %.3g\n", name, maxana);
        bad++;
    }
    if (verbose) fprintf(stderr, "  %-14s n=%-4zu max|ana|=%.3f max|num-ana|=%.2e\n", name, n, maxana, worst);
    return bad;
}

#endif
