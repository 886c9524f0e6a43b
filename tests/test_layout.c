/* A rank's model (include/layout.h, include/pipe_stages.h): the whole model
 * keeps the reference numbering; pipeline stages and tensor-parallel
 * slices cover every parameter exactly once; the tied head keeps a copy of
 * wte only when the embedding is elsewhere; init values do not depend on
 * the layout; counts of the LLaMA-3-405B shape are exact in 64 bits; and a
 * LLaMA's tensors are llm.c's write_tensors', as many as the planner
 * counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "layout.h"
#include "pipe_stages.h"
#include "../train/theory/theory.h"

static const struct model_shape SMALL = {.L = 5, .C = 16, .NH = 4, .T = 8, .V = 100};

static struct model_layout layout_for(struct model_shape s, int pp, int pp_rank, int tp, int tp_rank) {
    struct rank_desc d;
    assert_int_equal(pipeline_rank_desc_v(s.L, pp, 1, pp_rank, tp, tp_rank, NULL, &d), 0);
    struct model_layout lay;
    assert_int_equal(layout_init(&lay, s, d), 0);
    return lay;
}

/* tp = pp = 1: units embedding, head, layers; flat offsets are the
 * reference numbering (wte, wpe, lnfw, lnfb, then layer by layer). */
static void test_whole_model_is_the_reference(void **state) {
    (void)state;
    struct model_layout lay;
    layout_init_whole(&lay, SMALL);
    size_t C = 16, Vp = 128, T = 8, layer = 12 * C * C + 13 * C;
    assert_int_equal(lay.shape.Vp, Vp);
    assert_int_equal(lay.n_units, 2 + 5);
    assert_int_equal(lay.total, (Vp + T) * C + 2 * C + 5 * layer);
    assert_int_equal(lay.total, lay.ref_total);
    assert_int_equal(layout_unit(&lay, layout_embed_unit(&lay)).kind, UNIT_EMBED);
    assert_int_equal(layout_head_unit(&lay), 1);
    assert_int_equal(layout_layer_unit(&lay, 3), 5);
    assert_int_equal(layout_unit(&lay, 5).layer, 3);
    assert_int_equal(layout_head_tensor(&lay, HEAD_LNF_W).offset, (Vp + T) * C);
    assert_int_equal(layout_layer_tensor(&lay, 2, LAYER_QKV_W).offset, (Vp + T) * C + 2 * C + 2 * layer + 2 * C);
    assert_int_equal(layout_num_tensors(&lay), 2 + 2 + 5 * 12); /* GPT-2's 12 tensors per layer */
    for (int k = 0; k < layout_num_tensors(&lay); k++) {
        struct tensor_info t = layout_tensor(&lay, k);
        for (size_t i = 0; i < t.numel; i += 7) assert_int_equal(layout_ref_index(&lay, &t, i), t.offset + i);
    }
}

/* Marks each reference index a rank holds (wte copies of a head apart:
 * they are the same parameter as the embedding's wte). Returns how many
 * elements lie past the reference: tp's extra vocabulary padding rows. */
static size_t cover(const struct model_layout *lay, unsigned char *seen) {
    size_t extra = 0;
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.kind == UNIT_HEAD && t.id == HEAD_WTE) continue;
        for (size_t i = 0; i < t.numel; i++) {
            size_t r = layout_ref_index(lay, &t, i);
            if (r >= lay->ref_total) {
                assert_int_equal(t.split, SPLIT_VOCAB);
                extra++;
                continue;
            }
            seen[r]++;
        }
    }
    return extra;
}

static void test_stages_and_slices_cover_the_model_once(void **state) {
    (void)state;
    struct model_layout whole;
    layout_init_whole(&whole, SMALL);
    static const int grids[][2] = {{1, 1}, {3, 1}, {1, 2}, {1, 4}, {2, 2}, {5, 4}};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        int pp = grids[g][0], tp = grids[g][1];
        unsigned char *seen = calloc(whole.ref_total, 1);
        size_t held = 0, extra = 0;
        for (int p = 0; p < pp; p++)
            for (int t = 0; t < tp; t++) {
                struct model_layout lay = layout_for(SMALL, pp, p, tp, t);
                assert_int_equal(lay.ref_total, whole.ref_total);
                assert_int_equal(lay.head_wte_copy, pp > 1 && p == pp - 1);
                extra += cover(&lay, seen);
                held += lay.total;
            }
        /* replicated tensors are held by every tp rank, split ones once */
        for (size_t i = 0; i < whole.ref_total; i++) {
            struct tensor_info t = {0};
            for (int k = 0; k < layout_num_tensors(&whole); k++) {
                t = layout_tensor(&whole, k);
                if (i >= t.offset && i < t.offset + t.numel) break;
            }
            int want = t.split == SPLIT_REPLICATED ? tp : 1;
            if (seen[i] != want) fail_msg("pp %d tp %d: reference element %zu (%s) held %d times, want %d", pp, tp, i,
                                          t.name, seen[i], want);
        }
        size_t vp_tp = (size_t)(SMALL.V + 128 * tp - 1) / (128 * tp) * (128 * tp);
        assert_int_equal(extra, (vp_tp - 128) * (size_t)SMALL.C); /* exactly tp's extra padding rows */
        printf("  pp %d x tp %d: %zu elements held in all, every parameter where it belongs\n", pp, tp, held);
        free(seen);
    }
}

/* Column-parallel QKV is split by heads: rank k of tp holds, of each of
 * q, k and v, the rows of its NH/tp heads. */
static void test_qkv_split_by_heads(void **state) {
    (void)state;
    struct model_layout whole, lay = layout_for(SMALL, 1, 0, 2, 1);
    layout_init_whole(&whole, SMALL);
    struct tensor_info q = layout_layer_tensor(&lay, 0, LAYER_QKV_W), full = layout_layer_tensor(&whole, 0, LAYER_QKV_W);
    size_t C = 16;
    assert_int_equal(q.rows, 3 * C / 2);
    assert_int_equal(q.split, SPLIT_COLUMN);
    /* local row 0 = q row C/2; local row C/2 = k row C + C/2; local row C = v row 2C + C/2 */
    assert_int_equal(layout_ref_index(&lay, &q, 0), full.offset + (C / 2) * C);
    assert_int_equal(layout_ref_index(&lay, &q, (C / 2) * C), full.offset + (C + C / 2) * C);
    assert_int_equal(layout_ref_index(&lay, &q, C * C + 3), full.offset + (2 * C + C / 2) * C + 3);
    struct tensor_info proj = layout_layer_tensor(&lay, 0, LAYER_FCPROJ_W);
    assert_int_equal(proj.split, SPLIT_ROW);
    assert_int_equal(proj.cols, 4 * C / 2);
    assert_int_equal(layout_layer_tensor(&lay, 0, LAYER_FCPROJ_B).split, SPLIT_REPLICATED);
    assert_int_equal(layout_embed_tensor(&lay, EMB_WTE).rows, 128); /* Vp = 256 at tp 2: 128 rows each */
}

static void test_bad_descriptions_fail(void **state) {
    (void)state;
    struct model_layout lay;
    struct rank_desc d = rank_desc_whole(&SMALL);
    d.tp = 3; /* 4 heads do not split over 3 */
    assert_int_equal(layout_init(&lay, SMALL, d), -1);
    d = rank_desc_whole(&SMALL);
    d.chunk[0].l1 = 6;
    assert_int_equal(layout_init(&lay, SMALL, d), -1);
    int l0, l1;
    assert_int_equal(pipeline_stage_layers(5, 3, 0, NULL, &l0, &l1), 0);
    assert_true(l0 == 0 && l1 == 2);
    assert_int_equal(pipeline_stage_layers(5, 3, 2, NULL, &l0, &l1), 0);
    assert_true(l0 == 4 && l1 == 5);
    int counts[] = {3, 0, 2};
    assert_int_equal(pipeline_stage_layers(5, 3, 2, counts, &l0, &l1), 0);
    assert_true(l0 == 3 && l1 == 5);
    int bad[] = {3, 1, 2};
    assert_int_equal(pipeline_stage_layers(5, 3, 0, bad, &l0, &l1), -1);
    assert_int_equal(pipeline_stage_layers(5, 3, 3, NULL, &l0, &l1), -1);
}

/* Init values are a function of the reference index: a pipeline stage or
 * a tensor-parallel slice draws exactly what the whole model holds there,
 * and the head's wte copy equals the embedding's wte. */
static void test_init_does_not_depend_on_the_layout(void **state) {
    (void)state;
    struct model_layout whole;
    layout_init_whole(&whole, SMALL);
    float *ref = malloc(whole.total * sizeof *ref);
    for (int u = 0; u < whole.n_units; u++)
        gpt_init_unit(&whole, u, 0, layout_unit_size(&whole, u), ref + layout_unit_offset(&whole, u), 0.02f, 7);
    static const int grids[][2] = {{2, 1}, {1, 2}, {3, 4}};
    size_t checked = 0;
    for (size_t g = 0; g < 3; g++)
        for (int p = 0; p < grids[g][0]; p++)
            for (int t = 0; t < grids[g][1]; t++) {
                struct model_layout lay = layout_for(SMALL, grids[g][0], p, grids[g][1], t);
                for (int u = 0; u < lay.n_units; u++) {
                    size_t n = layout_unit_size(&lay, u), base = layout_unit_offset(&lay, u);
                    float *w = malloc(n * sizeof *w);
                    size_t lo = n / 3; /* a range that starts inside the unit */
                    gpt_init_unit(&lay, u, lo, n, w + lo, 0.02f, 7);
                    for (int k = 0; k < layout_num_tensors(&lay); k++) {
                        struct tensor_info ti = layout_tensor(&lay, k);
                        if (ti.unit != u) continue;
                        for (size_t i = 0; i < ti.numel; i++) {
                            size_t at = ti.offset - base + i, r = layout_ref_index(&lay, &ti, i);
                            if (at < lo) continue;
                            float want = r < whole.ref_total ? ref[r] : 0.0f;
                            if (w[at] != want) fail_msg("%s[%zu] on stage %d tp rank %d: %g, whole model %g", ti.name,
                                                        i, p, t, (double)w[at], (double)want);
                            checked++;
                        }
                    }
                    free(w);
                }
            }
    printf("  %zu initial values equal the whole model's\n", checked);
    free(ref);
}

/* LLaMA-3-405B's width and depth in this GPT-2 layout at B = 8, T = 8192:
 * counts past 2^32 computed by the layout equal 64-bit arithmetic. */
static void test_405b_counts_are_64_bit(void **state) {
    (void)state;
    struct model_shape s = {.L = 126, .C = 16384, .NH = 128, .T = 8192, .V = 128256};
    struct model_layout lay;
    layout_init_whole(&lay, s);
    uint64_t C = 16384, L = 126, T = 8192, Vp = 128256, B = 8, NH = 128; /* 128256 = 1002 x 128 */
    assert_int_equal(lay.shape.Vp, Vp);
    uint64_t layer = 12 * C * C + 13 * C, total = (Vp + T) * C + 2 * C + L * layer;
    assert_true(total > (1ull << 32));
    assert_int_equal(lay.layer_size, layer);
    assert_int_equal(lay.total, total);
    assert_int_equal(layout_layer_tensor(&lay, 125, LAYER_FCPROJ_B).offset + C, total);
    assert_int_equal(gpt_layer_act_numel(&lay.shape, (int)B, 1, false, ACT_ATT), B * NH * T * T);
    assert_int_equal(gpt_layer_act_numel(&lay.shape, (int)B, 1, false, ACT_FCH), 4 * B * T * C);
    assert_true(B * NH * T * T >= (1ull << 36));
    /* the last of 8 stages (126 = 6 x 16 + 2 x 15 layers) at tp 8: split
     * tensors hold 1/8, replicated ones (four norm vectors, two row biases) all */
    struct model_layout last = layout_for(s, 8, 7, 8, 7);
    assert_true(last.rank.chunk[0].l0 == 111 && last.rank.chunk[0].l1 == 126);
    uint64_t tp_layer = (12 * C * C + 7 * C) / 8 + 6 * C;
    assert_int_equal(last.layer_size, tp_layer);
    uint64_t Vp8 = 129024; /* the vocabulary padded to a multiple of 128 x tp = 1024 */
    assert_int_equal(last.shape.Vp, Vp8);
    assert_int_equal(last.head_size, 2 * C + (Vp8 / 8) * C); /* lnf + this slice of the wte copy */
    assert_int_equal(last.total, last.head_size + 15 * tp_layer);
}

/* arch = llama: wte; lnfw, lm_head (untied); per layer ln1w, qkvw at GQA
 * width, attprojw, ln2w, fcw (up), fc2w (gate), fcprojw: no biases, no
 * position table, no vocabulary padding; the planner's count. */
static void test_llama_tensors(void **state) {
    (void)state;
    enum { L = 3, C = 32, NH = 4, KV = 2, F = 96, V = 100, HS = C / NH };
    struct model_shape s = {.L = L, .C = C, .NH = NH, .T = 8, .V = V, .arch = ARCH_LLAMA, .KV = KV, .F = F};
    struct model_layout lay;
    assert_int_equal(layout_init(&lay, s, rank_desc_whole(&s)), 0);
    const char *names[] = {"wte", "lnfw", "lm_head", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fc2w", "fcprojw"};
    const size_t sizes[] = {V * C, C, V * C, C, (NH + 2 * KV) * HS * C, C * C, C, F * C, F * C, C * F};
    assert_int_equal(layout_num_tensors(&lay), 3 + L * 7);
    size_t at = 0;
    for (int k = 0; k < layout_num_tensors(&lay); k++) {
        struct tensor_info t = layout_tensor(&lay, k);
        int i = k < 3 ? k : 3 + (k - 3) % 7;
        assert_string_equal(t.name, names[i]);
        assert_int_equal(t.numel, sizes[i]);
        assert_int_equal(t.offset, at); /* flat and whole: the reference numbering */
        assert_int_equal(layout_ref_index(&lay, &t, t.numel - 1), at + t.numel - 1);
        at += t.numel;
    }
    assert_int_equal(lay.total, at);
    assert_int_equal(lay.ref_total, at);
    struct theory_model m = {.L = L, .h = C, .a = NH, .n_kv = KV, .d_h = HS, .F = F, .s = 8, .V = V, .Vp = V,
                             .arch = ARCH_LLAMA, .swiglu = true, .rmsnorm = true};
    assert_int_equal((size_t)theory_param_count(&m).total, at);
    /* GQA: KV must divide NH */
    s.KV = 3;
    assert_int_equal(layout_init(&lay, s, rank_desc_whole(&s)), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_model_is_the_reference),
        cmocka_unit_test(test_stages_and_slices_cover_the_model_once),
        cmocka_unit_test(test_qkv_split_by_heads),
        cmocka_unit_test(test_bad_descriptions_fail),
        cmocka_unit_test(test_init_does_not_depend_on_the_layout),
        cmocka_unit_test(test_405b_counts_are_64_bit),
        cmocka_unit_test(test_llama_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
