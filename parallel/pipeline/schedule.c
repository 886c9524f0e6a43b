/* Today's schedule (include/schedule.h): micro-batches in sequence. */
#include "schedule.h"

double schedule_sequential(struct engine *e, int n_micro, float dloss, const struct batch_source *src,
                           int32_t *inputs, int32_t *targets) {
    enum { SLOT = 0 }; /* one micro-batch in flight */
    double loss = 0.0;
    for (int k = 0; k < n_micro; k++) {
        src->next(src->ctx, inputs, targets);
        struct mb_input in = {.inputs = inputs, .targets = targets};
        loss += engine_forward(e, SLOT, &in, NULL, dloss);
        engine_backward(e, SLOT, NULL, NULL);
    }
    return loss;
}
