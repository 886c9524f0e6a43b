/* Peak dense bf16 FLOP/s, memory and link bandwidth of common devices
 * (vendor data sheets; without sparsity). The A100 and H100/H200 peaks are
 * the ones the MFU literature divides by (PaLM App. B, Megatron).
 * Memory: the data sheets' "80GB" of HBM is 80 GiB (nvidia-smi reports
 * 81,559 MiB usable on an H100 SXM), so each is GiB x THEORY_GIB.
 * Links: NVIDIA quotes NVLink as the sum of both directions ("900 GB/s"
 * on H100 SXM); the planner's link is one direction, half of that.
 * Between nodes: the DGX/HGX reference designs give each GPU its own
 * InfiniBand NIC (DGX H100/H200 user guide: 8 x ConnectX-7 NDR 400 Gb/s
 * = 400 GB/s per node, 50 GB/s per GPU each way; DGX A100: 8 x ConnectX-6
 * HDR 200 Gb/s, 25 GB/s per GPU). An NVLink bridge (H100 PCIe, H100 NVL)
 * joins pairs: beyond the pair, the same NDR NIC per GPU is assumed. A TPU
 * v5p pod's ICI spans every chip: one network (0). */
#include <string.h>

#include "theory.h"

#define GB_S 1e9 /* link bandwidths are quoted in decimal GB/s */
#define NDR_PER_GPU (400e9 / 8) /* one 400 Gb/s NDR InfiniBand port per GPU, bytes/s one way */
#define HDR_PER_GPU (200e9 / 8) /* one 200 Gb/s HDR port per GPU */
enum { HGX_GPUS = 8, BRIDGE_GPUS = 2 }; /* GPUs on one NVLink: an HGX board, a bridged pair */

/* Looked up in this order: the first `gpu` part a CUDA name holds wins
 * (every A100 has the same peak, so "A100" stands for both sizes). */
static const struct theory_device DEVICES[] = {
    /* A100 data sheet: 40 GB HBM2, NVLink 3 600 GB/s both ways */
    {"a100-40gb", 312e12, 40 * THEORY_GIB, 300 * GB_S, NULL, HDR_PER_GPU, HGX_GPUS},
    /* A100 SXM 80 GB HBM2e, NVLink 3 600 GB/s both ways */
    {"a100", 312e12, 80 * THEORY_GIB, 300 * GB_S, "A100", HDR_PER_GPU, HGX_GPUS},
    /* H100 SXM data sheet: 80 GB HBM3, NVLink 4 900 GB/s both ways */
    {"h100", 989e12, 80 * THEORY_GIB, 450 * GB_S, "H100 80GB HBM3", NDR_PER_GPU, HGX_GPUS},
    /* H100 PCIe: 80 GB HBM2e, NVLink bridge 600 GB/s both ways */
    {"h100-pcie", 756e12, 80 * THEORY_GIB, 300 * GB_S, "H100 PCIe", NDR_PER_GPU, BRIDGE_GPUS},
    /* H100 NVL: 94 GB HBM3, NVLink bridge 600 GB/s both ways */
    {"h100-nvl", 835e12, 94 * THEORY_GIB, 300 * GB_S, "H100 NVL", NDR_PER_GPU, BRIDGE_GPUS},
    /* H200 SXM data sheet: H100's compute, 141 GB HBM3e, NVLink 900 GB/s both ways */
    {"h200", 989e12, 141 * THEORY_GIB, 450 * GB_S, "H200", NDR_PER_GPU, HGX_GPUS},
    /* Cloud TPU v5p docs: 95 GiB HBM2e (the seeds round to 96 GB); ICI
     * 4.5e10 B/s per link one way (the seeds' LLaMA-3 example) */
    {"tpu-v5p", 4.59e14, 95 * THEORY_GIB, 4.5e10, NULL, 0, 0},
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
