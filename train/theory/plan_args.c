/* build/plan's flags. Planner flags (cluster and layout choices) are parsed
 * here; every other --key goes to the config table, so model keys can be
 * overridden (e.g. --seq_len 4096). Counts (devices, tokens, stages, layout
 * degrees) refuse fractions; every value is range-checked, so no product
 * the planner forms overflows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Defaults: the seeds' LLaMA-3-70B example, a TPU v5p pod of 8960 chips
 * (4.59e14 bf16 FLOP/s, 96 GB HBM, 4.5e10 B/s per ICI link one way), 40%
 * MFU, 15e12 tokens, 4e6-token batches, 4 checkpoints per layer. */
#define SEED_DEVICES 8960.0
#define SEED_MEMORY 96e9
#define SEED_PEAK_FLOPS 4.59e14
#define SEED_MFU 0.4
#define SEED_TOKENS 15e12
#define SEED_BATCH_TOKENS 4e6
#define SEED_LINK_BANDWIDTH 4.5e10
#define SEED_CKPT_PER_LAYER 4

/* Ranges: far beyond any cluster, small enough that t cp p, 2 cp and the
 * device count stay in int and every byte count in a double's exact range. */
#define MAX_DEVICES 1073741824.0 /* 2^30 */
#define MAX_MEMORY_GIB 1e6
#define MIN_MEMORY_GIB 1e-3
#define MAX_TOKENS 1e20
#define MAX_BATCH_TOKENS 1e15
#define MAX_BANDWIDTH 1e18
#define MAX_WATTS 1e9
#define MIN_MFU 1e-6
#define MAX_CKPT_PER_LAYER 1000.0
#define MAX_ZERO_STAGE 3.0
/* The config key peak_flops takes any value down to 0 (the trainer's
 * "measure it"); the planner divides by it, so it wants at least this:
 * FLOPs (below 1e37 at the keys' limits) / 1e-6 MFU stay finite. */
#define MIN_PEAK_FLOPS 1.0

void plan_usage(FILE *f) {
    fprintf(f,
            "usage: plan --config FILE [planner flags] [--key value ...] [--json]\n\n"
            "Planner flags, --flag value or --flag=value (memory in GiB = 2^30 B, as the trainer prints it):\n"
            "  --devices N          devices in the cluster, a whole number (default 8960)\n"
            "  --device NAME        memory, peak FLOP/s and link bandwidth from a table: a100-40gb, a100,\n"
            "                       h100, h100-pcie, h100-nvl, h200, tpu-v5p (flags given beside it win)\n"
            "  --device-memory G    GiB of memory per device (default 96e9 B = 89.4 GiB, the seeds' TPU v5p)\n"
            "  --peak-flops F       peak FLOP/s per device; the config key peak_flops (default 4.59e14)\n"
            "  --mfu X              fraction of peak achieved, in (0, 1] (default 0.4)\n"
            "  --tokens D           training tokens, a whole number (default 15e12)\n"
            "  --batch-tokens T     tokens per optimizer step, a whole number (default 4e6)\n"
            "  --link-bandwidth B   bytes/s per device link within a node (NVLink, ICI), one direction\n"
            "                       (default 4.5e10)\n"
            "  --inter-node-bandwidth B  bytes/s per device between nodes, one direction: groups spanning more\n"
            "                       than --devices-per-node devices use it (default 0: one network; --device\n"
            "                       h100/h200: 5e10, each GPU's 400 Gb/s NDR InfiniBand NIC, DGX H100 guide)\n"
            "  --devices-per-node N devices on one node's fast link, a whole number (default 0: every device;\n"
            "                       --device h100/h200/a100: 8, an HGX board)\n"
            "  --watts W            power per device for the energy estimate (default 0: not given)\n"
            "  --zero-stage S       ZeRO stage 0..3 for the layout table and smallest fit (default 1)\n"
            "  --recompute-mode M   none|selective|full for the same (default selective)\n"
            "  --layout T,C,P       also judge this layout: TP T x CP C x PP P x DP (the rest of the devices);\n"
            "                       P need not divide L (stages of ceil(L/P) layers); up to 8 of them\n"
            "  --ckpt-per-layer K   checkpoints per layer in the seed-style estimate, 1..1000 (default 4)\n"
            "  --all                every layout of the search, not only the fastest that fit\n"
            "  --json               one JSON object instead of tables (every layout, --layout's too)\n"
            "  --ranks              instead: every rank's own memory and traffic on --devices N ranks (the config's\n"
            "                       tp, cp, pp; dp the rest), from the trainer's own theory; with --json as the\n"
            "                       trainer's --log_json records (memory, comm), to compare with a run's\n"
            "  --help               this text and the config keys\n\n");
}

static int parse_number(FILE *err, const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fprintf(err, "plan: bad value '%s' for %s: expected a number in [%g, %g]\n", v, flag, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* A count: a number in [lo, hi] without a fraction (4e6 is fine, 3.5 not). */
static int parse_whole(FILE *err, const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi || x != floor(x)) {
        fprintf(err, "plan: bad value '%s' for %s: expected a whole number in [%.15g, %.15g]\n", v, flag, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* --layout T,C,P: tp, cp and pp of a layout to judge beside the search's;
 * dp follows from --devices (checked once the flags are read). */
static int parse_layout(FILE *err, const char *v, struct theory_plan_input *in) {
    int deg[3];
    const char *p = v;
    for (int k = 0; k < 3; k++) {
        char *end = NULL;
        long x = strtol(p, &end, 10);
        bool sep_ok = k < 2 ? *end == ',' : *end == '\0';
        if (end == p || !sep_ok || x < 1 || x > (long)MAX_DEVICES) {
            fprintf(err, "plan: bad value '%s' for --layout: expected T,C,P (tp, cp, pp), whole numbers in [1, %.15g]\n",
                    v, MAX_DEVICES);
            return -1;
        }
        deg[k] = (int)x;
        p = end + 1;
    }
    if (in->n_requested == THEORY_PLAN_MAX_REQUESTED) {
        fprintf(err, "plan: more than %d --layout flags\n", THEORY_PLAN_MAX_REQUESTED);
        return -1;
    }
    in->requested[in->n_requested++] = (struct theory_layout){.tp = deg[0], .cp = deg[1], .pp = deg[2]};
    return 0;
}

static int parse_recompute(FILE *err, const char *flag, const char *v, enum recompute_mode *out) {
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++)
        if (!strcmp(v, theory_recompute_name((enum recompute_mode)r))) {
            *out = (enum recompute_mode)r;
            return 0;
        }
    fprintf(err, "plan: bad value '%s' for %s: valid choices are none selective full\n", v, flag);
    return -1;
}

static int parse_device(FILE *err, const char *v, struct plan_opts *o) {
    o->device = theory_device_find(v);
    if (o->device) return 0;
    fprintf(err, "plan: unknown device '%s' for --device; valid choices are %s\n", v, theory_device_names());
    return -1;
}

/* Which planner values were given, so that --device fills only the rest. */
struct given {
    bool memory, link, inter, per_node, devices;
};

/* One planner flag and its value v. Returns 0, -1 on a bad value, or 1
 * when `a` is not a planner flag (a config key). */
static int parse_flag(FILE *err, const char *a, const char *v, struct plan_opts *o, struct given *g) {
    struct theory_plan_input *in = &o->in;
    double x = 0;
    int rc;
    if (!strcmp(a, "--devices")) {
        g->devices = true;
        return parse_whole(err, a, v, 1, MAX_DEVICES, &in->devices);
    }
    if (!strcmp(a, "--device")) return parse_device(err, v, o);
    if (!strcmp(a, "--device-memory")) {
        g->memory = true;
        rc = parse_number(err, "--device-memory (GiB)", v, MIN_MEMORY_GIB, MAX_MEMORY_GIB, &x);
        in->memory = x * THEORY_GIB;
        return rc;
    }
    if (!strcmp(a, "--mfu")) return parse_number(err, a, v, MIN_MFU, 1, &in->mfu);
    if (!strcmp(a, "--tokens")) return parse_whole(err, a, v, 1, MAX_TOKENS, &in->tokens);
    if (!strcmp(a, "--batch-tokens")) return parse_whole(err, a, v, 1, MAX_BATCH_TOKENS, &in->batch_tokens);
    if (!strcmp(a, "--link-bandwidth")) {
        g->link = true;
        return parse_number(err, a, v, 1, MAX_BANDWIDTH, &in->link_bandwidth);
    }
    if (!strcmp(a, "--inter-node-bandwidth")) {
        g->inter = true;
        return parse_number(err, a, v, 0, MAX_BANDWIDTH, &in->inter_node_bandwidth);
    }
    if (!strcmp(a, "--devices-per-node")) {
        g->per_node = true;
        return parse_whole(err, a, v, 0, MAX_DEVICES, &in->devices_per_node);
    }
    if (!strcmp(a, "--watts")) return parse_number(err, a, v, 0, MAX_WATTS, &in->watts);
    if (!strcmp(a, "--recompute-mode")) return parse_recompute(err, a, v, &in->recompute);
    if (!strcmp(a, "--layout")) return parse_layout(err, v, in);
    if (!strcmp(a, "--zero-stage")) {
        rc = parse_whole(err, a, v, 0, MAX_ZERO_STAGE, &x);
        in->zero_stage = (int)x;
        return rc;
    }
    if (!strcmp(a, "--ckpt-per-layer")) {
        rc = parse_whole(err, a, v, 1, MAX_CKPT_PER_LAYER, &x);
        in->ckpt_per_layer = (int)x;
        return rc;
    }
    return 1;
}

static bool takes_value(const char *a) {
    static const char *flags[] = {"--devices", "--device", "--device-memory", "--mfu", "--tokens", "--batch-tokens",
                                  "--link-bandwidth", "--inter-node-bandwidth", "--devices-per-node", "--watts", "--zero-stage", "--ckpt-per-layer",
                                  "--recompute-mode", "--layout"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(a, flags[i])) return true;
    return false;
}

enum { FLAG_LEN = 32 }; /* longer than every planner flag */

/* "--flag=value" of a planner flag, as the config's keys take it: the flag
 * into key, *v the value. False for anything else. */
static bool split_flag(const char *a, char key[FLAG_LEN], const char **v) {
    const char *eq = strchr(a, '=');
    if (!eq || eq - a >= FLAG_LEN) return false;
    snprintf(key, FLAG_LEN, "%.*s", (int)(eq - a), a);
    *v = eq + 1;
    return takes_value(key);
}

/* Returns 0, 1 for --help, or -1 after the message. Non-planner pairs are
 * copied into rest (argv[0] kept) for config_parse_args. */
static int parse_planner_flags(int argc, char **argv, struct plan_opts *o, struct given *g, int *rest_argc,
                               char **rest, FILE *err) {
    *rest_argc = 0;
    rest[(*rest_argc)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--json") || !strcmp(a, "--all") || !strcmp(a, "--ranks")) {
            *(a[2] == 'j' ? &o->json : a[2] == 'a' ? &o->all : &o->ranks) = true;
            continue;
        }
        char key[FLAG_LEN];
        const char *kv = NULL;
        if (split_flag(a, key, &kv)) {
            if (parse_flag(err, key, kv, o, g) < 0) return -1;
            continue;
        }
        if (!strncmp(a, "--config=", strlen("--config="))) o->config_path = a + strlen("--config=");
        if (!v && takes_value(a)) {
            fprintf(err, "plan: %s needs a value\n", a);
            return -1;
        }
        int rc = takes_value(a) ? parse_flag(err, a, v, o, g) : 1;
        if (rc < 0) return -1;
        if (!strcmp(a, "--config") && v) o->config_path = v;
        if (rc == 0) {
            i++;
            continue;
        }
        rest[(*rest_argc)++] = argv[i]; /* a config --key value pair */
        if (v && !strncmp(a, "--", 2) && !strchr(a, '=')) rest[(*rest_argc)++] = argv[++i]; /* not --key=value */
    }
    return 0;
}

static int check_model(FILE *err, const struct config *c) {
    if (c->d_model % c->n_head) {
        fprintf(err, "plan: n_head (%d) must divide d_model (%d)\n", c->n_head, c->d_model);
        return -1;
    }
    if (c->n_kv_head && c->n_head % c->n_kv_head) {
        fprintf(err, "plan: n_kv_head (%d) must divide n_head (%d)\n", c->n_kv_head, c->n_head);
        return -1;
    }
    return 0;
}

/* Each --layout's t cp p must divide the device count and 2 cp the
 * sequence; in 64 bits, each degree being at most 2^30. */
static int check_layouts(FILE *err, const struct theory_plan_input *in, const struct config *c) {
    const long long devices = (long long)in->devices;
    for (int i = 0; i < in->n_requested; i++) {
        const struct theory_layout *l = &in->requested[i];
        const long long tc = (long long)l->tp * l->cp;
        const bool divides = tc <= devices && devices % (tc * l->pp) == 0;
        if (!divides || c->seq_len % (2LL * l->cp)) {
            fprintf(err, "plan: --layout %d,%d,%d: tp x cp x pp must divide --devices %.0f and 2 cp must divide "
                    "seq_len %d\n", l->tp, l->cp, l->pp, in->devices, c->seq_len);
            return -1;
        }
    }
    return 0;
}

/* --device fills what was not given; the config's peak_flops wins over both. */
static int apply_device(FILE *err, struct plan_opts *o, const struct given *g, const struct config *c) {
    struct theory_plan_input *in = &o->in;
    if (o->device) {
        in->peak_flops = o->device->peak_flops;
        if (!g->memory) in->memory = o->device->memory;
        if (!g->link) in->link_bandwidth = o->device->link_bandwidth;
        if (!g->inter) in->inter_node_bandwidth = o->device->inter_node_bandwidth;
        if (!g->per_node) in->devices_per_node = o->device->devices_per_node;
    }
    if (c->peak_flops > 0 && c->peak_flops < MIN_PEAK_FLOPS) {
        fprintf(err, "plan: bad value %g for --peak-flops (peak_flops): the planner needs at least %g FLOP/s\n",
                c->peak_flops, MIN_PEAK_FLOPS);
        return -1;
    }
    if (c->peak_flops > 0) in->peak_flops = c->peak_flops;
    return 0;
}

int plan_parse_args(int argc, char **argv, struct plan_opts *o, struct config *c, FILE *err) {
    *o = (struct plan_opts){.in = {.devices = SEED_DEVICES, .memory = SEED_MEMORY, .peak_flops = SEED_PEAK_FLOPS,
                                   .mfu = SEED_MFU, .tokens = SEED_TOKENS, .batch_tokens = SEED_BATCH_TOKENS,
                                   .link_bandwidth = SEED_LINK_BANDWIDTH, .watts = 0, .zero_stage = 1,
                                   .recompute = RECOMPUTE_SELECTIVE, .ckpt_per_layer = SEED_CKPT_PER_LAYER}};
    config_defaults(c);
    struct given g = {false, false, false, false, false};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return -1;
    int rest_argc = 0;
    int rc = parse_planner_flags(argc, argv, o, &g, &rest_argc, rest, err);
    char msg[CONFIG_ERR_LEN];
    bool help = false;
    if (rc == 0 && config_parse_args(c, rest_argc, rest, &help, msg) != 0) {
        fprintf(err, "plan: %s\n", msg);
        rc = -1;
    }
    free(rest);
    if (rc == 0 && (check_model(err, c) || check_layouts(err, &o->in, c) || apply_device(err, o, &g, c))) rc = -1;
    if (rc == 0 && o->ranks && !g.devices) {
        fprintf(err, "plan: --ranks needs --devices N, the world size of the run it describes\n");
        rc = -1;
    }
    return rc;
}
