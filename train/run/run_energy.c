/* The run's energy (train/run/run.h: trainer_open_energy and
 * trainer_step_energy; docs/ENERGY.md). A meter counts a whole device: a
 * host's RAPL packages whatever ranks run there, a GPU's NVML counter
 * whatever processes share it (tests/cuda/one_gpu_rank.sh puts two ranks
 * on one). So each rank names its meter by host and device, and only the
 * lowest world rank of each name counts it: summed over the world, every
 * device is counted once. The sums go through grid_sum_uncounted (the
 * grid's own collectives, off the books, as the step's agreement does). */
#include "run.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"

/* This rank's meter's name: its host, and the GPU's bus id on a GPU. */
static uint32_t meter_key(const struct trainer *tr) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint32_t k = crc32c(0, host, strlen(host));
    const char *device = tr->space == MEM_DEVICE ? tr->dev.pci_bus_id : "cpu";
    return crc32c(k, device, strlen(device) + 1);
}

/* The planner's P (train/theory/theory_flops.c: theory_energy_joules):
 * --watts, else a GPU's enforced power limit as NVML reports it; a CPU
 * has no such figure here (RAPL's power limits are a firmware's caps, not
 * the draw the planner means), so none. */
static void planner_watts(struct trainer *tr) {
    if (tr->cfg->watts > 0) {
        tr->watts = tr->cfg->watts;
        snprintf(tr->watts_source, sizeof tr->watts_source, "--watts");
    } else if (tr->energy.source == ENERGY_NVML && tr->energy.limit_watts > 0) {
        tr->watts = tr->energy.limit_watts;
        snprintf(tr->watts_source, sizeof tr->watts_source, "the GPU's enforced power limit (NVML)");
    }
}

void trainer_open_energy(struct trainer *tr) {
    if (tr->space == MEM_DEVICE && tr->dev.pci_bus_id[0]) energy_open_nvml(&tr->energy, tr->dev.pci_bus_id);
    else if (tr->space == MEM_DEVICE)
        snprintf(tr->energy.why, sizeof tr->energy.why, "the GPU's PCI bus id is unknown (cudaDeviceGetPCIBusId)");
    else energy_open_rapl(&tr->energy, ENERGY_POWERCAP_ROOT);
    planner_watts(tr);
    /* every rank's key at its index, summed over the grid: an all-gather
     * through the one sum every backend has (a CRC32C is exact in a double) */
    int world = tr->grid->world_size, me = tr->grid->world_rank;
    double *keys = calloc((size_t)world, sizeof *keys);
    if (!keys) abort(); /* a few bytes a rank, once */
    keys[me] = meter_key(tr);
    grid_sum_uncounted(tr->grid, keys, world);
    tr->energy_devices = 0;
    for (int r = 0; r < world; r++) {
        bool first = true;
        for (int q = 0; q < r && first; q++) first = keys[q] != keys[r];
        tr->energy_devices += first;
        if (r == me) tr->energy_owner = first;
    }
    free(keys);
    /* the steps carry joules only when every counted meter reads */
    double missing = tr->energy_owner && !energy_available(&tr->energy) ? 1.0 : 0.0;
    grid_sum_uncounted(tr->grid, &missing, 1);
    tr->energy_world = missing == 0.0;
}

double trainer_step_energy(struct trainer *tr, double start_joules) {
    if (!tr->energy_world) return NAN;
    bool read = energy_read(&tr->energy) == 0;
    double v[2] = {tr->energy_owner && read ? tr->energy.joules - start_joules : 0.0,
                   tr->energy_owner && !read ? 1.0 : 0.0};
    if (tr->grid->world_size > 1) grid_sum_uncounted(tr->grid, v, 2);
    if (v[1] > 0) { /* a meter stopped (its reason on its rank's meter): no more joules for the run */
        tr->energy_world = false;
        return NAN;
    }
    tr->energy_run_j += v[0];
    tr->energy_steps++;
    return v[0];
}
