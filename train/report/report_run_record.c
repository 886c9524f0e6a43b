/* The run's header: machine, BLAS kernel, GEMM library and peak (run_record.h). */
#include <stdlib.h>

#include "run_record.h"

#include "onednn_gemms.h"

void run_record_describe_machine(struct run_record *r) {
    machine_cpu_model(r->cpu, sizeof r->cpu);
    r->isa = machine_cpu_isa();
    machine_blas_info(&r->blas);
}

void run_record_describe_gemms(struct run_record *r, const struct exec_ctx *fc, enum dtype gemm_dtype) {
    r->gemm_dtype = gemm_dtype;
    if (r->on_gpu) {
        snprintf(r->gemm_library, sizeof r->gemm_library, "cuBLAS");
        snprintf(r->gemm_version, sizeof r->gemm_version, "-");
        snprintf(r->gemm_kernel, sizeof r->gemm_kernel, "%s", gemm_dtype == DTYPE_BF16 ? "tensor cores" : "fp32 (no TF32)");
    } else if (fc->onednn) {
        snprintf(r->gemm_library, sizeof r->gemm_library, "oneDNN");
        onednn_version_string(r->gemm_version, sizeof r->gemm_version);
        snprintf(r->gemm_kernel, sizeof r->gemm_kernel, "%s", onednn_gemms_kernel(fc->onednn));
    } else {
        snprintf(r->gemm_library, sizeof r->gemm_library, "%s", r->blas.library);
        snprintf(r->gemm_version, sizeof r->gemm_version, "%s", r->blas.version);
        snprintf(r->gemm_kernel, sizeof r->gemm_kernel, "%ssgemm %s",
                 fc->bf16_reference ? "reference bf16 GEMM: operands rounded to bf16, " : "", r->blas.corename);
    }
}

void run_record_describe_threading(struct run_record *r) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    snprintf(r->omp_wait_policy, sizeof r->omp_wait_policy, "%s", policy ? policy : "");
    snprintf(r->gomp_spincount, sizeof r->gomp_spincount, "%s", spin ? spin : "");
}

const char *run_record_peak_source(const struct run_record *r) {
    if (!r->peak_measured) return "peak_flops from the config";
    if (!r->on_gpu) return r->peak_gemm ? "measured bf16 GEMM, the dtype the GEMMs run in" : "measured FMA microbenchmark";
    return r->gpu_peak.spec_bf16 > 0 ? "data sheet, dense bf16"
                                     : "measured bf16 GEMM: the GPU is not in the data-sheet table";
}

void run_record_print(FILE *out, const struct run_record *r) {
    fprintf(out, "machine: %s (%s) | BLAS: %s %s (%s), kernel %s (%s)\n", r->cpu, isa_name(r->isa), r->blas.library,
            r->blas.version, r->blas.threading, r->blas.corename, isa_name(blas_kernel_isa(r->blas.corename)));
    fprintf(out, "GEMMs: %s operands, fp32 accumulation | %s %s, kernel %s\n", dtype_name(r->gemm_dtype),
            r->gemm_library, r->gemm_version, r->gemm_kernel);
    if (r->on_gpu) {
        const struct device_peak *g = &r->gpu_peak;
        fprintf(out, "gpu: %s | peak (MFU's): %.1f TFLOP/s per rank (%s) | measured cuBLAS GEMM 8192^3: bf16 %.1f "
                     "TFLOP/s, fp32 (no TF32) %.1f TFLOP/s\n",
                r->gpu, r->peak_flops / 1e12, run_record_peak_source(r), g->gemm_bf16 / 1e12, g->gemm_fp32 / 1e12);
        return;
    }
    if (!r->peak_measured) {
        fprintf(out, "peak: %.1f GFLOP/s per rank (peak_flops from the config)\n", r->peak_flops / 1e9);
        return;
    }
    const struct peak_result *p = &r->peak;
    fprintf(out,
            "peak: %.1f GFLOP/s per rank (measured: %s%s x %d thread%s, best of %d trials; median %.1f, min %.1f, "
            "spread %.1f%%)\n",
            p->best / 1e9, p->kernel, r->peak_gemm ? "" : " FMA", p->threads, p->threads == 1 ? "" : "s", p->trials, p->median / 1e9,
            p->min / 1e9, 100.0 * peak_spread(p));
}

static double cores_free(const struct run_record *r) { return r->cores - r->cores_busy; }

void run_record_print_threads(FILE *out, const struct run_record *r) {
    fprintf(out, "threading: %d OpenMP thread%s per rank, wait policy %s%s, spin count %s%s; ", r->threads,
            r->threads == 1 ? "" : "s", r->omp_wait_policy[0] ? "OMP_WAIT_POLICY=" : "", 
            r->omp_wait_policy[0] ? r->omp_wait_policy : "libgomp's default", r->gomp_spincount[0] ? "GOMP_SPINCOUNT=" : "",
            r->gomp_spincount[0] ? r->gomp_spincount : "libgomp's default");
    fprintf(out, "%s (%s build)%s on the same pool", r->blas.library, r->blas.threading,
            r->gemm_dtype == DTYPE_BF16 && !r->on_gpu ? " and oneDNN" : "");
    if (r->cores_busy >= 0)
        fprintf(out, " | cores: %d, %.1f free at start-up (%.1f busy with other processes)", r->cores,
                cores_free(r), r->cores_busy);
    else fprintf(out, " | cores: %d (free cores not measured)", r->cores);
    if (r->team_follows) fprintf(out, " | team: follows the free cores between steps, 1 to %d threads\n", r->threads);
    else fprintf(out, " | team: %d threads, fixed (%s)\n", r->threads, r->team_fixed_why);
}

bool run_record_warn(FILE *out, const struct run_record *r) {
    bool warned = false;
    const char *coretype = blas_suggested_coretype(r->blas.corename, r->isa);
    if (coretype) {
        fprintf(out,
                "warning: %s %s runs its %s kernels (no FMA) on a CPU with %s: every GEMM runs several times slower; "
                "OPENBLAS_CORETYPE=%s selects the kernels that match this CPU\n",
                r->blas.library, r->blas.version, r->blas.corename, isa_name(r->isa), coretype);
        warned = true;
    }
    int fit = machine_threads_that_fit(r->threads, r->cores, r->cores_busy);
    if (fit < r->threads) {
        fprintf(out,
                "warning: %d threads per rank, but other processes kept %.1f of the %d cores busy at start-up "
                "(%.1f free): a thread that shares its core holds up the others at every parallel region; "
                "%s %d%s\n",
                r->threads, r->cores_busy, r->cores, cores_free(r),
                r->team_follows ? "the run follows the free cores between steps, starting on" : "--threads", fit,
                r->team_follows ? (fit == 1 ? " thread" : " threads") : " fits what was free");
        warned = true;
    }
    return warned;
}

/* A JSON string's contents: quote and backslash escaped, control
 * characters (none expected in these fields) made spaces. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void field(FILE *f, const char *name, const char *value) {
    fprintf(f, ",\"%s\":", name);
    json_string(f, value);
}

void run_record_json(FILE *json, const struct run_record *r) {
    fprintf(json, "{\"type\":\"run\",\"world_size\":%d,\"threads\":%d", r->world_size, r->threads);
    field(json, "cpu_model", r->cpu);
    field(json, "cpu_isa", isa_name(r->isa));
    field(json, "blas_library", r->blas.library);
    field(json, "blas_version", r->blas.version);
    field(json, "blas_corename", r->blas.corename);
    field(json, "blas_kernel_isa", isa_name(blas_kernel_isa(r->blas.corename)));
    field(json, "blas_threading", r->blas.threading);
    field(json, "gemm_dtype", dtype_name(r->gemm_dtype));
    field(json, "gemm_library", r->gemm_library);
    field(json, "gemm_version", r->gemm_version);
    field(json, "gemm_kernel", r->gemm_kernel);
    fprintf(json, ",\"peak_flops\":%.6e", r->peak_flops);
    field(json, "peak_source", !r->peak_measured ? "config" : r->on_gpu && r->gpu_peak.spec_bf16 > 0 ? "data sheet" : "measured");
    if (r->on_gpu) {
        field(json, "gpu", r->gpu);
        fprintf(json, ",\"gpu_spec_bf16\":%.6e,\"gpu_gemm_bf16\":%.6e,\"gpu_gemm_fp32\":%.6e", r->gpu_peak.spec_bf16,
                r->gpu_peak.gemm_bf16, r->gpu_peak.gemm_fp32);
    }
    if (r->peak_measured && !r->on_gpu) {
        field(json, "peak_kernel", r->peak.kernel);
        field(json, "peak_probe", r->peak_gemm ? "bf16 gemm" : "fp32 fma");
        fprintf(json, ",\"peak_trials\":%d,\"peak_flops_median\":%.6e,\"peak_flops_min\":%.6e,\"peak_spread\":%.5f",
                r->peak.trials, r->peak.median, r->peak.min, peak_spread(&r->peak));
    }
    field(json, "omp_wait_policy", r->omp_wait_policy);
    field(json, "gomp_spincount", r->gomp_spincount);
    fprintf(json, ",\"cores\":%d", r->cores);
    if (r->cores_busy >= 0) fprintf(json, ",\"cores_busy_at_start\":%.2f", r->cores_busy);
    fprintf(json, ",\"team_follows_load\":%s", r->team_follows ? "true" : "false");
    if (!r->team_follows) field(json, "team_fixed_why", r->team_fixed_why);
    fprintf(json, "}\n");
    fflush(json);
}
