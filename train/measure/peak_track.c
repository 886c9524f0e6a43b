/* The best rate observed as a CPU run's peak (train/measure/peak.h). */
#include "peak.h"

void peak_tracker_start(struct peak_tracker *t, double probe, bool follows) {
    *t = (struct peak_tracker){.flops = probe, .probe = probe, .follows = follows, .raised_step = -1};
}

bool peak_tracker_observe(struct peak_tracker *t, int step, const double rate[PEAK_RATES]) {
    if (!t->follows) return false;
    bool raised = false;
    for (int r = 0; r < PEAK_RATES; r++)
        if (rate[r] > t->flops) { /* false for NaN */
            t->flops = rate[r];
            t->raised_step = step;
            t->raised_by = (enum peak_rate)r;
            raised = true;
        }
    return raised;
}

const char *peak_rate_name(enum peak_rate r) {
    switch (r) {
    case PEAK_RATE_GEMMS: return "GEMMs";
    case PEAK_RATE_ISSUED: return "issued FLOPs";
    case PEAK_RATE_MODEL: return "model FLOPs";
    default: return "?";
    }
}

const char *peak_tracker_source(const struct peak_tracker *t) {
    if (!t->follows) return "fixed";
    return t->raised_step < 0 ? "probe" : "observed";
}
