/* --gpu_path v2's embedding on the bf16 data path
 * (model/cuda/v2/embedding_bf16.cu) against the CPU's forms
 * (model/cpu/encoder.c), bit for bit: the forward's widened rows (into a
 * poisoned output, its guard checked) and the bucketed backward's dwte
 * and dwpe (accumulated onto random values, in the CPU's position order:
 * embedding_buckets.h), the whole vocabulary and a slice of it, shapes
 * off the 256-thread blocks and the 128-channel groups, few tokens (long
 * buckets). Also the dispatch: layers.h's names on device memory with a
 * v2 counter reach the same kernels. Without a GPU: skipped. Compiled,
 * not run on a GPU so far. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../model/cuda/cuda_device.h"
#include "../../model/cuda/layers_cuda.h"
#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "dtype.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"

static bf16 *narrowed(const float *x, size_t n) {
    bf16 *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(x[i]);
    return h;
}

static void test_embedding_bf16(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 257, 5}, {3, 129, 255, 50}, {4, 64, 768, 1000}, {2, 77, 129, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3], BT = B * T;
        float *wte_f = rand_f32(V * C, 31, 1.0f), *dout_f = rand_f32(BT * C, 32, 1.0f);
        float *dwte = rand_f32(V * C, 33, 1.0f), *dwpe = rand_f32(T * C, 34, 1.0f), *want = malloc(F(BT * C));
        bf16 *wte = narrowed(wte_f, (size_t)(V * C)), *dout = narrowed(dout_f, (size_t)(BT * C));
        int32_t *inp = rand_tokens(BT, 40 + s, (int32_t)V); /* few tokens: many repeats */
        bf16 *d_wte = dev_from(wte, (size_t)(V * C) * sizeof *wte), *d_dout = dev_from(dout, (size_t)(BT * C) * sizeof *dout);
        int32_t *d_inp = dev_from(inp, I(BT));
        struct exec_ctx v2 = {.space = MEM_DEVICE, .device = cuda_backend_traits(GPU_PATH_V2)};
        const int64_t slices[][2] = {{0, V}, {V / 3, V - V / 3 - V / 4}}; /* v0, rows */
        for (int k = 0; k < 2; k++) {
            int64_t v0 = slices[k][0], rows = slices[k][1];
            for (int via_dispatch = 0; via_dispatch < 2; via_dispatch++) {
                float *d_out = dev_poisoned(F(BT * C));
                if (via_dispatch) embedding_rows_forward_bf16(d_out, d_inp, d_wte + v0 * C, v0, rows, BT, C, &v2);
                else embedding_rows_forward_bf16_cuda(d_out, d_inp, d_wte + v0 * C, v0, rows, BT, C, NULL);
                embedding_rows_forward_bf16_cpu(want, inp, wte + v0 * C, v0, rows, BT, C, NULL);
                float *got = back(d_out, F(BT * C), "embedding_rows_forward_bf16");
                expect_bits("embedding_rows_forward_bf16", want, got, BT * C);
                free(got);

                float *d_dwte = dev_from(dwte, F(rows * C)), *d_dwpe = dev_from(dwpe, F(T * C));
                float *w_dwte = malloc(F(rows * C)), *w_dwpe = malloc(F(T * C));
                memcpy(w_dwte, dwte, F(rows * C));
                memcpy(w_dwpe, dwpe, F(T * C));
                if (via_dispatch)
                    embedding_rows_backward_bf16(d_dwte, d_dwpe, d_dout, d_inp, v0, rows, B, T, C, &v2);
                else embedding_rows_backward_bf16_cuda(d_dwte, d_dwpe, d_dout, d_inp, v0, rows, B, T, C, NULL);
                embedding_rows_backward_bf16_cpu(w_dwte, w_dwpe, dout, inp, v0, rows, B, T, C, NULL);
                assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
                got = back(d_dwte, F(rows * C), "embedding_rows_backward_bf16 dwte");
                expect_bits("embedding_rows_backward_bf16 dwte", w_dwte, got, rows * C);
                free(got);
                got = back(d_dwpe, F(T * C), "embedding_rows_backward_bf16 dwpe");
                expect_bits("embedding_rows_backward_bf16 dwpe", w_dwpe, got, T * C);
                free(got), free(w_dwte), free(w_dwpe);
            }
        }
        printf("  B %lld T %lld C %lld V %lld: forward and backward bit for bit (whole and slice, direct and "
               "dispatched)\n", (long long)B, (long long)T, (long long)C, (long long)V);
        cudaFree(d_wte), cudaFree(d_dout), cudaFree(d_inp);
        free(wte_f), free(dout_f), free(dwte), free(dwpe), free(want), free(wte), free(dout), free(inp);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
