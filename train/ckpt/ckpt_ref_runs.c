/* Runs of a rank's tensor in the reference numbering (train/ckpt/ckpt_ref_runs.h). */
#include "ckpt_ref_runs.h"

/* Within one row the map to reference indices is strictly increasing, so
 * [a, b] is contiguous exactly when its ends are b - a apart: the longest
 * such run from i is found by halving the rest of the row. */
size_t ref_run(const struct model_layout *lay, const struct tensor_info *t, size_t i, size_t *ref) {
    *ref = layout_ref_index(lay, t, i);
    if (lay->rank.tp == 1 || t->split == SPLIT_REPLICATED) return t->numel - i;
    size_t cols = (size_t)t->cols, row_end = (i / cols + 1) * cols; /* one past the row's last element */
    size_t len = 1, step = row_end - i - 1;                            /* len: known contiguous */
    while (step > 0) {
        size_t last = i + len - 1 + step;
        if (last < row_end && layout_ref_index(lay, t, last) == *ref + (last - i)) len += step;
        else step /= 2;
    }
    return len;
}
