# rowshift build.
#
#   make            build everything into build/ (binaries in build/bin/)
#   make test       build and run every test (what CI runs)
#   make demo       the main job on one machine
#   make static     the checks of the tree (layers, file sizes)
#   make unit       the unit tests
#   make test-cudasim  the GPU tests on the CUDA simulator (tests/cudasim/)
#   make asan       unit tests under AddressSanitizer + UBSan
#   make fuzz       every fuzz target for FUZZ_SECONDS each (libFuzzer, clang)
#   make bench      benchmarks, each figure beside its reference
#   make test-gpu, make bench-gpu  GPU tests and benchmarks (need a CUDA device)
#
# Sources are found by directory, so adding a module is adding its files.
# Each layer is its own archive, and a binary links only the layers it may
# use (common <- kernels <- worker; common <- coordinator; common <- ctl;
# scripts/checklayers.py checks the includes):
#   LAYER/*.c (LAYER: common kernels worker coordinator) -> build/lib/librowshift_LAYER.a
#   ctl/*.c                                     -> build/bin/rowshiftctl
#   kernels/cuda/*.cu, worker/transport_nccl.c,
#   worker/engine_cuda.c                        -> build/lib/librowshift_cuda.a (when nvcc exists; the
#                                                  worker then links it and picks a GPU when it has one)
#   tests/unit/test_NAME.c                      -> one cmocka binary per module
#   tests/unit/*.c not named test_*             -> support code linked into every unit test
#   tests/unit/test_alloc_NAME.c                -> torture tests: linked with tests/unit/alloc/ (failing allocations)
#   tests/gpu/test_NAME.c, bench_NAME.c         -> GPU test and benchmark binaries (when nvcc exists)
#   tests/gpu/NAME.sh, bench_NAME.sh            -> GPU test and benchmark scripts (exit 77 without a device)
#   tests/gpu/*.c not named test_* or bench_*   -> support code linked into every GPU binary
#   tests/fuzz/fuzz_NAME.c                      -> libFuzzer targets, corpus in tests/fuzz/corpus/NAME/
#   tests/bench/bench_NAME.c                    -> benchmark binaries
#   tests/static/NAME.sh                        -> checks of the source tree (layers, file sizes), run first
#   tests/integration/NAME.sh                   -> multi-process tests, run after the unit tests

BUILD ?= build
CC ?= cc
OPT ?= -O2
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
WERROR ?=

# hardening (off in the sanitizer and fuzzing builds, which instrument instead)
HARDEN_CFLAGS ?= -fstack-protector-strong -D_FORTIFY_SOURCE=2 -fPIE
HARDEN_LDFLAGS ?= -pie -Wl,-z,relro,-z,now

CPPFLAGS += -I. -D_GNU_SOURCE
CFLAGS += -std=c11 -g $(OPT) -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral $(WERROR) -MMD -MP \
	$(HARDEN_CFLAGS)
LDFLAGS += $(HARDEN_LDFLAGS)
LDLIBS += -lwebsockets -lcurl -ljansson -lcrypto -lz -lpthread -lm
NVCCFLAGS ?= -O3 -std=c++17 -MMD -MP $(CUDA_ARCHS) -Xcompiler -Wall,-fPIC -I. -D_GNU_SOURCE $(if $(WERROR),-Werror all-warnings -Xcompiler -Werror)

MAINS := coordinator/main.c worker/main.c ctl/rowshiftctl.c
# C sources that need the CUDA and NCCL headers: built into the CUDA library, only where nvcc exists
CUDA_C_SRCS := $(wildcard worker/transport_nccl.c worker/engine_cuda.c)
# the layers, each before the layers it stands on (the order a linker needs)
LAYERS := coordinator worker kernels common
layer_objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(MAINS) $(CUDA_C_SRCS),$(wildcard $(1)/*.c)))
layer_lib = $(BUILD)/lib/librowshift_$(1).a
LIB := $(foreach l,$(LAYERS),$(call layer_lib,$(l)))

BINS := $(BUILD)/bin/rowshift-coordinator $(BUILD)/bin/rowshift-worker $(BUILD)/bin/rowshiftctl

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_SUPPORT := $(filter-out $(UNIT_SRCS),$(wildcard tests/unit/*.c))
UNIT_SUPPORT_OBJS := $(UNIT_SUPPORT:%.c=$(BUILD)/obj/%.o)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%)

BENCH_SRCS := $(wildcard tests/bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/tests/bench/%)
# a worker that speaks the control protocol and trains nothing (swarm.sh, bench_swarm.sh)
MEMBER_BIN := $(BUILD)/tests/swarm/rowshift-member

FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=%)

ifneq ($(NVCC),)
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA_C_OBJS := $(CUDA_C_SRCS:%.c=$(BUILD)/obj/%.o)
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.o) $(CUDA_C_OBJS)
CUDA_LIB := $(BUILD)/lib/librowshift_cuda.a
GPU_SRCS := $(wildcard tests/gpu/test_*.c tests/gpu/bench_*.c)
GPU_SUPPORT_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(GPU_SRCS),$(wildcard tests/gpu/*.c))) \
	$(BUILD)/obj/tests/unit/transport_conformance.o
GPU_BINS := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
# the kernel and transport tests, then the scripts (training on the GPU engine, compute-sanitizer)
GPU_TESTS := $(filter $(BUILD)/tests/gpu/test_%,$(GPU_BINS)) $(filter-out tests/gpu/bench_%,$(wildcard tests/gpu/*.sh))
GPU_BENCHES := $(filter $(BUILD)/tests/gpu/bench_%,$(GPU_BINS)) $(wildcard tests/gpu/bench_*.sh)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib -lcublas -lcudart -lnccl -lstdc++
# C code that includes CUDA or NCCL headers (-isystem: their warnings are not ours)
$(CUDA_C_OBJS) $(BUILD)/obj/tests/gpu/%.o: CPPFLAGS += -isystem $(CUDA_HOME)/include
# The worker: the CUDA engine and NCCL, with the static CUDA runtime (it finds the driver at run time, when there is one)
WORKER_CUDA := $(CUDA_LIB)
WORKER_CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib \
	-lnccl -lcudart_static -ldl -lrt -lstdc++
$(BUILD)/obj/worker/main.o: CPPFLAGS += -DRS_HAVE_CUDA -DRS_HAVE_NCCL -isystem $(CUDA_HOME)/include
endif

.PHONY: all deps tools libs test static unit fuzz-build fuzz-bins integration asan ubsan fuzz fuzz-smoke bench bench-gpu test-gpu soak demo clean
.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
.SECONDARY:

all: deps $(BINS) $(UNIT_BINS) $(BENCH_BINS) $(MEMBER_BIN) $(GPU_BINS)

libs: $(LIB)

deps:
	@sh scripts/deps.sh

# npm tools for the tests (playwright-core), into tools/
tools: deps
	@sh scripts/tools.sh

# Every compile waits for deps: with -j a fresh machine must install the headers first.
$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The dashboard page is built into the coordinator (.incbin in job_status.c).
$(BUILD)/obj/coordinator/job_status.o: coordinator/dashboard.html

$(BUILD)/obj/%.o: %.cu | deps
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

define layer_archive
$(call layer_lib,$(1)): $(call layer_objs,$(1))
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call layer_archive,$(l))))

$(CUDA_LIB): $(CUDA_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

COORDINATOR_LIBS := $(call layer_lib,coordinator) $(call layer_lib,common)
$(BUILD)/bin/rowshift-coordinator: $(BUILD)/obj/coordinator/main.o $(COORDINATOR_LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

WORKER_LIBS := $(call layer_lib,worker) $(call layer_lib,kernels) $(call layer_lib,common)
$(BUILD)/bin/rowshift-worker: $(BUILD)/obj/worker/main.o $(WORKER_CUDA) $(WORKER_LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $(BUILD)/obj/worker/main.o $(WORKER_CUDA) $(WORKER_LIBS) $(WORKER_CUDA_LDLIBS) $(LDLIBS) -o $@

CTL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard ctl/*.c))
$(BUILD)/bin/rowshiftctl: $(CTL_OBJS) $(call layer_lib,common)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $(foreach f,$(WRAP_$*),-Wl,--wrap=$(f)) $^ -lcmocka $(LDLIBS) -o $@

# Unit tests that stand in for functions at a module boundary: WRAP_test_NAME lists them (-Wl,--wrap=each).
WRAP_test_kube_members := rs_kube_configmap_read rs_kube_configmap_write rs_kube_namespace rs_lease_tick rs_lease_release

# Torture tests: every allocation goes through tests/unit/alloc/alloc_fail.c, which can fail the N-th.
ALLOC_WRAP := $(foreach f,malloc calloc realloc strdup strndup asprintf vasprintf posix_memalign aligned_alloc,-Wl,--wrap=$(f))
$(BUILD)/tests/unit/test_alloc_%: $(BUILD)/obj/tests/unit/test_alloc_%.o $(BUILD)/obj/tests/unit/alloc/alloc_fail.o \
		$(UNIT_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $(ALLOC_WRAP) $^ -lcmocka $(LDLIBS) -o $@

$(BUILD)/tests/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(MEMBER_BIN): $(BUILD)/obj/tests/swarm/member.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(GPU_SUPPORT_OBJS) $(CUDA_LIB) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(CUDA_LDLIBS) -lcmocka $(LDLIBS) -o $@

include tests/cudasim/cudasim.mk

# --- tests -------------------------------------------------------------------

# Every test binary and script, run with a timeout each; prints one summary
# line ("N passed, N failed, N skipped") and fails when any test failed.
# Measured and left out (2 cores): the fuzz phase run beside the others in a
# niced session of its own (10m38 against 10m43 in clean-clone CI, for a
# background job's signal handling and less fuzzing).
test: all tools
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) bash tests/run.sh static $(wildcard tests/static/*.sh)
	@BUILD=$(BUILD) bash tests/run.sh unit $(UNIT_BINS)
	@BUILD=$(BUILD) bash tests/run.sh gpu $(GPU_TESTS)
	@[ -n "$(GPU_TESTS)" ] || { echo "== gpu: skipped: no CUDA toolkit (nvcc), the CUDA code was not built"; \
	  echo "SKIP gpu (all): no CUDA toolkit (nvcc), the CUDA code was not built" >>$(BUILD)/test-results; }
	@$(MAKE) --no-print-directory cudasim-run
	@$(MAKE) --no-print-directory fuzz-smoke
	@BUILD=$(BUILD) bash tests/run.sh integration $(wildcard tests/integration/*.sh)
	@BUILD=$(BUILD) bash tests/run.sh --summary

unit: deps $(UNIT_BINS)
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) bash tests/run.sh unit $(UNIT_BINS)
	@BUILD=$(BUILD) bash tests/run.sh --summary

static:
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) bash tests/run.sh static $(wildcard tests/static/*.sh)
	@BUILD=$(BUILD) bash tests/run.sh --summary

integration: deps tools $(BINS) $(MEMBER_BIN)
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) bash tests/run.sh integration $(wildcard tests/integration/*.sh)
	@BUILD=$(BUILD) bash tests/run.sh --summary

SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
asan ubsan:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/asan OPT="-O1 $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" NVCC= \
		HARDEN_CFLAGS= HARDEN_LDFLAGS= unit

# libFuzzer needs clang; the whole library is rebuilt with it under build/fuzz.
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 2

fuzz-build: deps
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 $(FUZZ_FLAGS)" NVCC= HARDEN_CFLAGS= \
		HARDEN_LDFLAGS= libs
	@$(MAKE) --no-print-directory fuzz-bins

# Linked once the libraries above exist (a make of its own, so that their dates are read after they are built).
FUZZ_LIBS := $(foreach l,$(LAYERS),$(FUZZ_BUILD)/lib/librowshift_$(l).a)
fuzz-bins: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/bin/fuzz_%)
$(FUZZ_BUILD)/bin/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIBS)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -g -O1 -MMD -MP -fsanitize=fuzzer,address,undefined $< $(FUZZ_LIBS) $(LDLIBS) -o $@
-include $(wildcard $(FUZZ_BUILD)/bin/*.d)

# Each target replays its seed corpus and explores for a few seconds.
fuzz-smoke: fuzz-build
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) bash tests/run.sh fuzz $(FUZZ_NAMES:%=$(FUZZ_BUILD)/bin/fuzz_%)

fuzz: fuzz-build
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/run.sh fuzz $(FUZZ_NAMES:%=$(FUZZ_BUILD)/bin/fuzz_%)
	@BUILD=$(BUILD) bash tests/run.sh --summary

bench: all
	@BUILD=$(BUILD) bash tests/bench/run.sh $(BENCH_BINS) $(wildcard tests/bench/bench_*.sh)

test-gpu: all
	@[ -n "$(GPU_TESTS)" ] || { echo "test-gpu: no CUDA toolkit (nvcc): nothing to run"; exit 1; }
	@rm -f $(BUILD)/test-results
	@BUILD=$(BUILD) RS_REQUIRE_GPU=1 bash tests/run.sh gpu $(GPU_TESTS)
	@BUILD=$(BUILD) bash tests/run.sh --summary

# The GPU tests on the CUDA simulator (tests/cudasim): no GPU or nvcc needed; make test runs them too.
test-cudasim: deps $(BINS)
	@rm -f $(BUILD)/test-results
	@$(MAKE) --no-print-directory cudasim-run
	@BUILD=$(BUILD) bash tests/run.sh --summary

bench-gpu: all
	@[ -n "$(GPU_BENCHES)" ] || { echo "bench-gpu: no CUDA toolkit (nvcc) or no GPU benchmark: nothing to run"; exit 1; }
	@BUILD=$(BUILD) RS_REQUIRE_GPU=1 bash tests/bench/run.sh $(GPU_BENCHES)

demo: all
	@BUILD=$(BUILD) bash scripts/demo.sh

# A long job under random faults (tests/soak/chaos.sh): SOAK_STEPS (default 20000), SOAK_SEED.
soak: all
	@BUILD=$(BUILD) bash tests/soak/chaos.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
