/* The CPU's peak fp32 FLOP/s, measured by an FMA microbenchmark. */
#ifndef SHARDLAB_PEAK_H
#define SHARDLAB_PEAK_H

/* Sum over `threads` threads; about 0.1 s. */
double measure_peak_flops(int threads);

#endif
