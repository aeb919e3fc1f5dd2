# tests/cudasim/cudasim.mk - the CUDA simulator's build and test rules,
# included by the Makefile. Nothing here needs nvcc or the CUDA toolkit: the
# CUDA headers are tests/cudasim/include, the compiler is the host's C++.
#
#   $(CUDASIM)/lib/libcudasim.so              the runtime, kernel executor and fibers (runtime.cc)
#   $(CUDASIM)/lib/libcublas.so.cudasim        the cuBLAS the CUDA engine opens (cublas.cc)
#   $(CUDASIM)/lib/libncclsim.so               NCCL between processes, on the simulator's streams (nccl.cc)
#   $(CUDASIM)/gen/kernels/cuda/NAME.cc        kernels/cuda/NAME.cu, launches rewritten (cu2cc.py)
#   $(CUDASIM)/tests/gpu/test_NAME             every tests/gpu/test_NAME.c
#   $(CUDASIM)/tests/cudasim/test_cudasim      the simulator's own test
#   $(CUDASIM)/bin/rowshift-worker             the worker with the CUDA engine on simulated kernels and
#                                              the NCCL transport on the simulated NCCL
#   $(CUDASIM)/run/NAME                        what tests/run.sh runs: one wrapper per test (a skip
#                                              fails: under the simulator every test must run)
#
#   make cudasim        build all of it
#   make cudasim-run    run it through tests/run.sh (make test and make test-cudasim do)

CUDASIM := $(BUILD)/cudasim
CUDASIM_INC := -Itests/cudasim/include
CUDASIM_CXXFLAGS := -std=c++17 -g $(OPT) -fPIC -Wall -Wextra $(WERROR) -MMD -MP
# .cu files are compiled as nvcc would see them: cuda_runtime.h included first, no contraction into FMAs
CUDASIM_CUFLAGS = $(CUDASIM_CXXFLAGS) -ffp-contract=off -include cuda_runtime.h $(CUDASIM_MUTATE_CUFLAGS)
CUDASIM_RT := $(CUDASIM)/lib/libcudasim.so
CUDASIM_BLAS := $(CUDASIM)/lib/libcublas.so.cudasim
CUDASIM_NCCL := $(CUDASIM)/lib/libncclsim.so
# What the simulator builds from (tests/cudasim/mutate.py points these at planted copies)
CUDASIM_CU_SRCS := $(wildcard kernels/cuda/*.cu)
CUDASIM_ENGINE_SRC := worker/engine_cuda.c
CUDASIM_MUTATE_CUFLAGS :=
CUDASIM_KERNEL_OBJS := $(patsubst %.cu,$(CUDASIM)/obj/%.o,$(CUDASIM_CU_SRCS))
CUDASIM_TEST_SRCS := $(wildcard tests/gpu/test_*.c)
CUDASIM_SUPPORT_OBJS := $(patsubst %.c,$(CUDASIM)/obj/%.o,\
	$(filter-out $(wildcard tests/gpu/test_*.c tests/gpu/bench_*.c),$(wildcard tests/gpu/*.c)) \
	worker/transport_nccl.c tests/unit/transport_conformance.c)
CUDASIM_TEST_BINS := $(CUDASIM_TEST_SRCS:tests/gpu/%.c=$(CUDASIM)/tests/gpu/%) $(CUDASIM)/tests/cudasim/test_cudasim
CUDASIM_WORKER := $(CUDASIM)/bin/rowshift-worker
CUDASIM_WORKER_OBJS := $(CUDASIM)/obj/worker/main.o $(CUDASIM)/obj/$(CUDASIM_ENGINE_SRC:.c=.o) \
	$(CUDASIM)/obj/worker/transport_nccl.o $(CUDASIM_KERNEL_OBJS)
# the scripts that run under the simulator (train_gpu.sh's and train_nccl.sh's GPU workers are the simulated
# worker; train_nccl.sh's with 2 workers and up, each process a device of its own)
CUDASIM_RUNS := $(CUDASIM_TEST_BINS:$(CUDASIM)/tests/%=$(CUDASIM)/run/%) $(CUDASIM)/run/train_gpu $(CUDASIM)/run/train_nccl
# Simulated training runs 18 steps (the elastic run rescales at 6 and 12), train_gpu.sh's default
# on a GPU too: the simulator is slow, and the plain float sums' check ("deterministic": false)
# holds at 1e-5 only before dlrm-small's runs drift apart (train_gpu.sh says why). The
# deterministic runs must end with the same bits at any length.
CUDASIM_TRAIN_STEPS ?= 18

.PHONY: cudasim cudasim-run test-cudasim

cudasim: deps $(CUDASIM_RT) $(CUDASIM_BLAS) $(CUDASIM_NCCL) $(CUDASIM_TEST_BINS) $(CUDASIM_WORKER) $(CUDASIM_RUNS)

# Runs after `make all` (make test) or with the binaries it needs built (make test-cudasim); train_gpu and
# train_nccl, the longest, first (run.sh runs two at a time).
cudasim-run: cudasim $(BINS)
	@BUILD=$(BUILD) bash tests/run.sh cudasim $(CUDASIM)/run/train_gpu $(CUDASIM)/run/train_nccl \
		$(sort $(filter-out %/train_gpu %/train_nccl,$(CUDASIM_RUNS)))

$(CUDASIM_RT): tests/cudasim/runtime.cc | deps
	@mkdir -p $(@D)
	$(CXX) $(CUDASIM_INC) $(CPPFLAGS) $(CUDASIM_CXXFLAGS) -shared -Wl,-soname,libcudasim.so $< -o $@ -ldl -lpthread

$(CUDASIM_BLAS): tests/cudasim/cublas.cc $(CUDASIM_RT)
	@mkdir -p $(@D)
	$(CXX) $(CUDASIM_INC) $(CPPFLAGS) $(CUDASIM_CXXFLAGS) -shared -Wl,-soname,libcublas.so.cudasim $< -o $@ \
		-L$(CUDASIM)/lib -lcudasim -Wl,-rpath,'$$ORIGIN'

$(CUDASIM_NCCL): tests/cudasim/nccl.cc $(CUDASIM_RT)
	@mkdir -p $(@D)
	$(CXX) $(CUDASIM_INC) $(CPPFLAGS) $(CUDASIM_CXXFLAGS) -shared -Wl,-soname,libncclsim.so $< -o $@ \
		-L$(CUDASIM)/lib -lcudasim -Wl,-rpath,'$$ORIGIN'

$(CUDASIM)/gen/%.cc: %.cu tests/cudasim/cu2cc.py
	@mkdir -p $(@D)
	python3 tests/cudasim/cu2cc.py $< $@

$(CUDASIM)/obj/%.o: $(CUDASIM)/gen/%.cc | deps
	@mkdir -p $(@D)
	$(CXX) $(CUDASIM_INC) $(CPPFLAGS) $(CUDASIM_CUFLAGS) -c $< -o $@

$(CUDASIM)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(CUDASIM_INC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# the CUDA engine and the NCCL transport, on the simulated NCCL
$(CUDASIM)/obj/worker/main.o: CPPFLAGS += -DRS_HAVE_CUDA -DRS_HAVE_NCCL

CUDASIM_LDLIBS = -L$(CUDASIM)/lib -lncclsim -lcudasim -lstdc++ -ldl $(LDLIBS)

$(CUDASIM)/tests/gpu/%: $(CUDASIM)/obj/tests/gpu/%.o $(CUDASIM_SUPPORT_OBJS) $(CUDASIM_KERNEL_OBJS) $(LIB) $(CUDASIM_RT) \
		$(CUDASIM_NCCL)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $(filter %.o %.a,$^) -Wl,-rpath,'$$ORIGIN/../../lib' $(CUDASIM_LDLIBS) -o $@

$(CUDASIM)/tests/cudasim/test_cudasim: $(CUDASIM)/obj/tests/cudasim/test_cudasim.o $(CUDASIM_RT) $(CUDASIM_BLAS) \
		$(CUDASIM_NCCL)
	@mkdir -p $(@D)
	$(CXX) $(CUDASIM_CXXFLAGS) $(LDFLAGS) $< -Wl,-rpath,'$$ORIGIN/../../lib' -L$(CUDASIM)/lib -lcudasim -ldl -lpthread -o $@

$(CUDASIM_WORKER): $(CUDASIM_WORKER_OBJS) $(LIB) $(CUDASIM_RT) $(CUDASIM_BLAS) $(CUDASIM_NCCL)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $(filter %.o %.a,$^) -Wl,-rpath,'$$ORIGIN/../lib' $(CUDASIM_LDLIBS) -o $@

# One wrapper per test for tests/run.sh: leaks fail the kernel tests; a skip (77) is a failure here.
$(CUDASIM)/run/%: tests/cudasim/cudasim.mk
	@mkdir -p $(@D)
	@{ echo '#!/bin/sh'; echo '# generated by tests/cudasim/cudasim.mk: $* under the CUDA simulator'; \
	  case $* in \
	  train_gpu) echo 'RS_GPU_WORKER_BIN="$(abspath $(CUDASIM_WORKER))" RS_TRAIN_GPU_STEPS=$(CUDASIM_TRAIN_STEPS) bash tests/gpu/train_gpu.sh "$$@"' ;; \
	  train_nccl) echo 'RS_GPU_WORKER_BIN="$(abspath $(CUDASIM_WORKER))" RS_NCCL_WORKERS=2 RS_TRAIN_GPU_STEPS=$(CUDASIM_TRAIN_STEPS) bash tests/gpu/train_nccl.sh "$$@"' ;; \
	  *) echo 'RS_CUDASIM_LEAK_CHECK=1 "$(CUDASIM)/tests/$*" "$$@"' ;; \
	  esac; \
	  echo 'rc=$$?'; \
	  echo '[ $$rc = 77 ] && { echo "FAILED: $* skipped under the CUDA simulator, where it must run"; exit 1; }'; \
	  echo 'exit $$rc'; } >$@.tmp && chmod +x $@.tmp && mv $@.tmp $@

-include $(shell find $(CUDASIM)/obj $(CUDASIM)/lib -name '*.d' 2>/dev/null)
