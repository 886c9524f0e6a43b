/* The CPU's bf16 layer GEMMs through oneDNN's matmul primitive
 * (include/onednn_gemms.h). Every GEMM here is row-major
 * C (m,n) [+]= op(A) (m,k) . op(B) (k,n) on bf16 operands packed densely
 * in the context's scratch (or the model's bf16 copy), with fp32
 * accumulation and an fp32 C: a transposed operand is the same buffer
 * read through swapped strides in its memory descriptor, and C += is
 * oneDNN's sum post-op. The primitive of each (m, n, k, transposes,
 * accumulate) is made once, at its first use, with its three memory
 * objects; a call only points them at its buffers and runs it.
 *
 * Rounding points (each nearest even, dtype.h's f32_to_bf16): the
 * weight, the fp32 input and dout, once per call each; the products of
 * two bf16 values are exact in fp32, so the results are the reference
 * forms' (model/cpu/matmul.c: sgemm on the rounded copies) up to the
 * order of the fp32 sums. dbias sums the rounded dout column by column in
 * row order, the reference's order: the same bits. A bf16 output (the
 * bf16 data path's qkv and FC feature gradient) is the fp32 accumulation,
 * plus the bias in fp32, rounded once as oneDNN stores it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "bufops.h"
#include "clock.h"
#include "conversions.h"
#include "layers.h"
#include "onednn_gemms.h"

/* One GEMM shape's primitive and the memory objects it runs on; a bf16
 * C (bf16_c) takes the bias into the primitive (bias: a (1, n) fp32 row
 * added before C's one rounding). */
struct gemm_prim {
    int64_t m, n, k;
    bool ta, tb, accumulate, bf16_c, bias;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, d;
};

/* A GEMM's kind beyond its sizes: C += rather than =, C's dtype, a bias. */
struct gemm_kind_of {
    bool accumulate, bf16_c, bias;
};

/* bf16 scratch the fp32 operands are rounded into, grown as needed. */
struct scratch {
    bf16 *p;
    size_t n;
};

enum { KERNEL_NAME_LEN = 128, PROBE_DIM = 64 };

struct onednn_gemms {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    struct gemm_prim *prims;
    int n_prims, cap_prims;
    struct scratch x, w, d; /* the input, the weight, dout */
    char kernel[KERNEL_NAME_LEN];
};

/* oneDNN fails only on a broken install or exhausted memory: say which
 * call and stop, as a failed sgemm would leave no result either. */
static void check(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "error: oneDNN: %s failed (status %d)\n", what, (int)s);
    exit(EXIT_FAILURE);
}

static bool has_flag(const char *flags, const char *name) {
    size_t len = strlen(name);
    for (const char *p = flags; p && (p = strstr(p, name)); p += len)
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') && (p[len] == '\0' || p[len] == ' ' || p[len] == '\n'))
            return true;
    return false;
}

const char *onednn_bf16_missing(const char *cpu_flags) {
    if (!has_flag(cpu_flags, "avx512_bf16") && !has_flag(cpu_flags, "amx_bf16"))
        return "the CPU has no bf16 matrix instructions (neither avx512_bf16 nor amx_bf16 among its /proc/cpuinfo "
               "flags)";
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) != (unsigned)dnnl_cpu_isa_avx512_core_bf16)
        return "oneDNN's ISA is capped below avx512_core_bf16 (the environment's DNNL_MAX_CPU_ISA), so it has no "
               "bf16 kernel to run";
    return NULL;
}

void onednn_version_string(char *out, size_t n) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(out, n, "%d.%d.%d", v->major, v->minor, v->patch);
}

const char *onednn_gemms_kernel(const struct onednn_gemms *g) { return g->kernel; }
int onednn_gemms_cached(const struct onednn_gemms *g) { return g->n_prims; }

/* A row-major rows x cols matrix stored densely, read transposed when t
 * (then the buffer holds its cols x rows transpose). */
static dnnl_memory_desc_t matrix(int64_t rows, int64_t cols, bool t, dnnl_data_type_t dt) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : cols, t ? rows : 1};
    check(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides), "dnnl_memory_desc_init_by_strides");
    return md;
}

static dnnl_memory_t memory_of(const struct onednn_gemms *g, const dnnl_memory_desc_t *md) {
    dnnl_memory_t mem;
    check(dnnl_memory_create(&mem, md, g->engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
    return mem;
}

static struct gemm_prim *make_prim(struct onednn_gemms *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                   struct gemm_kind_of kind) {
    if (g->n_prims == g->cap_prims) {
        int cap = g->cap_prims ? 2 * g->cap_prims : 16;
        struct gemm_prim *p = realloc(g->prims, (size_t)cap * sizeof *p);
        if (!p) check(dnnl_out_of_memory, "growing the primitive cache");
        g->prims = p;
        g->cap_prims = cap;
    }
    dnnl_memory_desc_t a = matrix(m, k, ta, dnnl_bf16), b = matrix(k, n, tb, dnnl_bf16),
                       c = matrix(m, n, false, kind.bf16_c ? dnnl_bf16 : dnnl_f32), d = matrix(1, n, false, dnnl_f32);
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &a, &b, kind.bias ? &d : NULL, &c), "dnnl_matmul_desc_init");
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
    if (kind.accumulate) {
        dnnl_post_ops_t po;
        check(dnnl_post_ops_create(&po), "dnnl_post_ops_create");
        check(dnnl_post_ops_append_sum(po, 1.0f), "dnnl_post_ops_append_sum");
        check(dnnl_primitive_attr_set_post_ops(attr, po), "dnnl_primitive_attr_set_post_ops");
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, g->engine, NULL), "dnnl_primitive_desc_create (bf16 matmul)");
    dnnl_primitive_attr_destroy(attr);
    const char *impl = NULL;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "dnnl_primitive_desc_query");
    snprintf(g->kernel, sizeof g->kernel, "%s", impl ? impl : "?");
    struct gemm_prim *p = &g->prims[g->n_prims++];
    *p = (struct gemm_prim){.m = m, .n = n, .k = k, .ta = ta, .tb = tb, .accumulate = kind.accumulate,
                            .bf16_c = kind.bf16_c, .bias = kind.bias};
    check(dnnl_primitive_create(&p->prim, pd), "dnnl_primitive_create");
    dnnl_primitive_desc_destroy(pd);
    p->a = memory_of(g, &a);
    p->b = memory_of(g, &b);
    p->c = memory_of(g, &c);
    p->d = kind.bias ? memory_of(g, &d) : NULL;
    return p;
}

static struct gemm_prim *prim_of(struct onednn_gemms *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                 struct gemm_kind_of kind) {
    for (int i = 0; i < g->n_prims; i++) {
        struct gemm_prim *p = &g->prims[i];
        if (p->m == m && p->n == n && p->k == k && p->ta == ta && p->tb == tb && p->accumulate == kind.accumulate &&
            p->bf16_c == kind.bf16_c && p->bias == kind.bias)
            return p;
    }
    return make_prim(g, ta, tb, m, n, k, kind);
}

/* c (m,n) = (or += when accumulate) op(a) . op(b) (+ bias, a bf16 c's
 * only: kind.bias); c fp32, or bf16 (kind.bf16_c); 2mnk FLOPs and the
 * time to the counter, as gemm_counted_cpu's. */
static void gemm(struct flop_counter *fc, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bf16 *a,
                 const bf16 *b, void *c, const float *bias, struct gemm_kind_of kind) {
    if (m == 0 || n == 0) return;
    if (k == 0 && !kind.bias) { /* an empty sum */
        if (!kind.accumulate) memset(c, 0, (size_t)(m * n) * (kind.bf16_c ? sizeof(bf16) : sizeof(float)));
        return;
    }
    struct onednn_gemms *g = fc->onednn;
    double t0 = monotonic_seconds();
    struct gemm_prim *p = prim_of(g, ta, tb, m, n, k, kind);
    check(dnnl_memory_set_data_handle(p->a, (void *)a), "dnnl_memory_set_data_handle");
    check(dnnl_memory_set_data_handle(p->b, (void *)b), "dnnl_memory_set_data_handle");
    check(dnnl_memory_set_data_handle(p->c, c), "dnnl_memory_set_data_handle");
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    int n_args = 3;
    if (kind.bias) {
        check(dnnl_memory_set_data_handle(p->d, (void *)bias), "dnnl_memory_set_data_handle");
        args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->d};
    }
    check(dnnl_primitive_execute(p->prim, g->stream, n_args, args), "dnnl_primitive_execute");
    check(dnnl_stream_wait(g->stream), "dnnl_stream_wait");
    fc->gemm_seconds += monotonic_seconds() - t0;
    fc->gemm += 2.0 * (double)m * (double)n * (double)k;
}

/* src (n fp32 values) rounded into s, grown to hold them. */
static const bf16 *rounded(struct flop_counter *fc, struct scratch *s, const float *src, size_t n) {
    if (s->n < n) {
        bf16 *p = realloc(s->p, n * sizeof *p);
        if (!p) {
            fprintf(stderr, "error: oneDNN GEMMs: out of host memory for %zu bf16 values of scratch\n", n);
            exit(EXIT_FAILURE);
        }
        s->p = p;
        s->n = n;
    }
    conv_narrow_within(fc, s->p, src, n);
    return s->p;
}

static void probe(struct onednn_gemms *g) {
    const int64_t n = PROBE_DIM;
    prim_of(g, false, true, n, n, n, (struct gemm_kind_of){0});
}

struct onednn_gemms *onednn_gemms_open(const char *cpu_flags, char *err, size_t err_len) {
    const char *missing = onednn_bf16_missing(cpu_flags);
    if (missing) {
        snprintf(err, err_len, "%s", missing);
        return NULL;
    }
    struct onednn_gemms *g = calloc(1, sizeof *g);
    if (!g || dnnl_engine_create(&g->engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(err, err_len, "oneDNN: cannot make a CPU engine");
        free(g);
        return NULL;
    }
    if (dnnl_stream_create(&g->stream, g->engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(err, err_len, "oneDNN: cannot make a CPU stream");
        dnnl_engine_destroy(g->engine);
        free(g);
        return NULL;
    }
    probe(g);
    return g;
}

void onednn_gemms_close(struct onednn_gemms *g) {
    if (!g) return;
    for (int i = 0; i < g->n_prims; i++) {
        dnnl_memory_destroy(g->prims[i].a);
        dnnl_memory_destroy(g->prims[i].b);
        dnnl_memory_destroy(g->prims[i].c);
        if (g->prims[i].d) dnnl_memory_destroy(g->prims[i].d);
        dnnl_primitive_destroy(g->prims[i].prim);
    }
    free(g->prims);
    free(g->x.p);
    free(g->w.p);
    free(g->d.p);
    dnnl_stream_destroy(g->stream);
    dnnl_engine_destroy(g->engine);
    free(g);
}

/* An operand as bf16: as it is, or rounded into s. */
static const bf16 *as_bf16(struct flop_counter *fc, struct scratch *s, struct operand x, size_t n) {
    return x.b16 ? x.b16 : rounded(fc, s, x.f32, n);
}

void matmul_forward_onednn(struct act_out out, struct operand inp, struct operand weight, const float *bias,
                           int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    struct onednn_gemms *g = fc->onednn;
    const bf16 *x = as_bf16(fc, &g->x, inp, (size_t)(N * C)), *w = as_bf16(fc, &g->w, weight, (size_t)(OC * C));
    if (out.b16) { /* out = bf16(inp . W^T + bias): the bias inside, before the one rounding */
        gemm(fc, false, true, N, OC, C, x, w, out.b16, bias, (struct gemm_kind_of){.bf16_c = true, .bias = bias != NULL});
        if (bias) fc->other += (double)N * OC;
        return;
    }
    gemm(fc, false, true, N, OC, C, x, w, out.f32, NULL, (struct gemm_kind_of){0}); /* out = inp . W^T */
    if (bias) bias_add_cpu(out.f32, bias, N, OC, fc);
}

/* dbias += the column sums of the bf16 dout (N,OC), each in row order. */
static void bias_backward(float *dbias, const bf16 *dout, int64_t N, int64_t OC, struct flop_counter *fc) {
#pragma omp parallel for
    for (int64_t o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; i++) s += bf16_to_f32(dout[i * OC + o]);
        dbias[o] += s;
    }
    fc->other += (double)N * OC;
}

void matmul_backward_onednn(struct act_out dinp, float *dweight, float *dbias, struct operand dout, struct operand inp,
                            struct operand weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    struct onednn_gemms *g = fc->onednn;
    const bf16 *x = as_bf16(fc, &g->x, inp, (size_t)(N * C)), *w = as_bf16(fc, &g->w, weight, (size_t)(OC * C));
    const bf16 *d = as_bf16(fc, &g->d, dout, (size_t)(N * OC));
    void *dx = dinp.b16 ? (void *)dinp.b16 : (void *)dinp.f32;
    gemm(fc, false, false, N, C, OC, d, w, dx, NULL, (struct gemm_kind_of){.bf16_c = dinp.b16 != NULL}); /* dout . W */
    gemm(fc, true, false, OC, C, N, d, x, dweight, NULL, (struct gemm_kind_of){.accumulate = true}); /* += dout^T inp */
    if (dbias) bias_backward(dbias, d, N, OC, fc);
}
