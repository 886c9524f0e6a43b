/* Energy counters, read around every step (train/measure/measure_energy.c,
 * measure_energy_nvml.c; docs/ENERGY.md):
 *   RAPL  a CPU host's package domains (and their DRAM subdomains) through
 *         the Linux powercap tree: ROOT/intel-rapl:N/energy_uj, a counter in
 *         microjoules that wraps to 0 past max_energy_range_uj
 *   NVML  a GPU's total-energy counter (nvmlDeviceGetTotalEnergyConsumption,
 *         millijoules since the driver loaded; Volta and later), from
 *         libnvidia-ml.so.1 opened at run time, so both builds link without it
 * Where neither is there the meter says "not available here" and why (no
 * powercap tree, no package domain, energy_uj unreadable: root-only since
 * Linux 5.10, no NVML, a GPU without the counter). A meter is read, never
 * trusted blindly: a failed read turns it off with the reason. */
#ifndef SHARDLAB_ENERGY_H
#define SHARDLAB_ENERGY_H

#include <stdbool.h>
#include <stdint.h>

enum energy_source { ENERGY_NONE, ENERGY_RAPL, ENERGY_NVML };

enum { ENERGY_MAX_DOMAINS = 16, ENERGY_PATH_LEN = 512, ENERGY_WHY_LEN = 320, ENERGY_WHAT_LEN = 160 };

/* The powercap tree Linux exposes (the reader takes any root: tests build a
 * fake one). */
#define ENERGY_POWERCAP_ROOT "/sys/class/powercap"

struct energy_meter {
    enum energy_source source;
    char what[ENERGY_WHAT_LEN]; /* what it reads: "RAPL package-0, dram" / "NVML, GPU 0000:1B:00.0" */
    char why[ENERGY_WHY_LEN];   /* source ENERGY_NONE: the reason, for "not available here (why)" */
    double joules;              /* since the meter opened, wraps unfolded */
    /* RAPL: one energy_uj file per domain, its wrap range and last value */
    int n;
    char path[ENERGY_MAX_DOMAINS][ENERGY_PATH_LEN];
    uint64_t range_uj[ENERGY_MAX_DOMAINS], last_uj[ENERGY_MAX_DOMAINS];
    /* NVML: the library, the device and the two calls the meter makes
     * (measure_energy_nvml.c's types, kept opaque here) */
    void *lib, *device;
    int (*nvml_energy)(void *device, unsigned long long *millijoules);
    int (*nvml_shutdown)(void);
    unsigned long long last_mj;
    double limit_watts; /* NVML: the board's enforced power limit (0: unknown), the planner's P on a GPU */
};

/* RAPL under root (ENERGY_POWERCAP_ROOT on a real host): every top-level
 * "intel-rapl:N" zone whose name is package-N, and each such zone's
 * subzones named dram. Reads each once. 0, or -1 with m->source
 * ENERGY_NONE and m->why saying why. */
int energy_open_rapl(struct energy_meter *m, const char *root);
/* NVML's counter of the GPU at pci_bus_id (cudaDeviceGetPCIBusId's form,
 * "0000:1B:00.0"). 0, or -1 as above. */
int energy_open_nvml(struct energy_meter *m, const char *pci_bus_id);
/* The step's reading: m->joules brought up to now (each domain's delta,
 * unfolding a wrap: a value below the last one means the counter passed
 * its range). 0, or -1 when a read fails: the meter turns off (source
 * ENERGY_NONE, why set), and its joules stop counting. */
int energy_read(struct energy_meter *m);
/* The wrapped counter's step: now - last, or (range - last) + now when the
 * counter wrapped past range. */
uint64_t energy_counter_delta(uint64_t last, uint64_t now, uint64_t range);
void energy_close(struct energy_meter *m);

static inline bool energy_available(const struct energy_meter *m) { return m->source != ENERGY_NONE; }

#endif
