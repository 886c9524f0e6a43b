/* --explain: the shard map. For every unit and rank, the element range the
 * rank owns and the tensors the cut passes through; then, for the chosen
 * stage, which buffers each rank holds in full and which in part. */
#include "report.h"
#include "shard.h"

static void owned_tensors(FILE *out, const struct model_layout *lay, int unit, size_t lo, size_t hi) {
    size_t base = layout_unit_offset(lay, unit);
    for (int t = 0; t < layout_num_tensors(lay); t++) {
        struct tensor_info ti = layout_tensor(lay, t);
        if (ti.unit != unit) continue;
        size_t a = ti.offset - base, b = a + ti.numel;
        size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (x >= y) continue;
        if (x == a && y == b) fprintf(out, " %s", ti.name);
        else fprintf(out, " %s[%zu:%zu)", ti.name, x - a, y - a); /* the cut passes through this tensor */
    }
}

static const char *held(bool sharded) { return sharded ? "part (1/N)" : "full"; }

void report_shard_map(FILE *out, const struct trainer *tr) {
    const struct engine *e = &tr->engine;
    const struct shard_layout *sh = &e->sh;
    int N = sh->N, z = e->stage;
    fprintf(out, "\nshard map: ZeRO-%d over %d data-parallel rank%s. Rank r owns slice r of every unit; each unit is\n"
                 "padded to a multiple of N elements, so no slice crosses a unit. [a:b) = elements a..b-1 of a tensor.\n",
            z, N, N == 1 ? "" : "s");
    for (int u = 0; u < e->lay.n_units; u++) {
        size_t n = layout_unit_size(&e->lay, u);
        fprintf(out, "  unit %d (%s): %zu elements, padded %zu, %zu per rank\n", u,
                u == EMBED_UNIT ? "embeddings + head" : "layer", n, shard_unit_padded(sh, u), shard_unit_chunk(sh, u));
        if (u > 2 && u < e->lay.n_units - 1) {
            if (u == 3) fprintf(out, "    ... layers 2..%d are cut the same way\n", e->lay.shape.L - 2);
            continue;
        }
        for (int r = 0; r < N; r++) {
            size_t lo, hi;
            shard_owned(sh, u, r, &lo, &hi);
            size_t pad = shard_unit_chunk(sh, u) - (hi - lo);
            fprintf(out, "    rank %d: [%zu, %zu)", r, lo, hi);
            if (pad) fprintf(out, " + %zu padding", pad);
            fprintf(out, " :");
            owned_tensors(out, &e->lay, u, lo, hi);
            fprintf(out, "\n");
        }
    }
    fprintf(out, "  each rank holds: params %s, master and Adam m, v %s, grads %s", held(z >= 3), held(z >= 1),
            held(z >= 2));
    if (z >= 3) fprintf(out, ", plus one gathered layer and gathered unit 0 in full while they are used");
    if (z == 2) fprintf(out, ", plus one unit's gradient in full (the reduce-scatter bucket)");
    fprintf(out, ".\n  %s\n",
            z == 0   ? "every rank updates every parameter; gradients are all-reduced once per step"
            : z == 1 ? "rank r updates its slices; gradients are reduce-scattered once per step, params all-gathered"
            : z == 2 ? "each unit's gradient is reduce-scattered when its backward ends; params all-gathered after the update"
                     : "each unit is all-gathered before its forward and again before its backward, then released");
}
