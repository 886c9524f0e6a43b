/* RAPL energy through the Linux powercap tree (train/measure/energy.h), and the
 * reading every meter shares. Linux lists every RAPL zone flat under
 * /sys/class/powercap as intel-rapl:N (a package) and intel-rapl:N:M (its
 * subzones: core, uncore, dram), each with name, energy_uj and
 * max_energy_range_uj (the powercap sysfs ABI; AMD's Zen packages appear
 * under the same names). The packages and their DRAM are summed: core and
 * uncore are parts of the package's count, and psys (a client platform's
 * whole SoC) would count the packages again. */
#include "energy.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One unsigned decimal from a sysfs file: 0, or -1 with why filled. */
static int read_u64(const char *path, uint64_t *v, char why[ENERGY_WHY_LEN]) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, ENERGY_WHY_LEN, "%.256s: %s", path, strerror(errno));
        return -1;
    }
    char buf[64];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (e) {
        snprintf(why, ENERGY_WHY_LEN, "%.256s: %s", path, strerror(e));
        return -1;
    }
    buf[got] = '\0';
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf || errno || (*end && *end != '\n')) {
        snprintf(why, ENERGY_WHY_LEN, "%.256s: not a counter (\"%.16s\")", path, buf);
        return -1;
    }
    *v = x;
    return 0;
}

/* A zone's name file, newline dropped; "" where it cannot be read. */
static void read_name(const char *dir, char out[32]) {
    char path[ENERGY_PATH_LEN + 8];
    snprintf(path, sizeof path, "%s/name", dir);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(out, 32, f)) out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* intel-rapl:N or intel-rapl:N:M (not intel-rapl itself, nor the MMIO
 * interface intel-rapl-mmio:N, which is the same package counted again). */
static int is_rapl_zone(const struct dirent *d) { return strncmp(d->d_name, "intel-rapl:", 11) == 0; }

/* The meter off, with the reason (a and b may point into m->why). */
static int off(struct energy_meter *m, const char *fmt, const char *a, const char *b) {
    char why[ENERGY_WHY_LEN];
    snprintf(why, sizeof why, fmt, a, b);
    m->source = ENERGY_NONE;
    m->n = 0;
    memcpy(m->why, why, sizeof why);
    return -1;
}

int energy_open_rapl(struct energy_meter *m, const char *root) {
    *m = (struct energy_meter){.source = ENERGY_NONE};
    struct dirent **zones;
    int nz = scandir(root, &zones, is_rapl_zone, alphasort);
    if (nz < 0) return off(m, "%.256s: %s", root, strerror(errno));
    char names[ENERGY_WHAT_LEN] = "";
    int rc = 0;
    for (int i = 0; i < nz && rc == 0; i++) {
        char dir[ENERGY_PATH_LEN], name[32];
        snprintf(dir, sizeof dir, "%.400s/%.64s", root, zones[i]->d_name);
        read_name(dir, name);
        if (strncmp(name, "package", 7) != 0 && strcmp(name, "dram") != 0) continue;
        if (m->n == ENERGY_MAX_DOMAINS) continue; /* more sockets than any host this runs on */
        int k = m->n;
        char range[ENERGY_PATH_LEN + 24];
        snprintf(m->path[k], sizeof m->path[k], "%.400s/energy_uj", dir);
        snprintf(range, sizeof range, "%s/max_energy_range_uj", dir);
        if (read_u64(range, &m->range_uj[k], m->why) != 0 || read_u64(m->path[k], &m->last_uj[k], m->why) != 0) {
            rc = -1;
            break;
        }
        if (m->range_uj[k] == 0) {
            rc = off(m, "%.256s: a zero range%s", range, "");
            break;
        }
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", name);
        m->n++;
    }
    for (int i = 0; i < nz; i++) free(zones[i]);
    free(zones);
    if (rc != 0) return off(m, "%s%s", m->why, "");
    if (m->n == 0) return off(m, "no RAPL package zone (intel-rapl:N named package-N) under %.256s%s", root, "");
    m->source = ENERGY_RAPL;
    snprintf(m->what, sizeof m->what, "RAPL %.150s", names);
    return 0;
}

uint64_t energy_counter_delta(uint64_t last, uint64_t now, uint64_t range) {
    return now >= last ? now - last : (range - last) + now;
}

int energy_read(struct energy_meter *m) {
    if (m->source == ENERGY_RAPL) {
        double uj = 0.0;
        uint64_t now[ENERGY_MAX_DOMAINS];
        for (int k = 0; k < m->n; k++) {
            if (read_u64(m->path[k], &now[k], m->why) != 0) return off(m, "%s%s", m->why, "");
            if (now[k] > m->range_uj[k]) return off(m, "%.256s: %s", m->path[k], "a value past max_energy_range_uj");
            uj += (double)energy_counter_delta(m->last_uj[k], now[k], m->range_uj[k]);
        }
        for (int k = 0; k < m->n; k++) m->last_uj[k] = now[k];
        m->joules += uj * 1e-6;
        return 0;
    }
    if (m->source == ENERGY_NVML) {
        unsigned long long mj;
        int e = m->nvml_energy(m->device, &mj);
        if (e != 0) {
            char code[24];
            snprintf(code, sizeof code, "%d", e);
            energy_close(m);
            return off(m, "nvmlDeviceGetTotalEnergyConsumption failed (NVML error %s)%s", code, "");
        }
        /* a 64-bit count of millijoules since the driver loaded: no wrap in
         * practice; a smaller value means the driver reloaded, so it restarts */
        m->joules += mj >= m->last_mj ? (double)(mj - m->last_mj) * 1e-3 : 0.0;
        m->last_mj = mj;
        return 0;
    }
    return -1;
}
