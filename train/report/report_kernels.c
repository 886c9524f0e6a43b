/* Where a step's kernel time went (train/report/report.h: report_kernels), from
 * the profile the dispatch keeps in the run's flop counter
 * (include/counters.h), and what the dtype conversion passes move
 * (include/conversions.h). */
#include "report.h"

/* Whether kind k is a conversion pass (its bytes are printed). */
static bool conversion(enum kernel_kind k) { return k >= KERNEL_WIDEN && k <= KERNEL_ACCUMULATE; }

void report_kernels(FILE *out, FILE *json, const struct trainer *tr, int steps) {
    const struct kernel_time *p = tr->flops.profile;
    double profiled = 0.0, calls = 0.0, moved = 0.0;
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) profiled += p[k].seconds, calls += p[k].calls, moved += p[k].bytes;
    if (steps <= 0 || (calls == 0.0 && moved == 0.0)) return;
    double step = tr->train_seconds / steps;
    fprintf(out, "\nKernel time per optimizer step on rank 0 (%s), averaged over %d steps: each call's %s time; "
                 "conversion passes with the bytes they read and write\n", tr->dev.name, steps,
            tr->flops.space == MEM_DEVICE ? "device (CUDA events; the update rules: wall time, synchronized)" : "wall");
    fprintf(out, "  %-20s %11s %11s %8s %14s\n", "kernel", "calls/step", "ms/step", "of step", "MB/step");
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) {
        if (p[k].calls == 0.0 && p[k].bytes == 0.0) continue;
        double ms = 1e3 * p[k].seconds / steps, mb = p[k].bytes / steps / 1e6;
        fprintf(out, "  %-20s %11.1f %11.3f %7.1f%%", kernel_kind_name((enum kernel_kind)k), p[k].calls / steps, ms,
                100.0 * p[k].seconds / steps / step);
        if (conversion((enum kernel_kind)k)) fprintf(out, " %14.3f", mb);
        fputc('\n', out);
        if (json) {
            fprintf(json, "{\"type\":\"kernel\",\"rank\":0,\"kind\":\"%s\",\"calls_per_step\":%.1f,\"ms_per_step\":%.6f",
                    kernel_kind_name((enum kernel_kind)k), p[k].calls / steps, ms);
            if (conversion((enum kernel_kind)k)) fprintf(json, ",\"bytes_per_step\":%.0f", p[k].bytes / steps);
            fputs("}\n", json);
        }
    }
    fprintf(out, "  %-20s %11s %11.3f %7.1f%%\n", "kernels", "", 1e3 * profiled / steps, 100.0 * profiled / steps / step);
    fprintf(out, "  %-20s %11s %11.3f %7.1f%%  buffer copies, norms, collectives, host work\n", "the rest", "",
            1e3 * (step - profiled / steps), 100.0 * (1.0 - profiled / steps / step));
    if (p[KERNEL_NARROW].bytes > 0.0 && tr->flops.onednn)
        fprintf(out, "  (narrow's bytes include the bf16 GEMMs' own operand rounding, timed in the GEMM rows)\n");
    if (json) fflush(json);
}
