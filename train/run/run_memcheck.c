/* The memory check before allocation (train/run/run_memcheck.h). */
#include "run_memcheck.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../theory/accounting.h"
#include "../report/report.h"

enum { PATH_LEN = 1024, CGROUP_LINE = 1024 };

/* A cgroup v1 "no limit" is the largest page-aligned 63-bit value; any
 * limit beyond an exabyte is no limit. */
#define NO_LIMIT_ABOVE 1e18

/* The first number after `key` in a "key value" file (meminfo, memory.stat);
 * < 0 when absent. */
static double keyed_value(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && (line[n] == ' ' || line[n] == ':' || line[n] == '\t')) {
            v = strtod(line + n + 1, NULL);
            break;
        }
    fclose(f);
    return v;
}

/* The single number in a file; < 0 when absent or "max" (v2's no limit). */
static double file_value(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = "";
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0) return -1;
    char *end;
    double v = strtod(buf, &end);
    return end == buf ? -1 : v;
}

/* This process's cgroup path for the v2 hierarchy ("0::PATH") or the v1
 * memory controller ("N:...memory...:PATH"); 0 when found. */
static int cgroup_path(const char *root, int version, char *out, size_t len) {
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[CGROUP_LINE];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        bool v2 = strncmp(line, "0:", 2) == 0 && c1[1] == '\0'; /* "0::PATH": hierarchy 0, no controllers */
        bool v1_memory = false;
        char *save = NULL;
        for (char *tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            v1_memory = v1_memory || strcmp(tok, "memory") == 0;
        if ((version == 2 && v2) || (version == 1 && v1_memory)) {
            snprintf(out, len, "%s", c2 + 1);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* The least room (limit - used + reclaimable cache) over the group and its
 * ancestors; < 0 when none of them is limited. */
static double cgroup_room(const char *root, int version) {
    char group[PATH_LEN];
    if (cgroup_path(root, version, group, sizeof group) != 0) return -1;
    const char *base = version == 2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory";
    const char *limit_file = version == 2 ? "memory.max" : "memory.limit_in_bytes";
    const char *used_file = version == 2 ? "memory.current" : "memory.usage_in_bytes";
    const char *cache_key = version == 2 ? "inactive_file" : "total_inactive_file";
    double room = -1;
    for (;;) {
        char dir[PATH_LEN * 2], path[PATH_LEN * 3];
        snprintf(dir, sizeof dir, "%s/%s%s", root, base, group);
        snprintf(path, sizeof path, "%s/%s", dir, limit_file);
        double limit = file_value(path);
        if (limit >= 0 && limit < NO_LIMIT_ABOVE) {
            snprintf(path, sizeof path, "%s/%s", dir, used_file);
            double used = file_value(path);
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            double cache = keyed_value(path, cache_key);
            if (used >= 0) {
                double r = limit - used + (cache > 0 ? cache : 0);
                if (r < 0) r = 0;
                if (room < 0 || r < room) room = r;
            }
        }
        char *slash = strrchr(group, '/');
        if (!slash || group[0] == '\0' || strcmp(group, "/") == 0) break;
        *slash = '\0'; /* the parent; "" is the root */
    }
    return room;
}

struct mem_available memcheck_available(const char *root) {
    struct mem_available a = {.meminfo = -1, .cgroup = -1, .bytes = -1};
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    double kb = keyed_value(path, "MemAvailable");
    if (kb >= 0) a.meminfo = kb * 1024;
    for (int v = 2; v >= 1 && a.cgroup < 0; v--) {
        a.cgroup = cgroup_room(root, v);
        if (a.cgroup >= 0) a.cgroup_version = v;
    }
    a.bytes = a.meminfo;
    if (a.cgroup >= 0 && (a.bytes < 0 || a.cgroup < a.bytes)) a.bytes = a.cgroup;
    return a;
}

/* "1.50 GiB", "12.0 MiB", "3.0 KiB", "17 B" */
static const char *human(double b, char out[24]) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) b /= 1024, u++;
    if (u == 0) snprintf(out, 24, "%.0f B", b);
    else snprintf(out, 24, "%.*f %s", u >= 3 ? 2 : 1, b, units[u]);
    return out;
}

struct text {
    char *buf;
    size_t len, used;
};

static void add(struct text *t, const char *fmt, ...) {
    if (t->used >= t->len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->used, t->len - t->used, fmt, ap);
    va_end(ap);
    if (n > 0) t->used += (size_t)n < t->len - t->used ? (size_t)n : t->len - t->used;
}

/* The start-up peak of rank `rank` of N and the libraries beside it. */
static double need_of(const struct config *c, int N, int rank) {
    return theory_trainer_memory(c, rank_place_of(c, N, rank)).total + RSS_LIBRARY_ALLOWANCE;
}

static void lever(struct text *t, const char *name, const struct config *c, int N, int rank, double budget,
                  bool *first) {
    char h[24];
    double need = need_of(c, N, rank);
    add(t, "%s%s: %s (%s)", *first ? "" : "; ", name, human(need, h), need <= budget ? "fits" : "no");
    *first = false;
}

/* The levers, each alone on a copy of the config, then all together. */
static void levers(struct text *t, const struct config *c, int N, int rank, double budget) {
    add(t, "\n  levers (total per rank): ");
    bool first = true;
    struct config all = *c;
    char name[80];
    for (int z = c->zero + 1; N > 1 && z <= 3; z++) {
        struct config k = *c;
        k.zero = all.zero = z;
        snprintf(name, sizeof name, "--zero %d over dp %d", z, N);
        lever(t, name, &k, N, rank, budget, &first);
    }
    static const struct { enum recompute_mode mode; const char *name; } recompute[] = {
        {RECOMPUTE_SELECTIVE, "--recompute selective"}, {RECOMPUTE_FULL, "--recompute full"}};
    for (size_t i = 0; i < sizeof recompute / sizeof recompute[0]; i++) {
        if (c->recompute == RECOMPUTE_FULL || c->recompute == recompute[i].mode) continue;
        if (c->attention == ATTENTION_FLASH && recompute[i].mode == RECOMPUTE_SELECTIVE) continue; /* = none */
        struct config k = *c;
        k.recompute = all.recompute = recompute[i].mode;
        lever(t, recompute[i].name, &k, N, rank, budget, &first);
    }
    if (c->micro_batch > 1) { /* the largest divisor that fits, so grad_accum can keep the batch */
        struct config k = *c;
        for (int d = 2; d <= c->micro_batch; d++) {
            if (c->micro_batch % d) continue;
            k.micro_batch = c->micro_batch / d;
            if (need_of(&k, N, rank) <= budget) break;
        }
        all.micro_batch = 1;
        snprintf(name, sizeof name, "--micro_batch %d (grad_accum x%d keeps the batch)", k.micro_batch,
                 c->micro_batch / k.micro_batch);
        lever(t, name, &k, N, rank, budget, &first);
    }
    const struct optim_rule *rule = optim_rule(c->optimizer);
    if (!rule->quantized && rule->twin != c->optimizer) { /* the 8-bit form: 1 B per state and parameter, not 4 */
        struct config k = *c;
        k.optimizer = all.optimizer = rule->twin;
        snprintf(name, sizeof name, "--optimizer %s", optim_rule(rule->twin)->name);
        lever(t, name, &k, N, rank, budget, &first);
    }
    /* Adafactor's n + m floats per n x m matrix, the least state of all
     * (where it runs: the CPU, parallel/zero/factored.c) */
    if (c->optimizer != OPTIM_ADAFACTOR) {
        struct config k = *c;
        k.optimizer = all.optimizer = OPTIM_ADAFACTOR;
        lever(t, "--optimizer adafactor (CPU)", &k, N, rank, budget, &first);
    }
    if (first) add(t, "none left (ZeRO needs more than one data-parallel rank)");
    else lever(t, "all of these together", &all, N, rank, budget, &first);
    if (N == 1 && c->zero < 3) add(t, "\n  more ranks on more hosts with --zero 3 divide the model states");
}

int memcheck_judge(const struct config *c, int N, int rank, double budget, const char *where, char *err,
                   size_t err_len) {
    struct memory_need m = theory_trainer_memory(c, rank_place_of(c, N, rank));
    double need = m.total + RSS_LIBRARY_ALLOWANCE;
    if (budget < 0 || need <= budget) return 0;
    struct text t = {err, err_len, 0};
    char h1[24], h2[24];
    add(&t, "not enough memory: this rank needs %s at start-up, %s can be had (%s)", human(need, h1),
        human(budget, h2), where);
    add(&t, "\n  theory per rank:");
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        add(&t, " %s %s", mem_category_name((enum mem_category)k), human(m.bytes[k], h1));
        if (k == MEM_SCRATCH) add(&t, " (one-unit staging %s)", human(m.staging, h1));
        add(&t, ",");
    }
    add(&t, " libraries %s (allowance)", human(RSS_LIBRARY_ALLOWANCE, h1));
    levers(&t, c, N, rank, budget);
    return -1;
}

/* A host's name folded to 24 bits: exact in an fp32, which the all-gather
 * carries. Two hosts that collide count as one, which only makes the check
 * stricter. */
static float host_tag(void) {
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    return (float)(h >> 8);
}

/* Ranks of the dp group on this host (tp = pp = 1 in this build, so the dp
 * group is the world): they share its available memory. */
static int ranks_on_this_host(struct collectives *dp) {
    float *tags = calloc((size_t)dp->size, sizeof *tags);
    if (!tags) return dp->size; /* the strictest answer */
    float mine = host_tag();
    tags[dp->rank] = mine;
    coll_all_gather_uncounted(dp, tags, 1, DTYPE_FP32);
    int n = 0;
    for (int r = 0; r < dp->size; r++) n += tags[r] == mine;
    free(tags);
    return n;
}

/* --force 1 turns a refusal into a warning. */
static int judged(const struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    if (rc != 0 && tr->cfg->force) {
        if (tr->grid->world_rank == 0) fprintf(stderr, "warning: --force 1, going on despite: %s\n", err);
        err[0] = '\0';
        return 0;
    }
    if (rc != 0) {
        size_t n = strlen(err);
        snprintf(err + n, TRAINER_ERR_LEN - n, "\n  --force 1 allocates anyway");
    }
    return rc;
}

/* A GPU run's budget: its own GPU's free bytes (one GPU per rank). */
static double device_budget(const struct trainer *tr, char *where, size_t len) {
    size_t used, total;
    char e[DEVICE_ERR_LEN], h1[24];
    if (device_memory_used(&tr->dev, &used, &total, e, sizeof e) != 0) {
        snprintf(where, len, "GPU memory unknown (%.200s)", e);
        return -1;
    }
    snprintf(where, len, "free on GPU %d (%.96s) %s", tr->dev.ordinal, tr->dev.name, human((double)(total - used), h1));
    return (double)(total - used);
}

int trainer_check_memory(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    struct grid *g = tr->grid;
    if (tr->space == MEM_DEVICE) {
        char where[256];
        double budget = device_budget(tr, where, sizeof where);
        return trainer_agree(tr, judged(tr, memcheck_judge(c, g->world_size, g->world_rank, budget, where, err,
                                                           TRAINER_ERR_LEN), err), err);
    }
    int local = ranks_on_this_host(&g->dp_comm);
    struct mem_available a = memcheck_available("");
    char where[256], h1[24], h2[24];
    int used = snprintf(where, sizeof where, "MemAvailable %s", a.meminfo >= 0 ? human(a.meminfo, h1) : "unknown");
    if (a.cgroup >= 0)
        used += snprintf(where + used, sizeof where - used, ", cgroup v%d room %s", a.cgroup_version,
                         human(a.cgroup, h2));
    if (local > 1) snprintf(where + used, sizeof where - used, ", shared by %d ranks on this host", local);
    double budget = a.bytes < 0 ? -1 : a.bytes / local;
    int rc = memcheck_judge(c, g->world_size, g->world_rank, budget, where, err, TRAINER_ERR_LEN);
    return trainer_agree(tr, judged(tr, rc, err), err);
}
