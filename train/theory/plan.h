/* build/plan's flags and report: parsing (train/theory/plan_args.c), the
 * text tables (plan_print.c) and the JSON object (plan_json.c), apart from
 * its main so that tests and the fuzzer (tests/fuzz/fuzz_plan.c) drive the
 * same code. Every number comes from theory_plan(). */
#ifndef SHARDLAB_PLAN_H
#define SHARDLAB_PLAN_H

#include <stdbool.h>
#include <stdio.h>

#include "../config/config.h"
#include "theory.h"

struct plan_opts {
    struct theory_plan_input in;
    bool json;                          /* --json: one JSON object instead of tables */
    bool all;                           /* --all: every layout of the search, not the useful rows */
    bool ranks;                         /* --ranks: every rank's own theory instead (plan_ranks.c) */
    const char *config_path;            /* --config, for the header; NULL: none */
    const struct theory_device *device; /* --device: memory, peak and link unless given */
};

/* The defaults (the seeds' LLaMA-3 example on a TPU v5p pod) in *o, then
 * argv's planner flags over them and every other --key value into *c
 * (config_parse_args, over config_defaults). Returns 0, 1 for --help, or
 * -1 after writing a message that names the flag to `err`. */
int plan_parse_args(int argc, char **argv, struct plan_opts *o, struct config *c, FILE *err);
/* The planner flags' help (the config keys follow it: config_print_help). */
void plan_usage(FILE *f);

void plan_print_text(FILE *f, const struct theory_plan *pl, const struct plan_opts *o, const struct config *c);
void plan_print_json(FILE *f, const struct theory_plan *pl, const struct plan_opts *o);
/* --ranks: each rank's own theory on a grid of o->in.devices ranks, as a
 * table or (o->json) JSON lines. Returns 0, or -1 after a message to `err`
 * (a world the config's tp x cp x pp does not divide, a run the trainer
 * would refuse). */
int plan_print_ranks(FILE *f, FILE *err, const struct plan_opts *o, const struct config *c);

#endif
