/* The memory table: what the tagged allocator measured, by category and by
 * buffer, beside the process peak RSS (what the tags do not see: allocator
 * overhead, MPI, BLAS and OpenMP buffers, code). */
#include <sys/resource.h>

#include "trainer.h"

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void report_memory(FILE *out, const struct trainer *tr, const char *when) {
    const struct mem_tracker *m = &tr->mem;
    fprintf(out, "\nmemory (%s), measured by the tagged allocator:\n", when);
    fprintf(out, "  %-12s %-34s %14s %10s\n", "category", "buffer", "bytes", "MiB");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
        if (!m->live[c]) continue;
        for (int i = 0; i < m->n_records; i++) {
            const struct mem_record *r = &m->records[i];
            if ((int)r->category != c) continue;
            fprintf(out, "  %-12s %-34s %14zu %10.2f\n", mem_category_name(r->category), r->name, r->bytes,
                    mib(r->bytes));
        }
    }
    fprintf(out, "  %-12s %-34s %14zu %10.2f\n", "total", "tracked (live)", m->live_total, mib(m->live_total));
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        size_t rss = (size_t)ru.ru_maxrss * 1024;
        fprintf(out, "  %-12s %-34s %14zu %10.2f\n", "process", "peak RSS (getrusage)", rss, mib(rss));
        fprintf(out, "  %-12s %-34s %14.0f %10.2f\n", "", "untracked (RSS - tracked)",
                (double)rss - (double)m->peak_total, ((double)rss - (double)m->peak_total) / 1048576.0);
    }
}
