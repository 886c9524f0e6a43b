/* Progress lines and the ETA (train/measure/progress.h). */
#include "progress.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

void progress_init(struct progress *p, bool tty) { *p = (struct progress){.tty = tty}; }

bool progress_stdout_is_terminal(void) {
    /* A launcher's pseudo-terminal is not the user's: mpirun gives every
     * rank one even when its own output goes to a log file. Open MPI's and
     * MPICH's launchers set these; a singleton (no mpirun) sets neither
     * (it does set PMIX_RANK, inside MPI_Init, so that one cannot tell). */
    static const char *const launched[] = {"OMPI_COMM_WORLD_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof launched / sizeof launched[0]; i++)
        if (getenv(launched[i])) return false;
    return isatty(STDOUT_FILENO) == 1;
}

void progress_step(struct progress *p, double seconds) {
    if (p->steps_seen++ > 0) p->seconds += seconds;
}

double progress_eta_seconds(const struct progress *p, int steps_left) {
    if (p->steps_seen < 2) return -1.0;
    return p->seconds / (double)(p->steps_seen - 1) * (double)(steps_left > 0 ? steps_left : 0);
}

void progress_format_eta(double seconds, char out[PROGRESS_ETA_LEN]) {
    if (!(seconds >= 0.0) || seconds >= 1e5 * 86400.0) { /* NaN, unknown, or beyond any run */
        snprintf(out, PROGRESS_ETA_LEN, "?");
        return;
    }
    long s = lround(seconds);
    int d = (int)(s / 86400), h = (int)(s / 3600 % 24), m = (int)(s / 60 % 60), sec = (int)(s % 60);
    if (d > 0) snprintf(out, PROGRESS_ETA_LEN, "%dd%02dh", d, h);
    else if (h > 0) snprintf(out, PROGRESS_ETA_LEN, "%dh%02dm", h, m);
    else if (m > 0) snprintf(out, PROGRESS_ETA_LEN, "%dm%02ds", m, sec);
    else snprintf(out, PROGRESS_ETA_LEN, "%ds", sec);
}

void progress_show(struct progress *p, FILE *out, const char *line, bool keep) {
    if (!p->tty) {
        fprintf(out, "%s\n", line);
    } else {
        /* back to the line's start, the new text, erase what a longer old line left */
        fprintf(out, "\r%s\033[K%s", line, keep ? "\n" : "");
        p->line_open = !keep;
    }
    fflush(out);
}

void progress_end_line(struct progress *p, FILE *out) {
    if (!p->line_open) return;
    fputc('\n', out);
    fflush(out);
    p->line_open = false;
}
