# shardlab: make | make test | make demo | make report RUN=... | make multihost-demo | make bench | make san-test | make fuzz | make clean
#
# Everything is built with mpicc against OpenBLAS, so each binary runs alone
# (a 1-rank world) or under mpirun. SAN=1 builds into build-san/ with
# AddressSanitizer + UndefinedBehaviorSanitizer.

CC      := mpicc
SAN     ?= 0
ifeq ($(SAN),1)
BUILD   := build-san
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
else
BUILD   := build
OPT     := -O3 -march=native -g
endif
# -fno-trapping-math: nothing here reads the floating-point exception flags,
# and without it GCC keeps every loop with a float comparison or a float-to-int
# conversion scalar (it may not if-convert an op that could raise a flag): the
# GELU and softmax loops over fast_expf ran 3-7x slower (bench/RESULTS.md).
# Element-wise results are the same bits; reductions keep their order (no
# -fassociative-math).
CFLAGS  := -std=c17 -D_GNU_SOURCE $(OPT) -fno-math-errno -fno-trapping-math -fopenmp -Wall -Wextra -Werror -Wno-missing-field-initializers -Iinclude -MMD -MP
# --build-id: the linker's hash of each binary, which make cuda-test's stamp
# names (model/gpu_stamp.h); gcc's default on Debian, asked for here.
LDFLAGS := $(OPT) -fopenmp -Wl,--build-id=sha1
# OpenBLAS's OpenMP build, so sgemm and our own OpenMP loops share one
# thread pool. Debian's default (pthread) build keeps its own threads, and the
# two pools spin against each other on 2 cores: 389 ms/step instead of 165 on
# bench-small (bench/RESULTS.md).
BLAS_DIR ?= /usr/lib/$(shell gcc -print-multiarch)/openblas-openmp
# oneDNN (Debian's libdnnl-dev, built on OpenMP): the CPU's bf16 GEMMs
# (--gemm_dtype bf16, model/cpu/matmul_onednn.c).
LDLIBS  := -L$(BLAS_DIR) -l:libopenblas.so.0 -Wl,-rpath,$(BLAS_DIR) -ldnnl -lm

# Every .c under the module folders is library code, except the *_main.c
# files, each of which is one program, and the CUDA build's own sources
# (any */cuda/ folder: `make cuda`, below).
MODULES   := model optim parallel data train
ALL_SRC   := $(sort $(shell find $(MODULES) -name "*.c" -not -path "*/cuda/*"))
MAIN_SRC  := $(filter %_main.c,$(ALL_SRC))
LIB_SRC   := $(filter-out %_main.c,$(ALL_SRC))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
PROGRAMS  := $(foreach s,$(MAIN_SRC),$(BUILD)/$(notdir $(s:_main.c=)))
TEST_SRC  := $(wildcard tests/test_*.c)
TESTS     := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Multi-rank tests: one binary per tests/mpi/test_*.c, run under mpirun.
MPI_TEST_SRC := $(wildcard tests/mpi/test_*.c)
MPI_TESTS    := $(MPI_TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.SECONDARY:
.PHONY: demo-llama all cuda cuda-test test check-deps unit-test mpi-test san-test demo report multihost-demo bench deps data clean
all: $(PROGRAMS) $(BUILD)/report

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libshardlab.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# program X comes from */X_main.c
define program_rule
$(BUILD)/$(notdir $(1:_main.c=)): $(BUILD)/obj/$(1:.c=.o) $(BUILD)/libshardlab.a
	$$(CC) $$(LDFLAGS) $$^ -o $$@ $$(LDLIBS)
endef
$(foreach s,$(MAIN_SRC),$(eval $(call program_rule,$(s))))

# build/report: a run's JSON log as pictures (train/report/report.py, matplotlib).
# Debian's /usr/bin/python3 first: python3-matplotlib (make deps) installs
# for it, and a python3 earlier on PATH (a pyenv, a venv) may not see it.
$(BUILD)/report: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' '# Made by the Makefile: runs train/report/report.py (see there).' \
	    'py=/usr/bin/python3; [ -x "$$py" ] || py=python3' \
	    'exec "$$py" "$$(dirname "$$0")/../train/report/report.py" "$$@"' >$@
	@chmod +x $@
	@echo "  GEN   $@"

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libshardlab.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS) -lcmocka

# Folders depend one way, downwards (tests/check_deps.sh); its self-test first.
check-deps: $(LIB_OBJ) $(MAIN_SRC:%.c=$(BUILD)/obj/%.o)
	@tests/check_deps_selftest.sh
	@tests/check_deps.sh $(BUILD)/obj

# Unit tests, one binary per tests/test_*.c (some train on the bundled
# corpus: data), then the multi-rank tests.
unit-test: deps $(PROGRAMS) $(TESTS) data
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done

# Each multi-rank test on 2, 3 and 4 ranks (tests/run_mpi.sh).
mpi-test: deps $(MPI_TESTS) $(BUILD)/report
	tests/run_mpi.sh $(MPI_TESTS)
	tests/mpi/failures.sh $(BUILD)
	tests/outputs.sh $(BUILD)
	tests/mpi/grid_checkpoint.sh $(BUILD)
	tests/mpi/trace.sh $(BUILD)
	tests/mpi/stop_signal.sh $(BUILD)
	tests/mpi/startup_peak.sh $(BUILD)
	tests/mpi/tp_train.sh $(BUILD)
	tests/mpi/pp_train.sh $(BUILD)
	tests/mpi/optim_grid.sh $(BUILD)
	tests/mpi/cp_train.sh $(BUILD)
	tests/mpi/gemm_paths.sh $(BUILD)
	tests/mpi/own_numbers.sh $(BUILD)
	tests/mpi/plan_ranks.sh $(BUILD)
	tests/stale_temps.sh $(BUILD)
	tests/threads_bits.sh $(BUILD)
	tests/multihost/test_multihost.sh $(BUILD)
	tests/test_report_py.sh $(BUILD)

# Dependency check, then unit tests, then MPI tests (order kept under make -j);
# the last line names the GEMM paths and kernels the end-to-end runs took on
# this CPU (tests/mpi/gemm_paths.sh writes it).
test: check-deps
	$(MAKE) unit-test
	$(MAKE) mpi-test
	@echo "all tests passed; $$(cat $(BUILD)/tests/gemm_paths.txt)"

# OpenMPI leaks its own allocations at exit (MPI_Finalize does not free
# them), so the MPI tests run with LeakSanitizer off; ASan's other checks
# and UBSan stay on. The unit tests keep leak detection.
san-test:
	$(MAKE) SAN=1 unit-test
	ASAN_OPTIONS=detect_leaks=0 MPI_TEST_SECONDS=360 $(MAKE) SAN=1 mpi-test

# Bundled corpus -> token shards (the demo's default train_data/val_data).
data: data/kjv_train.bin
data/kjv_train.bin: data/kjv.txt $(BUILD)/prepare
	$(BUILD)/prepare --input data/kjv.txt --train data/kjv_train.bin --val data/kjv_val.bin

# The demo runs data-parallel on 2 ranks (1 BLAS thread each) with ZeRO-3,
# so the per-rank tables show the sharding; the banner says so.
# Its JSON log goes to $(DEMO_DIR)/run.json and its report next to it.
# DEMO_ARGS adds trainer flags (a short look: DEMO_ARGS="--steps 20").
DEMO_RANKS ?= 2
DEMO_ARGS  ?=
DEMO_DIR   := $(BUILD)/demo
demo: deps all data
	@echo "shardlab demo: $(DEMO_RANKS) ranks under mpirun, ZeRO-3 (params, grads and optimizer states sharded 1/$(DEMO_RANKS) per rank)"
	@mkdir -p $(DEMO_DIR)
	mpirun --oversubscribe --allow-run-as-root -np $(DEMO_RANKS) $(BUILD)/train --config configs/demo.conf --zero 3 --threads 1 --explain 1 \
	    --log_json $(DEMO_DIR)/run.json $(DEMO_ARGS)
	$(BUILD)/report $(DEMO_DIR)/run.json --out $(DEMO_DIR)/report
	@echo "the demo's report: open $(abspath $(DEMO_DIR)/report/index.html)"

# demo-llama: the same on LLaMA 3's blocks (configs/llama-tiny.conf), its
# log and report in $(DEMO_DIR)-llama.
demo-llama: deps all data
	@echo "shardlab demo-llama: LLaMA 3 blocks, $(DEMO_RANKS) ranks under mpirun, ZeRO-3"
	@mkdir -p $(DEMO_DIR)-llama
	mpirun --oversubscribe --allow-run-as-root -np $(DEMO_RANKS) $(BUILD)/train --config configs/llama-tiny.conf --zero 3 \
	    --threads 1 --explain 1 --log_json $(DEMO_DIR)-llama/run.json $(DEMO_ARGS)
	$(BUILD)/report $(DEMO_DIR)-llama/run.json --out $(DEMO_DIR)-llama/report
	@echo "the demo's report: open $(abspath $(DEMO_DIR)-llama/report/index.html)"

# make report RUN="a.json [b.json ...]" [OUT=dir] [TRACE=trace.json]: the
# pictures of one or several runs (one per ZeRO stage, say) and an
# index.html; OUT defaults to the first log's name + _report.
report: deps $(BUILD)/report
	@test -n "$(RUN)" || { echo "usage: make report RUN=run.json [OUT=dir] [TRACE=trace.json]" >&2; exit 2; }
	$(BUILD)/report $(RUN) $(if $(TRACE),--trace $(TRACE)) --out $(or $(OUT),$(basename $(firstword $(RUN)))_report)

# Across hosts: MULTIHOST_HOSTS hosts as network namespaces (needs root and
# iproute2), one rank each, ZeRO-3 over TCP; prints each host's wire bytes
# per step beside the trainer's counters and the ring formula
# (tests/multihost/run.sh, docs/MULTIHOST.md).
MULTIHOST_HOSTS ?= 2
multihost-demo: deps all data
	tests/multihost/run.sh $(BUILD) $(MULTIHOST_HOSTS) 6 --config configs/demo.conf

bench: deps all
	bench/run.sh

# Kernel microbenchmarks: bench/X_bench.c -> $(BUILD)/bench_X (not in `all`).
$(BUILD)/bench_%: bench/%_bench.c $(BUILD)/libshardlab.a Makefile
	$(CC) $(CFLAGS) $< $(BUILD)/libshardlab.a -o $@ $(LDLIBS)

deps:
	@.ci/deps

# ---- Fuzzing (tests/fuzz/README.md) ----
# One libFuzzer harness per tests/fuzz/fuzz_X.c, built with clang into
# build-fuzz/ together with the few library files the readers (and fuzz_plan's
# planner) need, all under ASan + UBSan. `make fuzz` runs each for
# FUZZ_SECONDS over its committed corpus (read only: new inputs go to
# build-fuzz/new/X, crashes to build-fuzz/crashes/); `make fuzz-regress` runs
# every committed input once.
FUZZ_CC      := clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := -std=c17 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
                -Wall -Wextra -Werror -Wno-missing-field-initializers -Iinclude -MMD -MP
FUZZ_LIB_SRC := data/crc32c.c data/fileio.c data/loader.c data/rangeset.c data/shard.c data/tokenizer.c model/layout.c \
                model/tensor_parallel/slice.c train/ckpt/ckpt_llmc.c train/ckpt/ckpt_llmc_llama.c train/config/config_keys.c train/config/config_limits.c \
                train/ckpt/ckpt_state_format.c optim/optim_rules.c parallel/pipeline/order.c \
                $(addprefix train/theory/,plan_args.c plan_json.c plan_print.c theory_comm.c theory_devices.c \
                    theory_flops.c theory_layout.c theory_memory.c theory_params.c theory_plan.c)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=build-fuzz/obj/%.o)
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZERS      := $(FUZZ_NAMES:%=build-fuzz/fuzz_%)
FUZZ_SECONDS ?= 60
.PHONY: fuzz fuzz-regress fuzz-corpus

build-fuzz/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CLANG $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

build-fuzz/fuzz_%: build-fuzz/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@ -lm

build-fuzz/seed_corpus: build-fuzz/obj/tests/fuzz/seed_corpus.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) $^ -o $@ -lm

fuzz: $(FUZZERS)
	@set -e; for h in $(FUZZ_NAMES); do \
	    echo "== fuzz $$h for $(FUZZ_SECONDS) s"; \
	    rm -rf build-fuzz/new/$$h; mkdir -p build-fuzz/new/$$h build-fuzz/crashes; \
	    build-fuzz/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	        -artifact_prefix=build-fuzz/crashes/$$h- build-fuzz/new/$$h tests/fuzz/corpus/$$h; \
	done

fuzz-regress: $(FUZZERS)
	@set -e; for h in $(FUZZ_NAMES); do \
	    echo "== fuzz-regress $$h: $$(ls tests/fuzz/corpus/$$h | wc -l) inputs"; \
	    build-fuzz/fuzz_$$h -runs=0 tests/fuzz/corpus/$$h; \
	done

# Rewrites the seeds made by the project's writers and copies configs/;
# regression inputs (regress-*) are kept.
fuzz-corpus: build-fuzz/seed_corpus
	mkdir -p tests/fuzz/corpus/config tests/fuzz/corpus/shard tests/fuzz/corpus/llmc tests/fuzz/corpus/resume
	cp configs/*.conf tests/fuzz/corpus/config/
	build-fuzz/seed_corpus data/kjv.txt tests/fuzz/corpus

# ---- The CUDA build (docs/GPU.md) ----
# build-cuda/ holds every library file of the CPU build plus the */cuda/
# folders' .c (mpicc, -DSHARDLAB_CUDA, the CUDA headers) and .cu (nvcc)
# files, linked against cudart, cuBLAS, cuBLASLt, NCCL and MPI. Every file
# is compiled once, under its own names: the dispatch files
# (model/dispatch.c, optim/optim_dispatch.c)
# see -DSHARDLAB_CUDA here and choose the device tables of the */cuda/
# folders (layer_ops_cuda, buf_ops_cuda, optim_ops_cuda) beside the
# host's (include/backend.h).
# Nothing here is part of `make all` or `make test`.
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS ?= sm_80 sm_90
CUDA_BUILD := build-cuda
CUDA_CFLAGS := $(filter-out -MMD -MP,$(CFLAGS)) -DSHARDLAB_CUDA -isystem $(CUDA_HOME)/include -MMD -MP
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a:sm_%=%),code=$(a))
NVCC_FLAGS := -std=c++17 -O3 -g -DSHARDLAB_CUDA -Iinclude $(CUDA_GENCODE) -Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
CUDA_LDLIBS := $(LDLIBS) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
               -lcudart -lcublasLt -lcublas -lnccl -lstdc++
CUDA_C_SRC  := $(sort $(shell find $(MODULES) -path "*/cuda/*" -name "*.c"))
CUDA_CU_SRC := $(sort $(shell find $(MODULES) -path "*/cuda/*" -name "*.cu"))
CUDA_LIB_OBJ := $(filter-out %_main.o,$(ALL_SRC:%.c=$(CUDA_BUILD)/obj/%.o)) \
                $(CUDA_C_SRC:%.c=$(CUDA_BUILD)/obj/%.o) $(CUDA_CU_SRC:%.cu=$(CUDA_BUILD)/obj/%.o)
CUDA_PROGRAMS := $(foreach s,$(MAIN_SRC),$(CUDA_BUILD)/$(notdir $(s:_main.c=)))
CUDA_TEST_SRC := $(wildcard tests/cuda/test_*.c)
CUDA_TESTS    := $(CUDA_TEST_SRC:tests/%.c=$(CUDA_BUILD)/tests/%)
# make cuda-test's last step: the stamp, when every test passed
CUDA_STAMP_WRITE := $(CUDA_BUILD)/tests/cuda/stamp_write

cuda: nvcc-present $(CUDA_PROGRAMS) $(CUDA_TESTS) $(CUDA_STAMP_WRITE)
	@tests/check_deps.sh $(CUDA_BUILD)/obj
	@echo "CUDA build in $(CUDA_BUILD)/ ($(CUDA_ARCHS)): compiled and linked. On a GPU it runs only after make cuda-test passed there (docs/GPU.md)"

# Every CUDA test (tests/cuda/cuda_test.sh): each kernel against the CPU's,
# then the whole model against the CPU build (gpu_train.sh, gpu_grads.sh).
# When every one ran on a GPU and passed, the stamp for this build and that
# GPU ($(CUDA_BUILD)/gpu_verified.stamp, model/gpu_stamp.h), without
# which the CUDA build's train refuses to run on a GPU. Without a GPU every
# test reports itself skipped, no stamp is written, and it exits 0.
cuda-test: cuda all data
	@tests/cuda/cuda_test.sh $(BUILD) $(CUDA_BUILD)

.PHONY: nvcc-present
nvcc-present:
	@test -x "$(NVCC)" || { echo "make cuda: nvcc not found at $(NVCC) (install the CUDA toolkit or set CUDA_HOME=...)" >&2; exit 1; }

$(CUDA_BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $< (cuda build)"
	@$(CC) $(CUDA_CFLAGS) -c $< -o $@

# The layer kernels do the CPU's arithmetic operation for operation, so the
# elementwise ones give its bits: no a*b+c contracted into an FMA (gcc
# -std=c17 contracts none either).
CUDA_LAYER_CU := $(patsubst %,$(CUDA_BUILD)/obj/model/cuda/%.o,encoder gelu layernorm matmul crossentropy attention)
$(CUDA_LAYER_CU): NVCC_FLAGS += --fmad=false
# So do v2's (model/cuda/v2/: each kernel's host reference, bit for bit),
# except the flash kernels (flash2_*.cu), held to a normwise bound instead.
$(patsubst %.cu,$(CUDA_BUILD)/obj/%.o,$(filter-out %/flash2_forward.cu %/flash2_backward.cu,$(wildcard model/cuda/v2/*.cu))): NVCC_FLAGS += --fmad=false
# So do the optimizer kernels (optim/cuda/optim_kernels.h).
CUDA_OPTIM_CU := $(patsubst %.cu,$(CUDA_BUILD)/obj/%.o,$(wildcard optim/cuda/*.cu))
$(CUDA_OPTIM_CU): NVCC_FLAGS += --fmad=false

$(CUDA_BUILD)/obj/%.o: %.cu Makefile
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	@$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(CUDA_BUILD)/libshardlab.a: $(CUDA_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

define cuda_program_rule
$(CUDA_BUILD)/$(notdir $(1:_main.c=)): $(CUDA_BUILD)/obj/$(1:.c=.o) $(CUDA_BUILD)/libshardlab.a
	$$(CC) $$(LDFLAGS) $$^ -o $$@ $$(CUDA_LDLIBS)
endef
$(foreach s,$(MAIN_SRC),$(eval $(call cuda_program_rule,$(s))))

$(CUDA_BUILD)/tests/%: $(CUDA_BUILD)/obj/tests/%.o $(CUDA_BUILD)/libshardlab.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) -lcmocka

clean:
	rm -rf build build-san build-fuzz build-cuda

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
-include $(shell find build-fuzz -name '*.d' 2>/dev/null)
-include $(shell find $(CUDA_BUILD) -name '*.d' 2>/dev/null)
