/* Token + learned position embedding. */
#include "layers.h"

void encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C) {
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float *tok = wte + (size_t)inp[bt] * C;
        const float *pos = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++) o[c] = tok[c] + pos[c];
    }
}

/* Serial on purpose: two positions may carry the same token, so rows of
 * dwte would race. The loop is B*T*C adds, negligible next to the GEMMs. */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C;
        float *dtok = dwte + (size_t)inp[bt] * C;
        float *dpos = dwpe + (size_t)(bt % T) * C;
        for (int c = 0; c < C; c++) {
            dtok[c] += d[c];
            dpos[c] += d[c];
        }
    }
}
