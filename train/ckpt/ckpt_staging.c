/* Checkpoint staging in the model's space with a host mirror
 * (train/ckpt/ckpt_staging.h). */
#include "ckpt_staging.h"

#include <stdio.h>

#include "bufops.h"

static int alloc_device(struct ckpt_staging *s, struct mem_tracker *mem, const char *name) {
    char dev[MEM_NAME_LEN];
    snprintf(dev, sizeof dev, "%.36s [device]", name);
    s->work = mem_alloc(mem, MEM_DEVICE, MEM_SCRATCH, dev, s->bytes);
    return s->work ? 0 : -1;
}

int ckpt_staging_alloc(struct ckpt_staging *s, struct mem_tracker *mem, enum mem_space space, const char *name,
                       size_t bytes) {
    *s = (struct ckpt_staging){.bytes = bytes, .own_host = true};
    if (space == MEM_HOST) {
        s->work = s->host = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, name, bytes);
        return s->work ? 0 : -1;
    }
    char mirror[MEM_NAME_LEN];
    snprintf(mirror, sizeof mirror, "%.33s [host mirror]", name);
    s->host = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, mirror, bytes);
    if (s->host && alloc_device(s, mem, name) == 0) return 0;
    ckpt_staging_free(s, mem);
    return -1;
}

int ckpt_staging_over(struct ckpt_staging *s, struct mem_tracker *mem, enum mem_space space, const char *name,
                      void *host, size_t bytes) {
    *s = (struct ckpt_staging){.work = host, .host = host, .bytes = bytes};
    if (space == MEM_HOST) return 0;
    if (alloc_device(s, mem, name) == 0) return 0;
    *s = (struct ckpt_staging){0};
    return -1;
}

void ckpt_staging_free(struct ckpt_staging *s, struct mem_tracker *mem) {
    if (s->work != s->host) mem_free(mem, s->work); /* mem_free ignores NULL */
    if (s->own_host) mem_free(mem, s->host);
    *s = (struct ckpt_staging){0};
}

void ckpt_staging_to_host(const struct ckpt_staging *s, enum mem_space space, size_t bytes) {
    if (s->host != s->work && bytes) buf_copy(space, s->host, s->work, bytes);
}

void ckpt_staging_to_work(const struct ckpt_staging *s, enum mem_space space, size_t bytes) {
    if (s->host != s->work && bytes) buf_copy(space, s->work, s->host, bytes);
}
