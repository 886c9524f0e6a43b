/* Test helpers for tests that write files: a mkdtemp folder per test
 * (made, emptied and removed), paths in it, whole-file reads and writes,
 * counts of files and leftover temp files, and a deterministic shuffle. */
#ifndef SHARDLAB_TEST_FILE_FIXTURE_H
#define SHARDLAB_TEST_FILE_FIXTURE_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* dir: 64 chars; name: the folder's prefix under /tmp. Returns 0 or -1. */
static inline int scratch_dir_make(char dir[64], const char *name) {
    snprintf(dir, 64, "/tmp/%s.XXXXXX", name);
    return mkdtemp(dir) ? 0 : -1;
}

/* Removes the folder and every file in it. */
static inline void scratch_dir_remove(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        char p[64 + sizeof((struct dirent *)0)->d_name + 1];
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline void path_in_dir(const char *dir, const char *name, char out[256]) {
    snprintf(out, 256, "%s/%s", dir, name);
}

static inline unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 16);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static inline void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Files in dir, and how many of them are temp files of an atomic write. */
static inline int files_and_temps(const char *dir, int *temps) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int files = 0;
    *temps = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        files++;
        *temps += strstr(e->d_name, ".shardlab-tmp.") != NULL;
    }
    closedir(d);
    return files;
}

/* Files in dir; fails on a leftover temp file. */
static inline int files_in_dir(const char *dir) {
    int temps, files = files_and_temps(dir, &temps);
    if (temps) fail_msg("%d temp file(s) left behind", temps);
    return files;
}

/* Deterministic shuffles (no global RNG state). */
static inline uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }
static inline void shuffle(int *a, int n, uint32_t *seed) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(lcg(seed) % (uint32_t)(i + 1)), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

#endif
