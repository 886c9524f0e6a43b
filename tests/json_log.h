/* Test helper: what a run's JSON log (--log_json, one record a line)
 * recorded, read back the way a user's script would. */
#ifndef SHARDLAB_TEST_JSON_LOG_H
#define SHARDLAB_TEST_JSON_LOG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The "loss" fields of the step records, in order, at most cap of them.
 * Returns how many, or -1 when the log cannot be opened. getline: a record
 * of any length is one line. */
static inline int json_log_losses(const char *path, double *loss, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t line_cap = 0;
    int n = 0;
    while (n < cap && getline(&line, &line_cap, f) != -1) {
        const char *p = strstr(line, "\"loss\":");
        if (p && strstr(line, "\"type\":\"step\"")) loss[n++] = strtod(p + 7, NULL);
    }
    free(line);
    fclose(f);
    return n;
}

#endif
