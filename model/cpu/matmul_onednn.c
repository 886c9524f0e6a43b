/* The CPU's bf16 layer GEMMs through oneDNN's matmul primitive
 * (include/onednn_gemms.h). Every GEMM here is row-major
 * C (m,n) [+]= op(A) (m,k) . op(B) (k,n) on bf16 operands packed densely
 * in the context's scratch (or the model's bf16 copy), with fp32
 * accumulation and an fp32 C: a transposed operand is the same buffer
 * read through swapped strides in its memory descriptor, and C += is
 * oneDNN's sum post-op. A run of more than one thread cuts C into the
 * fixed blocks of gemm_split.h, which the team takes one at a time: a
 * block reads its rows or columns of A, B and C in place (the memory
 * descriptors carry the whole matrices' leading dimensions). The primitive
 * of each block shape (m, n, k, leading dimensions, transposes, kind) is
 * made once, for one thread, at its first use; each thread runs it on its
 * own stream, memory objects (re-pointed per call) and scratchpad. Why one
 * thread: a primitive made for the team splits long sums across it, and
 * its bits then change with the team (docs/THREADS.md has the numbers);
 * blocks of one-thread primitives give the same bits on any team, and a
 * thread that loses its core holds up only its block.
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
#include <omp.h>

#include "../bufops_ops.h"
#include "bufops.h"
#include "clock.h"
#include "conversions.h"
#include "gemm_split.h"
#include "layers_cpu.h"
#include "onednn_gemms.h"

/* A GEMM's kind beyond its sizes: C += rather than =, C's dtype, a bias. */
struct gemm_kind_of {
    bool accumulate, bf16_c, bias;
};

/* One thread's memory objects for a primitive: a call re-points them at
 * its buffers (dnnl_memory_set_data_handle), which two threads may not do
 * to one object at once, so each thread of the team has its own; the
 * scratchpad's points at the thread's own scratchpad (the context's
 * lane_scratch). */
struct lane_mems {
    dnnl_memory_t a, b, c, d, scratchpad;
};

/* One block shape's primitive, made for one thread: its sizes, the
 * leading dimensions of the whole matrices it reads and writes in place,
 * its memory descriptors, and the team's memory objects (lanes, one per
 * thread, made as the team first reaches that size). A bf16 C (bf16_c)
 * takes the bias into the primitive (bias: a (1, n) fp32 row added before
 * C's one rounding). */
struct gemm_prim {
    int64_t m, n, k, lda, ldb, ldc;
    bool ta, tb;
    struct gemm_kind_of kind;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md, d_md, scratchpad_md;
    struct lane_mems *lanes;
    int n_lanes;
};

/* bf16 scratch the fp32 operands are rounded into, grown as needed. */
struct scratch {
    bf16 *p;
    size_t n;
};

enum { KERNEL_NAME_LEN = 128, PROBE_DIM = 64, SCRATCH_ALIGN = 64 };

struct onednn_gemms {
    dnnl_engine_t engine;
    /* per thread of the team, made as the team first reaches that size: a
     * stream, and the scratchpad its primitives work in (the largest any
     * primitive asks, 64-byte aligned) */
    dnnl_stream_t *streams;
    void **lane_scratch;
    int n_streams;
    size_t scratch_bytes; /* each lane_scratch's size */
    struct gemm_prim **prims;
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

/* A row-major rows x cols matrix inside a buffer of rows ld values apart,
 * read transposed when t (then the buffer holds its cols x rows transpose,
 * its rows ld apart). */
static dnnl_memory_desc_t matrix(int64_t rows, int64_t cols, int64_t ld, bool t, dnnl_data_type_t dt) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : ld, t ? ld : 1};
    check(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides), "dnnl_memory_desc_init_by_strides");
    return md;
}

static dnnl_memory_t memory_of(const struct onednn_gemms *g, const dnnl_memory_desc_t *md) {
    dnnl_memory_t mem;
    check(dnnl_memory_create(&mem, md, g->engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
    return mem;
}

static void *grown(void *p, size_t n, size_t size, const char *what) {
    void *q = realloc(p, n * size);
    if (!q) check(dnnl_out_of_memory, what);
    return q;
}

/* The primitive of p's shape, made for one thread: oneDNN sizes a
 * primitive's split for omp_get_max_threads() when it is made, so the team
 * is set to 1 around it and restored. A one-thread primitive never splits
 * its sums (K) across threads, and the team runs the blocks side by side
 * (gemm, below): a multi-threaded primitive sums a dweight whose K (the
 * B T rows) is long and whose output is small in parts per thread, so its
 * bits changed with the team (N 4096 x C 64 x OC 64: 1,507 of 4,096 values
 * differ on 2 threads from 1). */
static void make_primitive(struct onednn_gemms *g, struct gemm_prim *p) {
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &p->a_md, &p->b_md, p->kind.bias ? &p->d_md : NULL, &p->c_md),
          "dnnl_matmul_desc_init");
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
    if (p->kind.accumulate) {
        dnnl_post_ops_t po;
        check(dnnl_post_ops_create(&po), "dnnl_post_ops_create");
        check(dnnl_post_ops_append_sum(po, 1.0f), "dnnl_post_ops_append_sum");
        check(dnnl_primitive_attr_set_post_ops(attr, po), "dnnl_primitive_attr_set_post_ops");
        dnnl_post_ops_destroy(po);
    }
    /* the scratchpad is ours, one per thread: with oneDNN's own (library
     * mode) two threads running one primitive at once wrote over each
     * other's partial sums (up to half of a block's outputs differed from
     * run to run, measured) */
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
          "dnnl_primitive_attr_set_scratchpad_mode");
    const int team = omp_get_max_threads();
    omp_set_num_threads(1);
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, g->engine, NULL), "dnnl_primitive_desc_create (bf16 matmul)");
    dnnl_primitive_attr_destroy(attr);
    const char *impl = NULL;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "dnnl_primitive_desc_query");
    snprintf(g->kernel, sizeof g->kernel, "%s", impl ? impl : "?");
    p->scratchpad_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    check(dnnl_primitive_create(&p->prim, pd), "dnnl_primitive_create");
    dnnl_primitive_desc_destroy(pd);
    omp_set_num_threads(team);
}

/* A block GEMM's shape: c (m,n) [+]= op(a) (m,k) . op(b) (k,n), each
 * matrix inside a buffer whose rows are lda, ldb, ldc values apart. */
struct block_shape {
    int64_t m, n, k, lda, ldb, ldc;
    bool ta, tb;
};

static bool same_shape(const struct gemm_prim *p, struct block_shape s, struct gemm_kind_of kind) {
    return p->m == s.m && p->n == s.n && p->k == s.k && p->lda == s.lda && p->ldb == s.ldb && p->ldc == s.ldc &&
           p->ta == s.ta && p->tb == s.tb && p->kind.accumulate == kind.accumulate && p->kind.bf16_c == kind.bf16_c &&
           p->kind.bias == kind.bias;
}

static struct gemm_prim *prim_of(struct onednn_gemms *g, struct block_shape s, struct gemm_kind_of kind) {
    for (int i = 0; i < g->n_prims; i++)
        if (same_shape(g->prims[i], s, kind)) return g->prims[i];
    if (g->n_prims == g->cap_prims) {
        g->cap_prims = g->cap_prims ? 2 * g->cap_prims : 16;
        g->prims = grown(g->prims, (size_t)g->cap_prims, sizeof *g->prims, "growing the primitive cache");
    }
    struct gemm_prim *p = calloc(1, sizeof *p);
    if (!p) check(dnnl_out_of_memory, "a primitive's record");
    *p = (struct gemm_prim){.m = s.m, .n = s.n, .k = s.k, .lda = s.lda, .ldb = s.ldb, .ldc = s.ldc, .ta = s.ta,
                            .tb = s.tb, .kind = kind};
    p->a_md = matrix(s.m, s.k, s.lda, s.ta, dnnl_bf16);
    p->b_md = matrix(s.k, s.n, s.ldb, s.tb, dnnl_bf16);
    p->c_md = matrix(s.m, s.n, s.ldc, false, kind.bf16_c ? dnnl_bf16 : dnnl_f32);
    p->d_md = matrix(1, s.n, s.n, false, dnnl_f32);
    make_primitive(g, p);
    g->prims[g->n_prims++] = p;
    return p;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* A thread's scratchpad of n bytes (NULL for none: a primitive that needs
 * none takes any pointer). */
static void *scratch_alloc(size_t n) {
    if (n == 0) return NULL;
    void *p = aligned_alloc(SCRATCH_ALIGN, n);
    if (!p) check(dnnl_out_of_memory, "a thread's scratchpad");
    return p;
}

/* Streams and p's memory objects for a team of `team` threads (made
 * before the team starts: the threads only read these arrays). */
static void lanes_for(struct onednn_gemms *g, struct gemm_prim *p, int team) {
    if (g->n_streams < team) {
        g->streams = grown(g->streams, (size_t)team, sizeof *g->streams, "the team's streams");
        g->lane_scratch = grown(g->lane_scratch, (size_t)team, sizeof *g->lane_scratch, "the team's scratchpads");
        for (; g->n_streams < team; g->n_streams++) {
            check(dnnl_stream_create(&g->streams[g->n_streams], g->engine, dnnl_stream_default_flags),
                  "dnnl_stream_create");
            g->lane_scratch[g->n_streams] = scratch_alloc(g->scratch_bytes);
        }
    }
    size_t need = dnnl_memory_desc_get_size(&p->scratchpad_md);
    if (need > g->scratch_bytes) { /* every lane's, the ones made later too */
        g->scratch_bytes = round_up(need, SCRATCH_ALIGN);
        for (int i = 0; i < g->n_streams; i++) {
            free(g->lane_scratch[i]);
            g->lane_scratch[i] = scratch_alloc(g->scratch_bytes);
        }
    }
    if (p->n_lanes >= team) return;
    p->lanes = grown(p->lanes, (size_t)team, sizeof *p->lanes, "a primitive's memory objects");
    for (; p->n_lanes < team; p->n_lanes++) {
        struct lane_mems *l = &p->lanes[p->n_lanes];
        *l = (struct lane_mems){memory_of(g, &p->a_md), memory_of(g, &p->b_md), memory_of(g, &p->c_md),
                                p->kind.bias ? memory_of(g, &p->d_md) : NULL, memory_of(g, &p->scratchpad_md)};
    }
}

/* Runs p on the calling thread's stream and memory objects (lane). */
static void run_prim(const struct onednn_gemms *g, const struct gemm_prim *p, int lane, const bf16 *a,
                     const bf16 *b, void *c, const float *bias) {
    const struct lane_mems *l = &p->lanes[lane];
    check(dnnl_memory_set_data_handle(l->a, (void *)a), "dnnl_memory_set_data_handle");
    check(dnnl_memory_set_data_handle(l->b, (void *)b), "dnnl_memory_set_data_handle");
    check(dnnl_memory_set_data_handle(l->c, c), "dnnl_memory_set_data_handle");
    check(dnnl_memory_set_data_handle(l->scratchpad, g->lane_scratch[lane]), "dnnl_memory_set_data_handle");
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, l->a}, {DNNL_ARG_WEIGHTS, l->b}, {DNNL_ARG_DST, l->c}, {DNNL_ARG_SCRATCHPAD, l->scratchpad}};
    int n_args = 4;
    if (p->kind.bias) {
        check(dnnl_memory_set_data_handle(l->d, (void *)bias), "dnnl_memory_set_data_handle");
        args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, l->d};
    }
    check(dnnl_primitive_execute(p->prim, g->streams[lane], n_args, args), "dnnl_primitive_execute");
    check(dnnl_stream_wait(g->streams[lane]), "dnnl_stream_wait");
}

/* A whole GEMM as one block: a one-thread run's (fc->gemm_blocks false). */
static struct gemm_split whole(int64_t n) {
    return (struct gemm_split){.by_cols = true, .side = n, .size = n, .blocks = 1};
}

/* The GEMM's operands: row-major, densely stored, transposed as read. */
struct gemm_args {
    bool ta, tb;
    int64_t m, n, k;
    const bf16 *a, *b;
    void *c;
    const float *bias;
    struct gemm_kind_of kind;
};

/* The primitive of block j's shape (every block but a shorter last one
 * has the first's). */
static struct block_shape block_shape_of(const struct gemm_args *x, struct gemm_split s, int64_t j) {
    int64_t len = gemm_split_len(s, j);
    return (struct block_shape){.m = s.by_cols ? x->m : len, .n = s.by_cols ? len : x->n, .k = x->k,
                                .lda = x->ta ? x->m : x->k, .ldb = x->tb ? x->k : x->n, .ldc = x->n, .ta = x->ta,
                                .tb = x->tb};
}

/* Block j of C on the calling thread: by columns C[:, at..) = op(A) .
 * op(B)[:, at..) (+ bias[at..)), by rows C[at.., :) = op(A)[at.., :) .
 * op(B). */
static void run_block(const struct onednn_gemms *g, const struct gemm_prim *p, const struct gemm_args *x,
                      struct gemm_split s, int64_t j) {
    const int64_t at = gemm_split_at(s, j), c_size = x->kind.bf16_c ? sizeof(bf16) : sizeof(float);
    const bf16 *a = x->a, *b = x->b;
    const float *bias = x->bias;
    int64_t c_off;
    if (s.by_cols) {
        b += x->tb ? at * x->k : at;
        bias = bias ? bias + at : NULL;
        c_off = at;
    } else {
        a += x->ta ? at : at * x->k;
        c_off = at * x->n;
    }
    run_prim(g, p, omp_get_thread_num(), a, b, (char *)x->c + c_off * c_size, bias);
}

/* c (m,n) = (or += when accumulate) op(a) . op(b) (+ bias, a bf16 c's
 * only: kind.bias); c fp32, or bf16 (kind.bf16_c); 2mnk FLOPs and the
 * time to the counter, as gemm_counted_cpu's. A run of more than one
 * thread (fc->gemm_blocks) cuts C into gemm_split.h's fixed blocks, each a
 * one-thread primitive, and the team takes them one at a time: the same
 * kernel sums each value in the same order on any team, and a thread that
 * loses its core holds up only its block. */
static void gemm(struct exec_ctx *fc, struct gemm_args x) {
    if (x.m == 0 || x.n == 0) return;
    if (x.k == 0 && !x.kind.bias) { /* an empty sum */
        if (!x.kind.accumulate)
            memset(x.c, 0, (size_t)(x.m * x.n) * (x.kind.bf16_c ? sizeof(bf16) : sizeof(float)));
        return;
    }
    struct onednn_gemms *g = fc->onednn;
    double t0 = monotonic_seconds();
    const struct gemm_split s = fc->gemm_blocks ? gemm_split_of(x.m, x.n) : whole(x.n);
    const int team = s.blocks > 1 ? omp_get_max_threads() : 1;
    struct gemm_prim *first = prim_of(g, block_shape_of(&x, s, 0), x.kind);
    struct gemm_prim *last = prim_of(g, block_shape_of(&x, s, s.blocks - 1), x.kind);
    lanes_for(g, first, team);
    lanes_for(g, last, team);
    /* dynamic: a block goes to whichever thread is free; its bits are the
     * same whichever does */
#pragma omp parallel for schedule(dynamic, 1) if (team > 1)
    for (int64_t j = 0; j < s.blocks; j++) run_block(g, j == s.blocks - 1 ? last : first, &x, s, j);
    fc->gemm_seconds += monotonic_seconds() - t0;
    fc->gemm += 2.0 * (double)x.m * (double)x.n * (double)x.k;
}

/* src (n fp32 values) rounded into s, grown to hold them. */
static const bf16 *rounded(struct exec_ctx *fc, struct scratch *s, const float *src, size_t n) {
    if (s->n < n) {
        bf16 *p = realloc(s->p, n * sizeof *p);
        if (!p) {
            fprintf(stderr, "error: oneDNN GEMMs: out of host memory for %zu bf16 values of scratch\n", n);
            exit(EXIT_FAILURE);
        }
        s->p = p;
        s->n = n;
    }
    /* the host's form itself: a kernel does not call back into the dispatch */
    buf_narrow_cpu(s->p, src, n);
    fc->profile[KERNEL_NARROW].bytes += (double)conv_narrow_bytes(n);
    return s->p;
}

/* The kernel oneDNN picks, for the banner before the first GEMM. */
static void probe(struct onednn_gemms *g) {
    const int64_t n = PROBE_DIM;
    prim_of(g, (struct block_shape){.m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n, .tb = true},
            (struct gemm_kind_of){0});
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
    probe(g);
    return g;
}

static void prim_free(struct gemm_prim *p) {
    for (int i = 0; i < p->n_lanes; i++) {
        dnnl_memory_destroy(p->lanes[i].a);
        dnnl_memory_destroy(p->lanes[i].b);
        dnnl_memory_destroy(p->lanes[i].c);
        if (p->lanes[i].d) dnnl_memory_destroy(p->lanes[i].d);
        dnnl_memory_destroy(p->lanes[i].scratchpad);
    }
    free(p->lanes);
    dnnl_primitive_destroy(p->prim);
    free(p);
}

void onednn_gemms_close(struct onednn_gemms *g) {
    if (!g) return;
    for (int i = 0; i < g->n_prims; i++) prim_free(g->prims[i]);
    free(g->prims);
    for (int i = 0; i < g->n_streams; i++) {
        dnnl_stream_destroy(g->streams[i]);
        free(g->lane_scratch[i]);
    }
    free(g->streams);
    free(g->lane_scratch);
    free(g->x.p);
    free(g->w.p);
    free(g->d.p);
    dnnl_engine_destroy(g->engine);
    free(g);
}

/* An operand as bf16: as it is, or rounded into s. */
static const bf16 *as_bf16(struct exec_ctx *fc, struct scratch *s, struct operand x, size_t n) {
    if (operand_is_bf16(x)) return operand_as_bf16(x, __func__);
    return rounded(fc, s, operand_as_f32(x, __func__), n);
}

void matmul_forward_onednn(struct act_out out, struct operand inp, struct operand weight, const float *bias,
                           int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    struct onednn_gemms *g = fc->onednn;
    const bf16 *x = as_bf16(fc, &g->x, inp, (size_t)(N * C)), *w = as_bf16(fc, &g->w, weight, (size_t)(OC * C));
    if (act_out_is_bf16(out)) { /* out = bf16(inp . W^T + bias): the bias inside, before the one rounding */
        gemm(fc, (struct gemm_args){.tb = true, .m = N, .n = OC, .k = C, .a = x, .b = w,
                                    .c = act_out_as_bf16(out, __func__), .bias = bias,
                                    .kind = {.bf16_c = true, .bias = bias != NULL}});
        if (bias) fc->other += (double)N * OC;
        return;
    }
    /* out = inp . W^T */
    float *y = act_out_as_f32(out, __func__);
    gemm(fc, (struct gemm_args){.tb = true, .m = N, .n = OC, .k = C, .a = x, .b = w, .c = y});
    if (bias) bias_add_cpu(y, bias, N, OC, fc);
}

/* dbias += the column sums of the bf16 dout (N,OC), each in row order. */
static void bias_backward(float *dbias, const bf16 *dout, int64_t N, int64_t OC, struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; i++) s += bf16_to_f32(dout[i * OC + o]);
        dbias[o] += s;
    }
    fc->other += (double)N * OC;
}

void matmul_backward_onednn(struct act_out dinp, float *dweight, float *dbias, struct operand dout, struct operand inp,
                            struct operand weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    struct onednn_gemms *g = fc->onednn;
    const bf16 *x = as_bf16(fc, &g->x, inp, (size_t)(N * C)), *w = as_bf16(fc, &g->w, weight, (size_t)(OC * C));
    const bf16 *d = as_bf16(fc, &g->d, dout, (size_t)(N * OC));
    /* dinp = dout . W (written in its dtype), dweight += dout^T . inp */
    gemm(fc, (struct gemm_args){.m = N, .n = C, .k = OC, .a = d, .b = w, .c = dinp.data,
                                .kind = {.bf16_c = act_out_is_bf16(dinp)}});
    gemm(fc, (struct gemm_args){.ta = true, .m = OC, .n = C, .k = N, .a = d, .b = x, .c = dweight,
                                .kind = {.accumulate = true}});
    if (dbias) bias_backward(dbias, d, N, OC, fc);
}
