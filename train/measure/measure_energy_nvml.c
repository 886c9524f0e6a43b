/* A GPU's energy from NVML (train/measure/energy.h): libnvidia-ml.so.1, which
 * the NVIDIA driver installs, opened at run time, so neither build links
 * against it and a host without the driver only loses the meter. The few
 * NVML calls are declared here as NVML's header (nvml.h, CUDA toolkit)
 * gives them: nvmlReturn_t is an int (0 NVML_SUCCESS) and nvmlDevice_t an
 * opaque pointer. The device is found by its PCI bus id, which is the same
 * GPU whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER make of the
 * indices. */
#include "energy.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_bus_fn)(const char *pci_bus_id, void **device);
typedef int (*nvml_limit_fn)(void *device, unsigned int *milliwatts);
typedef const char *(*nvml_error_fn)(int result);

/* A symbol of the library as the function type it is (POSIX's dlsym
 * returns an object pointer). */
static void *symbol(void *lib, const char *name) { return dlsym(lib, name); }

/* The meter off with the reason; detail may be the library's own string,
 * so it is copied before the library closes. */
static int nvml_off(struct energy_meter *m, const char *why, const char *detail) {
    char said[ENERGY_WHY_LEN];
    snprintf(said, sizeof said, "%s%s", why, detail ? detail : "");
    energy_close(m);
    *m = (struct energy_meter){.source = ENERGY_NONE};
    memcpy(m->why, said, sizeof said);
    return -1;
}

int energy_open_nvml(struct energy_meter *m, const char *pci_bus_id) {
    *m = (struct energy_meter){.source = ENERGY_NONE};
    m->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) return nvml_off(m, "libnvidia-ml.so.1 (the NVIDIA driver's NVML) cannot be opened: ", dlerror());
    nvml_init_fn init;
    nvml_by_bus_fn by_bus;
    nvml_limit_fn limit;
    nvml_error_fn error;
    *(void **)&init = symbol(m->lib, "nvmlInit_v2");
    *(void **)&by_bus = symbol(m->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&limit = symbol(m->lib, "nvmlDeviceGetEnforcedPowerLimit");
    *(void **)&error = symbol(m->lib, "nvmlErrorString");
    *(void **)&m->nvml_energy = symbol(m->lib, "nvmlDeviceGetTotalEnergyConsumption");
    *(void **)&m->nvml_shutdown = symbol(m->lib, "nvmlShutdown");
    if (!init || !by_bus || !error || !m->nvml_energy || !m->nvml_shutdown)
        return nvml_off(m, "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
                           "nvmlDeviceGetTotalEnergyConsumption or nvmlShutdown", "");
    int e = init();
    if (e != 0) {
        m->nvml_shutdown = NULL; /* nothing to shut down */
        return nvml_off(m, "nvmlInit: ", error(e));
    }
    e = by_bus(pci_bus_id, &m->device);
    if (e != 0) {
        char what[96];
        snprintf(what, sizeof what, "NVML finds no GPU at PCI bus id %.32s: ", pci_bus_id);
        return nvml_off(m, what, error(e));
    }
    e = m->nvml_energy(m->device, &m->last_mj);
    if (e != 0) /* NVML_ERROR_NOT_SUPPORTED before Volta */
        return nvml_off(m, "nvmlDeviceGetTotalEnergyConsumption: ", error(e));
    unsigned int mw = 0;
    if (limit && limit(m->device, &mw) == 0) m->limit_watts = mw * 1e-3;
    m->source = ENERGY_NVML;
    snprintf(m->what, sizeof m->what, "NVML total energy, GPU %.32s", pci_bus_id);
    return 0;
}

void energy_close(struct energy_meter *m) {
    if (m->lib) {
        if (m->nvml_shutdown) m->nvml_shutdown();
        dlclose(m->lib);
    }
    m->lib = m->device = NULL;
    m->nvml_energy = NULL;
    m->nvml_shutdown = NULL;
}
