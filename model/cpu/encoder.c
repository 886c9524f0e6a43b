/* Token + learned position embedding. */
#include "act_io.h"
#include "layers_cpu.h"

void encoder_forward_cpu(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                         int64_t C) {
#pragma omp parallel for
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *tok = wte + (int64_t)inp[bt] * C;
        const float *pos = wpe + (bt % T) * C;
        float *o = out + bt * C;
        for (int64_t c = 0; c < C; c++) o[c] = tok[c] + pos[c];
    }
}

/* Serial on purpose: two positions may carry the same token, so rows of
 * dwte would race. The loop is B*T*C adds, negligible next to the GEMMs. */
void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                          int64_t C) {
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *d = dout + bt * C;
        float *dtok = dwte + (int64_t)inp[bt] * C;
        float *dpos = dwpe + (bt % T) * C;
        for (int64_t c = 0; c < C; c++) {
            dtok[c] += d[c];
            dpos[c] += d[c];
        }
    }
}

void embedding_rows_forward_cpu(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                                int64_t C, struct exec_ctx *fc) {
    (void)fc; /* a lookup: no FLOPs */
#pragma omp parallel for
    for (int64_t bt = 0; bt < BT; bt++) {
        int64_t r = (int64_t)inp[bt] - v0;
        float *o = out + bt * C;
        if (r >= 0 && r < rows) {
            const float *tok = wte + r * C;
            for (int64_t c = 0; c < C; c++) o[c] = tok[c];
        } else {
            for (int64_t c = 0; c < C; c++) o[c] = 0.0f; /* another rank's row */
        }
    }
}

void embedding_rows_forward_bf16_cpu(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                     int64_t BT, int64_t C, struct exec_ctx *fc) {
    (void)fc; /* a lookup: no FLOPs */
#pragma omp parallel for
    for (int64_t bt = 0; bt < BT; bt++) {
        int64_t r = (int64_t)inp[bt] - v0;
        float *o = out + bt * C;
        const bf16 *tok = r >= 0 && r < rows ? wte + r * C : NULL;
        for (int64_t c = 0; c < C; c++) o[c] = tok ? bf16_to_f32(tok[c]) : 0.0f; /* 0: another rank's row */
    }
}

void positions_add_cpu(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    (void)fc; /* the caller counts the adds (model/gpt.c) */
#pragma omp parallel for
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *pos = wpe + (bt % T) * C;
        float *o = out + bt * C;
        for (int64_t c = 0; c < C; c++) o[c] += pos[c];
    }
}

/* Serial, as encoder_backward, for the same reason; dout read as D_T
 * (act_io.h: a bf16 gradient widened exactly). */
#define EMBEDDING_ROWS_BACKWARD(name, D_T)                                                                       \
    void name(float *dwte, float *dwpe, const D_T *dout, const int32_t *inp, int64_t v0, int64_t rows, int64_t B, \
              int64_t T, int64_t C, struct exec_ctx *fc) {                                                   \
        (void)fc; /* the caller counts the adds (model/gpt.c) */                                                 \
        for (int64_t bt = 0; bt < B * T; bt++) {                                                                 \
            const D_T *d = dout + bt * C;                                                                        \
            float *dpos = dwpe ? dwpe + (bt % T) * C : NULL; /* NULL: no position table (llama) */             \
            int64_t r = (int64_t)inp[bt] - v0;                                                                   \
            float *dtok = r >= 0 && r < rows ? dwte + r * C : NULL;                                              \
            for (int64_t c = 0; c < C; c++) {                                                                    \
                if (dtok) dtok[c] += ACT_LD(d, c);                                                               \
                if (dpos) dpos[c] += ACT_LD(d, c);                                                               \
            }                                                                                                    \
        }                                                                                                        \
    }

EMBEDDING_ROWS_BACKWARD(embedding_rows_backward_cpu, float)
EMBEDDING_ROWS_BACKWARD(embedding_rows_backward_bf16_cpu, bf16)
