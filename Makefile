# siamese-gpt: `make train` trains a small model on the CPU, `make test` runs every test.
# GPU code is always compiled where nvcc is (see GPU_ARCHS); GPU tests run only where a GPU is present.

# the host-side code both trainers share, one header per role (host/train_loop.h lists them)
HOST       = $(wildcard host/*.h)
CXX       ?= g++
# -fno-math-errno: sqrt and the like need not set errno (nothing here reads it), so that a loop that calls them can be
# vectorized, AdamW's among them (d12's step 16% faster on an AVX-512 Xeon); the results are the same bits
CXXFLAGS  ?= -O3 -march=native -fno-math-errno -std=c++17 -Wall -Wextra
OMPFLAGS  ?= -fopenmp
NVCC      ?= nvcc
# The GPUs the CUDA trainers are built for, as compute capabilities: GPU_ARCHS="80 86 89 90" builds for that list;
# by default for the GPU of this machine (nvidia-smi), and where there is none for every supported generation in one
# fat binary (so that CI compiles each): 80 (A100, A30), 86 (RTX 30, A10, A40, A6000), 89 (RTX 40, L4, L40), 90
# (H100, H200). A newer GPU takes the PTX of the newest listed, compiled by its driver. Older ones (sm_75 and
# below: V100, T4, RTX 20) are not supported: the bf16 tensor cores need sm_80; make stops, and the trainer says so.
# The test programs and tools, which run only on the GPU they are built on, take one architecture, TEST_ARCHS
# (the last of GPU_ARCHS unless set).
SUPPORTED_ARCHS := 80 86 89 90
DETECTED_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d ' .' | grep -E '^[0-9]+$$')
GPU_ARCHS ?= $(or $(DETECTED_ARCH),$(SUPPORTED_ARCHS))
TEST_ARCHS ?= $(lastword $(GPU_ARCHS))
$(foreach a,$(GPU_ARCHS) $(TEST_ARCHS),$(if $(shell [ "$(a)" -ge 80 ] 2> /dev/null && echo ok),,\
    $(error GPU_ARCHS: '$(a)' is not a compute capability of 80 or more (sm_$(a)); bf16 needs sm_80: A100, RTX 30 or newer)))
gencode = $(foreach a,$(1),-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_$(lastword $(1)),code=compute_$(lastword $(1))
# --threads 0: nvcc compiles the architectures of a fat build in parallel, one per core
NVBASE    ?= -O3 -std=c++17 -lineinfo --threads 0
NPROC     := $(shell nproc 2> /dev/null || echo 2)
NVFLAGS   ?= $(NVBASE) $(call gencode,$(GPU_ARCHS))
NVTESTFLAGS ?= $(NVBASE) $(call gencode,$(TEST_ARCHS))
NVLIBS    ?= -lcublas -lcublasLt
PYTHON    ?= python3
TORCH_PY  ?= /usr/bin/python3
DOCTEST   ?= /usr/include/doctest
NORM      ?= siamese
# the CUDA trainer's precision (llm.c's variable): BF16 (bf16 activations and products, float32 master weights and
# AdamW) or FP32. train_gpt2fp32cu and tests/test_gpu are always FP32, tests/test_gpu_bf16 always BF16.
PRECISION ?= BF16
ifeq ($(PRECISION),BF16)
PRECISION_FLAG = -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
PRECISION_FLAG = -DENABLE_FP32
else
$(error PRECISION must be BF16 or FP32, not '$(PRECISION)')
endif
# cuDNN's fused attention, llm.c's switch: USE_CUDNN=1 compiles attention_cudnn.cpp (cuDNN's graph API, bf16 only)
# into train_gpt2cu and tools/profile_gpu and makes it train_gpt2cu's attention (ATTENTION=cudnn, unless ATTENTION
# says otherwise); tests/test_gpu_cudnn, the bf16 test program with the cuDNN cases, always has it. cuDNN itself
# (cudnn.h, libcudnn.so.9) comes from the CUDA toolkit's folders, or from CUDNN_PATH (its include/ and lib/: e.g.
# PyTorch's site-packages/nvidia/cudnn); its C++ frontend, header-only, from CUDNN_FRONTEND_PATH/include, which
# `.ci/deps test` unpacks from PyPI's nvidia-cudnn-frontend wheel into .deps/cudnn-frontend.
USE_CUDNN ?= 0
CUDNN_PATH ?=
CUDNN_FRONTEND_PATH ?= .deps/cudnn-frontend
ifeq ($(USE_CUDNN),1)
ATTENTION ?= cudnn
else ifneq ($(USE_CUDNN),0)
$(error USE_CUDNN must be 0 or 1, not '$(USE_CUDNN)')
endif
# the attention of train_gpt2cu: materialized (cuBLAS, the T x T matrix kept), flash (attention.cuh, none kept) or
# cudnn (attention_cudnn.cpp, none kept; needs USE_CUDNN=1 and PRECISION=BF16)
ATTENTION ?= materialized
ifeq ($(ATTENTION),flash)
PRECISION_FLAG += -DFLASH_ATTENTION
else ifeq ($(ATTENTION),cudnn)
ifneq ($(USE_CUDNN),1)
$(error ATTENTION=cudnn needs USE_CUDNN=1)
endif
ifneq ($(PRECISION),BF16)
$(error the cuDNN attention needs PRECISION=BF16: cuDNN's fused attention takes bf16 or fp16, not float32)
endif
PRECISION_FLAG += -DCUDNN_ATTENTION
else ifneq ($(ATTENTION),materialized)
$(error ATTENTION must be materialized, flash or cudnn, not '$(ATTENTION)')
endif
# what the cuDNN attention adds to a bf16 program: the flag, and at link time attention_cudnn.o and libcudnn (named
# by its soname: PyTorch's wheels ship libcudnn.so.9 without the libcudnn.so link)
CUDNN_LIB_DIR = $(if $(CUDNN_PATH),$(abspath $(CUDNN_PATH))/lib)
CUDNN_LINK = attention_cudnn.o $(if $(CUDNN_LIB_DIR),-L$(CUDNN_LIB_DIR) -Xlinker -rpath=$(CUDNN_LIB_DIR)) \
    -l:libcudnn.so.9
ifeq ($(USE_CUDNN)$(PRECISION),1BF16)
TRAINER_CUDNN_FLAG = -DENABLE_CUDNN
TRAINER_CUDNN_OBJ = attention_cudnn.o
TRAINER_CUDNN_LINK = $(CUDNN_LINK)
endif

HAVE_NVCC := $(shell command -v $(NVCC) 2> /dev/null)

# Data parallelism (host/distributed.h): both trainers are built with MPI where OpenMPI's mpicxx is installed
# (Debian: openmpi-bin libopenmpi-dev; .ci/deps test installs them), and the CUDA trainer also with NCCL where its
# header is beside nvcc (the CUDA toolkit's) or in /usr/include; elsewhere without, and they work as one process.
# MPI_FLAGS and MPI_LIBS can be given for an MPI whose mpicxx does not answer OpenMPI's --showme.
MPICXX    ?= mpicxx
HAVE_MPI  := $(shell command -v $(MPICXX) 2> /dev/null)
ifneq ($(HAVE_MPI),)
MPI_FLAGS ?= -DUSE_MPI $(shell $(MPICXX) --showme:compile 2> /dev/null)
MPI_LIBS  ?= $(filter-out -lmpi_cxx,$(shell $(MPICXX) --showme:link 2> /dev/null))
NCCL_H    := $(firstword $(wildcard $(dir $(HAVE_NVCC))../include/nccl.h /usr/include/nccl.h))
endif
# nvcc takes MPI's include, define, library-path and library flags, and -pthread for the host compiler
NV_MPI    = $(if $(HAVE_MPI),$(filter -I% -D%,$(MPI_FLAGS)) $(filter -L% -l%,$(MPI_LIBS)) \
              $(if $(filter -pthread,$(MPI_FLAGS) $(MPI_LIBS)),-Xcompiler -pthread),)
NV_NCCL   = $(if $(NCCL_H),-DUSE_NCCL -lnccl,)

CPU_BINS  = reference_cpu tests/test_gradients tests/test_reference tests/test_gemm tests/ref_tool
GPU_BINS  = $(if $(HAVE_NVCC),train_gpt2cu train_gpt2fp32cu tests/test_gpu tests/test_gpu_bf16 tools/profile_gpu,)

.PHONY: all data train test clean deps bench-cpu bench-gpu gpu-prep emulator FORCE
.PHONY: print-gpu-archs print-test-archs print-cxxflags print-doctest
all: $(CPU_BINS) $(GPU_BINS)

# the architectures make builds the CUDA programs for, and the test programs (tests/test_archs.sh asks)
print-gpu-archs: ; @echo $(GPU_ARCHS)
print-test-archs: ; @echo $(TEST_ARCHS)
# the C++ flags of the CPU programs, and doctest's folder (tests/test_clang.sh compiles them with clang++)
print-cxxflags: ; @echo $(CXXFLAGS) $(OMPFLAGS)
print-doctest: ; @echo $(DOCTEST)

reference_cpu: reference_cpu.cpp $(HOST) .mpi
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(MPI_FLAGS) -o $@ $< $(MPI_LIBS)

# Tests include reference_cpu.cpp as a library and use only part of it: unused static functions are expected there.
TESTFLAGS = $(CXXFLAGS) $(OMPFLAGS) -Wno-unused-function -I$(DOCTEST)

# the float64 build of the same reference, for the finite-difference checks
tests/test_gradients: tests/test_gradients.cpp tests/finite_differences.h reference_cpu.cpp $(HOST)
	$(CXX) $(TESTFLAGS) -DREAL=double -o $@ $<

tests/test_reference: tests/test_reference.cpp reference_cpu.cpp $(HOST)
	$(CXX) $(TESTFLAGS) -o $@ $<

# host/gemm.h alone, every register tile (tests/test_gemm.cpp)
tests/test_gemm: tests/test_gemm.cpp host/gemm.h host/utils.h
	$(CXX) $(TESTFLAGS) -o $@ $<

# the matrix products alone at the step's shapes, for tests/bench_cpu.py (a measurement, not a test)
tests/bench_gemm: tests/bench_gemm.cpp host/gemm.h host/utils.h
	$(CXX) $(TESTFLAGS) -o $@ $<

# the float32 reference's outputs for one step, for the independent PyTorch check (tests/torch_check.py)
tests/ref_tool: tests/ref_tool.cpp reference_cpu.cpp $(HOST)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) -o $@ $<

# the Debian packages each entry point needs (installed only where missing)
deps:
	@bash .ci/deps test

# the CUDA trainer in $(PRECISION) (default bf16) with $(ATTENTION) attention, and always in float32 with the
# materialized attention (-f 1 there for TF32 matrix products). A stamp file remembers the last build's choices, so
# that changing PRECISION, ATTENTION or USE_CUDNN rebuilds; .mpi does the same for MPI and NCCL.
CUDA_SRCS = train_gpt2.cu siamese.cuh hc.cuh attention.cuh cuda_common.cuh $(HOST) attention_cudnn.h
train_gpt2cu: $(CUDA_SRCS) .precision .mpi $(TRAINER_CUDNN_OBJ)
	$(NVCC) $(NVFLAGS) $(PRECISION_FLAG) $(TRAINER_CUDNN_FLAG) -o $@ $< $(NVLIBS) $(TRAINER_CUDNN_LINK) $(NV_MPI) $(NV_NCCL)

train_gpt2fp32cu: $(CUDA_SRCS) .precision .mpi
	$(NVCC) $(NVFLAGS) -DENABLE_FP32 -o $@ $< $(NVLIBS) $(NV_MPI) $(NV_NCCL)

.precision: FORCE
	@echo $(PRECISION) $(ATTENTION) $(USE_CUDNN) $(GPU_ARCHS) | cmp -s - $@ || echo $(PRECISION) $(ATTENTION) $(USE_CUDNN) $(GPU_ARCHS) > $@

# cuDNN's attention, host code only, compiled once (the frontend's headers take about a minute) and linked into the
# programs that use it. The frontend's own headers are system headers here (their warnings are not ours);
# host/utils.h's unused static functions are expected, as in the tests.
CUDNN_INCLUDES = -isystem $(CUDNN_FRONTEND_PATH)/include $(if $(CUDNN_PATH),-isystem $(CUDNN_PATH)/include)
CUDNN_HEADER = $(firstword $(wildcard $(if $(CUDNN_PATH),$(CUDNN_PATH)/include/cudnn.h, \
    $(dir $(HAVE_NVCC))../include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h)))
attention_cudnn.o: attention_cudnn.cpp attention_cudnn.h host/utils.h
	@[ -f $(CUDNN_FRONTEND_PATH)/include/cudnn_frontend.h ] || { echo "error: the cuDNN frontend's headers are not in" \
	    "$(CUDNN_FRONTEND_PATH)/include: run 'bash .ci/deps test' (it unpacks PyPI's nvidia-cudnn-frontend there) or" \
	    "set CUDNN_FRONTEND_PATH"; exit 1; }
	@[ -n "$(CUDNN_HEADER)" ] || { echo "error: cuDNN's cudnn.h is not" \
	    "$(if $(CUDNN_PATH),in $(CUDNN_PATH)/include,with the CUDA toolkit or in /usr/include): install cuDNN 9 or" \
	    "set CUDNN_PATH to a folder with include/ and lib/ (e.g. PyTorch's site-packages/nvidia/cudnn)"; exit 1; }
	$(NVCC) -O2 -std=c++17 -Xcompiler -Wall,-Wextra,-Wno-unused-function $(CUDNN_INCLUDES) -c -o $@ $<

# the same for the MPI and NCCL the trainers were built with: installing OpenMPI later rebuilds them
MPI_STAMP = mpi: $(MPI_FLAGS) $(MPI_LIBS) nccl: $(NCCL_H)
.mpi: FORCE
	@echo "$(MPI_STAMP)" | cmp -s - $@ || echo "$(MPI_STAMP)" > $@

# the GPU against the CPU reference (float build, OpenMP) in one program, once per precision; runs only where a GPU
# is present. Where make finds none (CI), they are only compiled and count their cases, so their host code is
# compiled at -O0 there (TEST_HOST_OPT), which takes 30% off each one's build; nvcc's -O is the host compiler's
# level, so the device code (cubin and PTX) is the same, byte for byte
TEST_HOST_OPT ?= $(if $(DETECTED_ARCH),-O3,-O0)
TEST_GPU_FLAGS = $(filter-out -O%,$(NVTESTFLAGS)) $(TEST_HOST_OPT) -Xcompiler -fopenmp,-march=native -I$(DOCTEST)
tests/test_gpu: tests/test_gpu.cu $(CUDA_SRCS) reference_cpu.cpp
	$(NVCC) $(TEST_GPU_FLAGS) -DENABLE_FP32 -o $@ $< $(NVLIBS) -lgomp

tests/test_gpu_bf16: tests/test_gpu.cu $(CUDA_SRCS) reference_cpu.cpp
	$(NVCC) $(TEST_GPU_FLAGS) -DENABLE_BF16 -o $@ $< $(NVLIBS) -lgomp

# the bf16 test program with the cuDNN attention: its cuDNN cases (the others are tests/test_gpu_bf16's). `make test`
# builds it wherever nvcc is, so that the cuDNN build compiles in CI; it runs only where a GPU is present.
tests/test_gpu_cudnn: tests/test_gpu.cu $(CUDA_SRCS) reference_cpu.cpp attention_cudnn.o
	$(NVCC) $(TEST_GPU_FLAGS) -DENABLE_BF16 -DENABLE_CUDNN -o $@ $< $(NVLIBS) $(CUDNN_LINK) -lgomp

# where a step's GPU time goes, part by part and layout by layout (in train_gpt2cu's precision and attention)
# the bf16 trainer and profiler with cuDNN's attention compiled in beside the other two (the default attention stays
# materialized): what tests/gpu_check.sh and tests/bench_gpu.sh run, so that one program times all three attentions
train_gpt2cu_cudnn: $(CUDA_SRCS) attention_cudnn.o
	$(NVCC) $(NVTESTFLAGS) -DENABLE_BF16 -DENABLE_CUDNN -o $@ $< $(NVLIBS) $(CUDNN_LINK)

tools/profile_gpu_cudnn: tools/profile_gpu.cu $(CUDA_SRCS) attention_cudnn.o
	$(NVCC) $(NVTESTFLAGS) -DENABLE_BF16 -DENABLE_CUDNN -o $@ $< $(NVLIBS) $(CUDNN_LINK)

tools/profile_gpu: tools/profile_gpu.cu $(CUDA_SRCS) .precision $(TRAINER_CUDNN_OBJ)
	$(NVCC) $(NVTESTFLAGS) $(PRECISION_FLAG) $(TRAINER_CUDNN_FLAG) -o $@ $< $(NVLIBS) $(TRAINER_CUDNN_LINK)

# The CUDA code on the CPU emulator (tools/cuda_emulator; g++ only: no GPU, no nvcc): the emulator's own planted-bug
# tests, and tests/test_gpu.cu in each precision, whose fast cases `make test` runs (tests/run_all.sh);
# tools/emulate_gpu.sh runs them all and the emulated trainer
EMUCC     = tools/cuda_emulator/emucc
EMU_DEPS  = $(EMUCC) $(wildcard tools/cuda_emulator/*.h)
EMU_BINS  = tests/test_emulator tests/test_gpu_emu tests/test_gpu_emu_bf16 tests/train_gpt2cu_emu
emulator: $(EMU_BINS)

tests/test_emulator: tests/test_emulator.cu $(CUDA_SRCS) $(EMU_DEPS)
	$(EMUCC) -o $@ $<

tests/test_gpu_emu: tests/test_gpu.cu $(CUDA_SRCS) reference_cpu.cpp $(EMU_DEPS)
	$(EMUCC) -DENABLE_FP32 -I$(abspath $(DOCTEST)) -o $@ $<

tests/test_gpu_emu_bf16: tests/test_gpu.cu $(CUDA_SRCS) reference_cpu.cpp $(EMU_DEPS)
	$(EMUCC) -DENABLE_BF16 -I$(abspath $(DOCTEST)) -o $@ $<

# the bf16 trainer on the emulator, for what the trainer says on devices it cannot use (tests/test_gpu_emulated.sh):
# errors before any step, so -O0 (after emucc's -O2, so it wins): built in a third of the time, and a run of it
# writes the same checkpoint, bit for bit
tests/train_gpt2cu_emu: $(CUDA_SRCS) $(EMU_DEPS)
	$(EMUCC) -O0 -DENABLE_BF16 -o $@ $<

data/kjv/kjv_train.bin:
	$(PYTHON) data/prepare.py kjv

data: data/kjv/kjv_train.bin

# The README's first command: prepare the KJV shards, train a small model of layout $(NORM) on the CPU (again
# from the start each time: --start-over replaces the previous `make train`'s files in out/$(NORM)).
train:
	@bash .ci/deps train
	@$(MAKE) --no-print-directory reference_cpu data/kjv/kjv_train.bin
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./reference_cpu --norm $(NORM) --layers 4 --channels 128 \
	    --heads 4 -b 8 -t 128 -l 2e-3 -u 20 -q 0.1 -x 300 -v 50 -s 100 -g 128 -o out/$(NORM) --start-over

# make test builds what `all` does, the emulator's programs and tests/test_gpu_cudnn, in two parts: first what g++
# builds, then nvcc's programs (cuda-bins: about half of make test's CPU time) in the background while the suites
# that run none of them go ahead (tests/run_all.sh --build-cuda; the others wait for it). cuda-bins lists the longest
# chain first (the cuDNN object, about a minute of one core, then tests/test_gpu_cudnn), so make -j starts it first.
.PHONY: cuda-bins
CUDA_TEST_BINS = $(if $(HAVE_NVCC),tests/test_gpu_cudnn) $(GPU_BINS)
cuda-bins: $(CUDA_TEST_BINS)
# what that background build writes (tests/test_exercises.py leaves it out of its check of the tree)
.PHONY: print-cuda-bins
print-cuda-bins:
	@echo $(CUDA_TEST_BINS)

test:
	@bash .ci/deps test
	@echo "make test: building the CPU programs and the CUDA emulator's test programs first (what is missing of them;" \
	    "from scratch 4.5 minutes on two cores under a load of 10, some compiles minutes long and silent), then the suites"
	@$(MAKE) --no-print-directory -j$(NPROC) $(CPU_BINS) $(EMU_BINS) data/kjv/kjv_train.bin
	TORCH_PY=$(TORCH_PY) bash tests/run_all.sh --build-cuda

# CPU speed, one table from interleaved rounds: llm.c's train_gpt2.c (from $LLMC or ../llm.c, skipped where absent),
# this trainer's layouts at d12 and at the experiments' shapes, the machine's peak (tests/bench_cpu.py: a measurement,
# not a test). BENCH_CPU_ARGS="--quick" for a short check; BENCH_CPU_BASE=other/reference_cpu to compare two builds
bench-cpu: reference_cpu
	$(PYTHON) tests/bench_cpu.py $(BENCH_CPU_ARGS)

# GPU speed for d12..d48 and each layout beside the PyTorch peer, one table (tests/bench_gpu.sh; needs a GPU; on a
# lent GPU, tests/gpu_check.sh runs it at d12 and d48 as its last stage)
bench-gpu:
	bash tests/bench_gpu.sh

# What a lent GPU machine needs beyond the working tree, in one git-ignored folder to carry with the device call
# (tests/gpu_prep.sh; docs/cuda.md): then the one call, `bash tests/gpu_check.sh` (its bench included), runs there.
GPU_PREP ?= .gpu
gpu-prep: data/kjv/kjv_train.bin
	@bash .ci/deps gpu-prep
	@DOCTEST=$(DOCTEST) bash tests/gpu_prep.sh $(GPU_PREP)

clean:
	rm -f $(CPU_BINS) train_gpt2cu train_gpt2fp32cu tests/test_gpu tests/test_gpu_bf16 tests/test_gpu_cudnn \
	    attention_cudnn.o tools/profile_gpu train_gpt2cu_cudnn tools/profile_gpu_cudnn .precision .mpi experiments/depth_probe \
	    $(EMU_BINS)

# experiments/ (docs/experiments.md): the depth probe includes the reference as a library. Not part of `all`, so
# `make test` does not depend on it; experiments/smoke_test.sh builds it when missing.
experiments: experiments/depth_probe

experiments/depth_probe: experiments/depth_probe.cpp reference_cpu.cpp $(HOST)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) -Wno-unused-function -o $@ $<

# The course unit (docs/exercises.md): functions of reference_cpu.cpp cut out between its `// EXERCISE N BEGIN` and
# `// EXERCISE N END` lines. exercise-start N=2 writes the stub, exercises/2_*.cpp (yours: git ignores it);
# exercise N=2 builds the float64 reference with its function in place of the reference's and grades it (FILE=path:
# another file); exercise-reset N=2 writes the stub over yours; exercise-solution N=2 prints the reference's own.
.PHONY: exercise exercise-start exercise-reset exercise-solution exercise-list
exercise:
	@CXX="$(CXX)" $(PYTHON) exercises/exercise.py check "$(N)" $(if $(FILE),"$(FILE)")

exercise-start exercise-reset exercise-solution:
	@$(PYTHON) exercises/exercise.py $(patsubst exercise-%,%,$@) "$(N)"

exercise-list:
	@$(PYTHON) exercises/exercise.py list
