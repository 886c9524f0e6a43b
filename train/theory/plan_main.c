/* build/plan: capacity questions answered from the theory module alone,
 * without training: the flags (plan_args.c), theory_plan(), then the text
 * tables (plan_print.c) or one JSON object (plan_json.c); or with --ranks
 * every rank's own theory (plan_ranks.c). */
#include <stdio.h>
#include <stdlib.h>

#include "plan.h"

int main(int argc, char **argv) {
    struct plan_opts o;
    struct config c;
    int rc = plan_parse_args(argc, argv, &o, &c, stderr);
    if (rc == 1) {
        plan_usage(stdout);
        config_print_help(stdout, "plan", true);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "plan: see --help\n");
        return 2;
    }
    if (o.ranks) return plan_print_ranks(stdout, stderr, &o, &c) == 0 ? 0 : 2;
    struct theory_plan *pl = malloc(sizeof *pl);
    if (!pl) return 1;
    theory_plan(pl, &c, &o.in);
    if (o.json) plan_print_json(stdout, pl, &o);
    else plan_print_text(stdout, pl, &o, &c);
    free(pl);
    return 0;
}
