/* Peak dense bf16 FLOP/s and memory of common devices (vendor data
 * sheets; without sparsity). The A100 and H100/H200 peaks are the ones
 * the MFU literature divides by (PaLM App. B, Megatron). */
#include <string.h>

#include "theory.h"

/* Looked up in this order: the first `gpu` part a CUDA name holds wins
 * (every A100 has the same peak, so "A100" stands for both sizes). */
static const struct theory_device DEVICES[] = {
    {"a100-40gb", 312e12, 40e9, NULL},
    {"a100", 312e12, 80e9, "A100"},                  /* A100 SXM 80 GB */
    {"h100", 989e12, 80e9, "H100 80GB HBM3"},        /* H100 SXM */
    {"h100-pcie", 756e12, 80e9, "H100 PCIe"},
    {"h100-nvl", 835e12, 94e9, "H100 NVL"},
    {"h200", 989e12, 141e9, "H200"},                 /* H200 SXM: H100's compute, more HBM */
    {"tpu-v5p", 4.59e14, 95e9, NULL},                /* the seeds' LLaMA-3 example (96 GB there) */
};

const struct theory_device *theory_device_find(const char *name) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (strcmp(DEVICES[i].name, name) == 0) return &DEVICES[i];
    return NULL;
}

const struct theory_device *theory_device_of_gpu(const char *cuda_name) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (DEVICES[i].gpu && strstr(cuda_name, DEVICES[i].gpu)) return &DEVICES[i];
    return NULL;
}

const char *theory_device_names(void) { return "a100-40gb, a100, h100, h100-pcie, h100-nvl, h200, tpu-v5p"; }
