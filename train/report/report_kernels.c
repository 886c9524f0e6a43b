/* Where a step's kernel time went (include/report.h: report_kernels), from
 * the profile the CUDA build's dispatch keeps in the run's flop counter
 * (include/counters.h). The CPU build keeps none and prints nothing. */
#include "report.h"

void report_kernels(FILE *out, FILE *json, const struct trainer *tr, int steps) {
    const struct kernel_time *p = tr->flops.profile;
    double profiled = 0.0, calls = 0.0;
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) profiled += p[k].seconds, calls += p[k].calls;
    if (steps <= 0 || calls == 0.0) return;
    double step = tr->train_seconds / steps;
    fprintf(out, "\nKernel time per optimizer step on rank 0 (%s), averaged over %d steps: each call's device time "
                 "(CUDA events around its kernels; the update rules: wall time, synchronized)\n", tr->dev.name, steps);
    fprintf(out, "  %-20s %11s %11s %8s\n", "kernel", "calls/step", "ms/step", "of step");
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) {
        if (p[k].calls == 0.0) continue;
        double ms = 1e3 * p[k].seconds / steps;
        fprintf(out, "  %-20s %11.1f %11.3f %7.1f%%\n", kernel_kind_name((enum kernel_kind)k), p[k].calls / steps, ms,
                100.0 * p[k].seconds / steps / step);
        if (json)
            fprintf(json, "{\"type\":\"kernel\",\"rank\":0,\"kind\":\"%s\",\"calls_per_step\":%.1f,\"ms_per_step\":%.6f}\n",
                    kernel_kind_name((enum kernel_kind)k), p[k].calls / steps, ms);
    }
    fprintf(out, "  %-20s %11s %11.3f %7.1f%%\n", "kernels", "", 1e3 * profiled / steps, 100.0 * profiled / steps / step);
    fprintf(out, "  %-20s %11s %11.3f %7.1f%%  buffer operations (widen, narrow, copy, norms), collectives, host work\n",
            "the rest", "", 1e3 * (step - profiled / steps), 100.0 * (1.0 - profiled / steps / step));
    if (json) fflush(json);
}
