/* The run's energy beside the planner's estimate (train/report/report.h:
 * report_energy; docs/ENERGY.md): the joules every counted meter read over
 * the steps, per step, per token and as model TFLOP per joule, and E = t x
 * P for the same steps' time (train/theory/theory_flops.c), or why either
 * is missing. */
#include "report.h"

#include "../theory/theory.h"

/* A JSON string's characters: the reasons come from the system (paths,
 * dlerror), so quotes, backslashes and control bytes are escaped. */
static void json_text(FILE *json, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(json, "\\%c", ch);
        else if (ch < 0x20) fprintf(json, "\\u%04x", ch);
        else fputc(ch, json);
    }
}

void report_energy_line(FILE *out, const struct trainer *tr) {
    if (tr->energy_world)
        fprintf(out, "energy: %s, read around every step (%d meter%s counted over the world)\n", tr->energy.what,
                tr->energy_devices, tr->energy_devices == 1 ? "" : "s");
    else fprintf(out, "energy: not available here (%s)\n", tr->energy.why[0] ? tr->energy.why : "another rank's meter");
}

void report_energy(FILE *out, FILE *json, const struct trainer *tr, int steps) {
    if (steps <= 0) return;
    const struct config *c = tr->cfg;
    double tokens = (double)c->micro_batch * c->seq_len * c->grad_accum * tr->grid->dp;
    double job_flops = tr->model_flops_per_step * tr->grid->world_size; /* model FLOPs (6N + 12LTC), the job's */
    double seconds = tr->train_seconds / steps;
    double planned = tr->watts > 0 ? theory_energy_joules(seconds, tr->energy_devices, tr->watts) : 0.0;
    int n = tr->energy_steps;
    fprintf(out, "\nEnergy per optimizer step");
    if (n > 0) {
        double step = tr->energy_run_j / n;
        fprintf(out, " over %d steps (%s; %d meter%s): %.4g J a step, %.4g J a token, %.4g model TFLOP per J\n", n,
                tr->energy.what, tr->energy_devices, tr->energy_devices == 1 ? "" : "s", step, step / tokens,
                job_flops / step / 1e12);
    } else {
        fprintf(out, ": not available here (%s)\n", tr->energy.why[0] ? tr->energy.why : "another rank's meter");
    }
    if (planned > 0) {
        fprintf(out, "  planner's E = t x P: %.4g J a step (%.1f ms x %d device%s x %.0f W, %s)", planned, 1e3 * seconds,
                tr->energy_devices, tr->energy_devices == 1 ? "" : "s", tr->watts, tr->watts_source);
        if (n > 0) fprintf(out, "; measured / planned %.3f", tr->energy_run_j / n / planned);
        fputc('\n', out);
    } else {
        fprintf(out, "  planner's E = t x P: no P for the %s (give --watts W per device)\n",
                tr->space == MEM_DEVICE ? "GPU: NVML gave no power limit" : "CPU: its power is not in the device table");
    }
    if (!json) return;
    fprintf(json, "{\"type\":\"energy\",\"steps\":%d,\"meters\":%d,\"source\":\"", n, tr->energy_devices);
    json_text(json, n > 0 ? tr->energy.what : "");
    fprintf(json, "\",\"why_not\":\"");
    json_text(json, n > 0 ? "" : tr->energy.why);
    if (n > 0)
        fprintf(json, "\",\"joules_per_step\":%.6g,\"joules_per_token\":%.6g,\"tflop_per_joule\":%.6g",
                tr->energy_run_j / n, tr->energy_run_j / n / tokens, job_flops / (tr->energy_run_j / n) / 1e12);
    else fprintf(json, "\",\"joules_per_step\":null,\"joules_per_token\":null,\"tflop_per_joule\":null");
    if (planned > 0) fprintf(json, ",\"planned_joules_per_step\":%.6g,\"watts\":%.6g}\n", planned, tr->watts);
    else fprintf(json, ",\"planned_joules_per_step\":null,\"watts\":null}\n");
    fflush(json);
}
