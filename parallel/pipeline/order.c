/* The schedules' orders and the activation slots they need
 * (include/schedule.h): GPipe, 1F1B and interleaved 1F1B. */
#include "schedule.h"

const char *schedule_name(enum schedule_kind k) {
    static const char *const names[SCHEDULE_NUM] = {
        [SCHEDULE_GPIPE] = "gpipe", [SCHEDULE_1F1B] = "1f1b", [SCHEDULE_INTERLEAVED] = "interleaved"};
    return (unsigned)k < SCHEDULE_NUM ? names[k] : "?";
}

static int min_int(int a, int b) { return a < b ? a : b; }

int schedule_warmup(enum schedule_kind k, int p, int stage, int m, int v) {
    switch (k) {
    case SCHEDULE_GPIPE: return m;
    case SCHEDULE_1F1B: return min_int(p - stage - 1, m);
    case SCHEDULE_INTERLEAVED: /* Megatron-LM's: two per later stage, and one round of every other chunk */
        return min_int((p - stage - 1) * 2 + (v - 1) * p, m * v);
    case SCHEDULE_NUM: break;
    }
    return 0;
}

bool schedule_runs(enum schedule_kind k, int p, int m, int v) {
    if (p < 1 || m < 1 || v < 1 || v > RANK_MAX_CHUNKS) return false;
    return k == SCHEDULE_INTERLEAVED ? p >= 2 && v >= 2 && m % p == 0 : v == 1;
}

/* Virtual micro-batch i of the interleaved order: p micro-batches through
 * chunk 0, the same p through chunk 1, ..., then the next p; backwards
 * visit the chunks from the last. */
static struct pipe_op virtual_op(enum pipe_op_kind kind, int p, int v, int i) {
    int chunk = i / p % v, mb = i % p + p * (i / (p * v));
    return (struct pipe_op){.micro_batch = mb, .chunk = (short)(kind == PIPE_FORWARD ? chunk : v - 1 - chunk),
                            .kind = (unsigned char)kind};
}

struct pipe_op schedule_op(enum schedule_kind k, int p, int stage, int m, int v, int i) {
    int total = m * v, warmup = schedule_warmup(k, p, stage, m, v), steady = 2 * (total - warmup);
    struct pipe_op op;
    if (i < warmup) op = virtual_op(PIPE_FORWARD, p, v, i);
    else if (i - warmup < steady) /* one forward, one backward */
        op = (i - warmup) % 2 == 0 ? virtual_op(PIPE_FORWARD, p, v, warmup + (i - warmup) / 2)
                                   : virtual_op(PIPE_BACKWARD, p, v, (i - warmup) / 2);
    else op = virtual_op(PIPE_BACKWARD, p, v, i - warmup - steady + (total - warmup)); /* drain */
    if (k != SCHEDULE_INTERLEAVED) op.chunk = 0; /* v = 1: virtual micro-batch i is micro-batch i */
    return op;
}

int schedule_order_v(enum schedule_kind k, int p, int stage, int m, int v, struct pipe_op *ops) {
    if (!schedule_runs(k, p, m, v)) return -1;
    for (int i = 0; i < 2 * m * v; i++) ops[i] = schedule_op(k, p, stage, m, v, i);
    return 2 * m * v;
}

int schedule_chunk_slots(enum schedule_kind k, int p, int stage, int m, int v, int chunk) {
    if (!schedule_runs(k, p, m, v) || chunk < 0 || chunk >= v) return 0;
    int live = 0, most = 0; /* forwards of the chunk whose backward has not run */
    for (int i = 0; i < 2 * m * v; i++) {
        struct pipe_op op = schedule_op(k, p, stage, m, v, i);
        if (op.chunk != chunk) continue;
        live += op.kind == PIPE_FORWARD ? 1 : -1;
        most = live > most ? live : most;
    }
    return most;
}

int schedule_slots(enum schedule_kind k, int p, int stage, int m) {
    return k == SCHEDULE_GPIPE ? m : min_int(p - stage, m);
}
