# mini-megatron — the front door.
#   make train   build the trainer and the tools the README uses next (the first time: train_gpt, prepare_data,
#                generate and draw_pipeline only, for this machine's GPU), prepare the default data, train a small
#                GPT with TP 2 + SP + selective recompute under mpirun
#   make test    build everything and run every CTest test (unit, mpi; gpu tests skip without a GPU)
#   make bench   layer and end-to-end benchmarks (tiny shapes on CPU, and the CPU peer against PyTorch when it
#                is installed; on a GPU bench/gpu_suite.sh with the binaries make build made: checks, then rates)
#   make accuracy  every op's fp32 error against float64 next to PyTorch fp32's, and the 60-step loss deviation
#                from a float64 PyTorch run (needs PyTorch: apt-get install python3-torch)
#   make paper   the paper-scale calculator: Table 2, Figure 7 (docs/figure7.png), memory totals, MFU/HFU
#   make memory  the Table 2 grid measured on a small model on CPU, next to the formulas
#   make beyond  one measured row per technique beyond the paper (ZeRO-1/2/3, activation offloading), each figure
#                next to the formula the calculator's table uses (docs/paper.md "Beyond the paper")
#   make pictures  build/pictures/{loss,memory}.png from the last make train's log
#   (train, paper, memory and pictures build only the programs they run; test and bench build everything)
#   make deps-train  install the missing Debian packages training needs (as root; else print the command);
#                make train runs it
#   make deps    the same and what the tests need: PyTorch (Debian), transformers and cuobjdump (PyPI), for $(PYTHON), the
#                interpreter the README's Python lines use; make test, bench and accuracy run it
#   make test-emulated  every gpu test on an emulated CUDA device, no GPU needed (build-emulated/, test/emulator/),
#                memchecked; the kernel tests also in reverse thread order, the attention kernels' in the race
#                mode (build-emulated-race/); make test-emulated-full (all in the race mode, every gpu test in
#                three thread orders), make mutants: the longer checks, not in CI
#   make clean
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# CUDA architectures of a full build (make test, bench, paper, memory; CI): A100 and H100/H200.
CUDA_ARCHS ?= 80;90
# CUDA architectures of the build folder make train configures: this machine's GPUs (nvidia-smi's compute
# capability, 9.0 -> 90), or 90 when there is none (the programs then run on the CPU).
GPU_ARCHS = $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
              grep -E '^[0-9]+\.[0-9]+$$' | tr -d . | sort -u | paste -sd';')
TRAIN_ARCHS ?= $(or $(GPU_ARCHS),90)
NP ?= 2
MPIRUN ?= mpirun --oversubscribe --bind-to none
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
# What training needs (make train): the compiler and build tools, MPI, BLAS, PCRE2 (GPT-2's pre-tokenizer),
# stb (the pictures) and nlohmann-json. What only the tests and the accuracy scripts need comes with make deps
# (make test): PyTorch and, from PyPI, transformers.
DEB_TRAIN_PACKAGES = cmake g++ make ccache ninja-build openmpi-bin libopenmpi-dev libopenblas-dev libstb-dev \
                     libpcre2-dev nlohmann-json3-dev
DEB_TEST_PACKAGES = python3 python3-torch python3-pip
# PyPI packages the transformers tests need (test/model/hf_gpt2.py, test/data/hf_tokenizer_agrees.py), for
# PYTHON, /usr/bin/python3, where Debian's python3-torch is (another python3 first on PATH would not see it): the
# README's Python lines name it.
PYTHON = /usr/bin/python3
# transformers 4.44.2 with tokenizers < 0.20: its generate() runs on Debian's torch 1.13 under Python 3.11
# (4.46's imports torch.distributed.fsdp, which fails to import in that torch under Python 3.11).
TRANSFORMERS_VERSION = 4.44.2
PIP_PACKAGES = transformers==$(TRANSFORMERS_VERSION) 'tokenizers<0.20' safetensors
# cuobjdump and the nvdisasm it runs, which the CUDA toolkit here may lack (test_sass_budget reads the tensor-core
# kernels' SASS with them): PyPI's copies, for PYTHON (bench/sass_budget.py looks in its packages).
CUOBJDUMP_PACKAGE = nvidia-cuda-cuobjdump==13.4.92 nvidia-cuda-nvdisasm==13.4.92
CONFIGURE = PATH="$$PATH:/usr/local/cuda/bin" cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
# A new build folder uses Ninja when it is installed: it compiles a program's own files alongside the
# libraries it links instead of after them. (An existing folder keeps the generator it was made with.)
NEW_FOLDER_GENERATOR = $$(test -f $(BUILD)/CMakeCache.txt || ! command -v ninja >/dev/null || echo -G Ninja)
# Sub-makes (the Makefile generator's) without "Entering directory" lines.
MAKEFLAGS += --no-print-directory

TRAIN_ARGS ?= --tp 2 --sp --recompute selective --memory-report --layers 4 --heads 4 --hidden 128 --seq 64 \
              --batch 16 --steps 600 --lr 2e-3 --warmup 50 --dropout 0.0 --val-every 200 --log-every 50 \
              --sample 400 --temperature 0.7 --top-k 20 --save $(BUILD)/model.bin --log $(BUILD)/train.jsonl

.PHONY: all build trainer train test bench accuracy paper memory beyond pictures deps deps-train data clean
# One cmake --build at a time in the build folder, whatever -j says.
.NOTPARALLEL:

all: build

# deps-train: the Debian packages training needs; deps: those and the tests' (Debian and PyPI). Both install
# what is missing as root, else print the command.
define install_debian
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "$@: all Debian packages present"; \
	elif [ "$$(id -u)" = 0 ]; then echo "$@: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	else echo "$@: missing$$missing; run: sudo apt-get install -y$$missing"; exit 1; fi
	@command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc || \
	  { echo "$@: nvcc not found: install the CUDA Toolkit (nvcc, cuBLAS, NCCL); it is needed to build"; exit 1; }
endef

deps-train:
	$(call install_debian,$(DEB_TRAIN_PACKAGES))

deps:
	$(call install_debian,$(DEB_TRAIN_PACKAGES) $(DEB_TEST_PACKAGES))
	@if $(PYTHON) -c "import transformers, safetensors, torch; assert transformers.__version__ == '$(TRANSFORMERS_VERSION)'" 2>/dev/null; then \
	  echo "deps: PyTorch, transformers $(TRANSFORMERS_VERSION) and safetensors present for $(PYTHON)"; \
	elif [ "$$(id -u)" = 0 ]; then echo "deps: installing $(PIP_PACKAGES) for $(PYTHON)"; \
	  $(PYTHON) -m pip install -q --break-system-packages $(PIP_PACKAGES) || exit 1; \
	else echo "deps: missing $(PIP_PACKAGES) for $(PYTHON); run: sudo $(PYTHON) -m pip install --break-system-packages $(PIP_PACKAGES)"; exit 1; fi
	@if { command -v cuobjdump && command -v nvdisasm; } >/dev/null || \
	   { test -x /usr/local/cuda/bin/cuobjdump && test -x /usr/local/cuda/bin/nvdisasm; } || \
	   ls /usr/local/lib/python3*/dist-packages/nvidia/cu*/bin/cuobjdump \
	      /usr/local/lib/python3*/dist-packages/nvidia/cu*/bin/nvdisasm >/dev/null 2>&1; then \
	  echo "deps: cuobjdump and nvdisasm present (bench/sass_budget.py reads the kernels' SASS with them)"; \
	elif [ "$$(id -u)" = 0 ]; then echo "deps: installing $(CUOBJDUMP_PACKAGE) for $(PYTHON) (the SASS of bench/sass_budget.py)"; \
	  $(PYTHON) -m pip install -q --break-system-packages $(CUOBJDUMP_PACKAGE) || exit 1; \
	else echo "deps: missing cuobjdump; run: sudo $(PYTHON) -m pip install --break-system-packages $(CUOBJDUMP_PACKAGE)"; exit 1; fi
	@echo "deps: run the README's Python lines with $(PYTHON) (another python3 on PATH may not see these packages)"

# ---- the build folder -----------------------------------------------------------------------------------
# There is one, $(BUILD), so that make pictures finds the log of the last make train, and nothing is built
# twice. make train builds only the programs it runs and the two tools the README uses next (generate,
# draw_pipeline: seconds, they link the same objects). When it finds no configured build folder, it
# configures one for this machine's GPU only (TRAIN_ARCHS): the first make train compiles the core library
# once, for one architecture, instead of 21 programs for two. A folder that is already configured (by an
# earlier make test, say) is reused as it is, so make train never recompiles what is there. The full
# targets need every program for CUDA_ARCHS: after a one-architecture make train, the first of them
# reconfigures the folder and compiles every file again, once, for both architectures (ccache cannot help:
# another architecture is another compilation); from then on both kinds of target reuse that build.
build: deps
	@grep -qsx 'CMAKE_CUDA_ARCHITECTURES:[A-Z]*=$(CUDA_ARCHS)' $(BUILD)/CMakeCache.txt || { \
	  echo "build: configuring $(BUILD) for CUDA architectures $(CUDA_ARCHS) (every program, test and benchmark)"; \
	  $(CONFIGURE) $(NEW_FOLDER_GENERATOR) "-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)" >/dev/null || exit 1; }
	@cmake --build $(BUILD) -j $(JOBS)

# Only the programs a target runs (see "the build folder"): in the configured folder as it is, else in a new
# one for this machine's GPU only. $(call programs,TARGETS...)
define programs
	@if [ -f $(BUILD)/CMakeCache.txt ]; then \
	  echo "make $(or $(MAKECMDGOALS),$@): building $(1) in $(BUILD) (CUDA architectures" \
	    "$$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' $(BUILD)/CMakeCache.txt))"; \
	else archs='$(TRAIN_ARCHS)'; \
	  echo "make $(or $(MAKECMDGOALS),$@): building $(1) for CUDA architecture $$archs only (this machine's GPU;" \
	    "90 without one): about 3 minutes on 2 cores the first time"; \
	  $(CONFIGURE) $(NEW_FOLDER_GENERATOR) "-DCMAKE_CUDA_ARCHITECTURES=$$archs" >/dev/null || exit 1; fi
	@cmake --build $(BUILD) -j $(JOBS) --target $(1)
endef

# train_gpt and prepare_data, and the tools the README uses after make train: generate and draw_pipeline.
TRAIN_PROGRAMS = train_gpt prepare_data generate draw_pipeline
trainer: deps-train
	$(call programs,$(TRAIN_PROGRAMS))

# The default corpus is the project's own text (docs and sources): no network needed.
data: trainer
	@test -f data/generated/default/train.bin || $(BUILD)/prepare_data --default --root .

train: trainer data
	$(MPIRUN) -np $(NP) $(BUILD)/train_gpt $(TRAIN_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@if nvidia-smi -L >/dev/null 2>&1; then PREBUILT=$(BUILD) bash bench/gpu_suite.sh $(BUILD)/bench-results; \
	else echo "no GPU visible: tiny shapes on the CPU (CPU timings; the paper's shapes need a GPU)"; \
	  $(BUILD)/layer_bench --device cpu --dtype f32 --hidden 64 --heads 8 --seq 64 --batch 2 --tp-emulated 8 --reps 3 --warmup 1 && \
	  $(BUILD)/e2e_bench --device cpu --dtype f32 --layers 2 --hidden 64 --heads 4 --seq 32 --batch 2 --vocab 256 \
	    --warmup 1 --steps 2 --gemm-size 256 && \
	  bash bench/cpu_peer.sh $(BUILD); fi

# Accuracy (issue 22): op_accuracy writes each op's fp32 inputs and outputs, op_accuracy.py recomputes them in
# float64 and in PyTorch fp32 (bench/PERF_NOTES.md "Accuracy"); then the loss deviation of a 60-step run.
# PyTorch is looked for as cpu_peer.sh does (the first python3 on PATH, else the system's).
accuracy: deps
	@# (until 2026-12-06 the output folder was $(BUILD)/op_accuracy, the program's own path: remove such a folder)
	@if [ -d $(BUILD)/op_accuracy ]; then rm -rf $(BUILD)/op_accuracy; fi
	$(call programs,op_accuracy train_gpt)
	@py=$$(for p in python3 /usr/bin/python3; do "$$p" -c "import torch" 2>/dev/null && { echo "$$p"; break; }; done); \
	if [ -z "$$py" ]; then echo "accuracy: PyTorch is not installed (apt-get install python3-torch)"; exit 1; fi; \
	rm -rf $(BUILD)/op_accuracy_out && mkdir -p $(BUILD)/op_accuracy_out && \
	$(BUILD)/op_accuracy --out $(BUILD)/op_accuracy_out --device $$(nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu) && \
	"$$py" bench/op_accuracy.py $(BUILD)/op_accuracy_out && bash bench/loss_deviation.sh $(BUILD)

paper: deps
	$(call programs,memory_calculator)
	@mkdir -p docs && $(BUILD)/memory_calculator --chart docs/figure7.png --beyond-chart docs/beyond_paper.png && \
	  echo "charts: docs/figure7.png docs/beyond_paper.png"

# One line per layout (unfused and flash attention) and kind of memory, in bytes on one rank: a layer's saved
# activations, the whole model's, and the model states (weights, gradients, master weights, AdamW moments),
# measured next to the formula.
memory: trainer data
	@printf "%-30s %-22s %14s %14s %10s\n" layout "memory (bytes)" measured formula difference
	@for at in unfused flash; do for tp in 1 2 4; do for sp in "" "--sp"; do for rc in none selective full; do \
	  $(MPIRUN) -np $$tp $(BUILD)/train_gpt --device cpu --dtype bf16 --tp $$tp $$sp --recompute $$rc --layers 2 --heads 8 \
	    --hidden 64 --seq 64 --batch 2 --steps 1 --val none --memory-report --attention $$at | \
	  awk -v layout="tp=$$tp $${sp:-   } $$rc $$at" ' \
	    /^Activation memory/ { part = "acts" } /^Model states/ { part = "states" } \
	    $$1 == "total" && $$2 ~ /^[0-9]+$$/ { printf "%-30s %-22s %14s %14s %10s\n", layout, \
	        (part == "states" ? "model states" : "activations / layer"), $$2, $$3, $$4 } \
	    $$1 == "model" && $$2 ~ /^[0-9]+$$/ { printf "%-30s %-22s %14s %14s %10s\n", layout, "activations, model", $$2, $$3, $$4 }'; \
	done; done; done; done
	@# Context parallelism (flash attention): each rank holds s/c tokens, the formula at s/c (cp x tp ranks).
	@for cp in 2 4; do for tp in 1 2; do test $$((cp * tp)) -le 4 || continue; sp=$$(test $$tp = 1 || echo --sp); \
	  $(MPIRUN) -np $$((cp * tp)) $(BUILD)/train_gpt --device cpu --dtype bf16 --cp $$cp --tp $$tp $$sp --layers 2 --heads 8 \
	    --hidden 64 --seq 64 --batch 2 --steps 1 --val none --memory-report | \
	  awk -v layout="cp=$$cp tp=$$tp $${sp:-   } none flash" ' \
	    /^Activation memory/ { part = "acts" } /^Model states/ { part = "states" } \
	    $$1 == "total" && $$2 ~ /^[0-9]+$$/ && part == "acts" { printf "%-30s %-22s %14s %14s %10s\n", layout, \
	        "activations / layer", $$2, $$3, $$4 } \
	    $$1 == "model" && $$2 ~ /^[0-9]+$$/ { printf "%-30s %-22s %14s %14s %10s\n", layout, "activations, model", $$2, $$3, $$4 }'; \
	done; done

# One measured row per technique beyond the paper, on CPU ranks (tools/beyond_paper_measured.sh).
beyond: trainer
	@bash tools/beyond_paper_measured.sh $(BUILD) "$(MPIRUN)"

# Pictures of the last make train: the loss curve and the measured-vs-formula memory breakdown. Only the
# plotting tool is built, in the folder make train used, whatever its architectures.
pictures:
	@test -f $(BUILD)/train.jsonl || { echo "pictures: no $(BUILD)/train.jsonl yet: run make train first"; exit 1; }
	@cmake --build $(BUILD) -j $(JOBS) --target plot_log
	@$(BUILD)/plot_log $(BUILD)/train.jsonl --out-dir $(BUILD)/pictures

clean:
	rm -rf $(BUILD)

# ---- reliability: sanitizers and fuzzers (test/reliability.cmake, docs/bad_inputs.md) ------------------------
# make test-asan: the CPU tests (unit, and the mpi tests of the CLI, resume, crash and bad-input tables) built
# with AddressSanitizer + UndefinedBehaviorSanitizer in $(ASAN_BUILD), one CUDA architecture (device code is
# not what is being checked). ASAN_OPTIONS: protect_shadow_gap=0 lets the CUDA runtime reserve its address
# range; detect_leaks=0 because every MPI program "leaks" ~120 KB at exit from OpenMPI/PMIx plugins that are
# unloaded by then, so LeakSanitizer can neither name nor suppress them (the parsers get leak checking from
# the fuzzers, which run without MPI). Out-of-bounds, use-after-free and undefined behaviour stay fatal.
ASAN_BUILD ?= build-asan
ASAN_ARCHS ?= 90
ASAN_TESTS ?= ^(cli_|bad_|resume_|crash_during_save_|nan_stops_|test_recompute_tp2_sp|test_equivalence_sp_tp2$$|test_distributed_optimizer_dp2_odd$$|test_distributed_optimizer_memory_dp4$$|test_equivalence_pp2_interleaved$$|test_equivalence_sp_tp2_pp2$$|test_pipeline_memory_tp2_pp2$$|test_comm$$|test_context_parallel_np2$$|test_equivalence_cp2_sp_tp2$$|test_equivalence_sp_tp2_pp2_zbh1$$|trace_check$$|test_zero_sharding_memory_pp2_dp2_zbh1$$|test_activation_offload_first_stage_pp2_zbh1_zero3$$)
# Left out under the sanitizers: the out-of-memory message's case caps the address space, which AddressSanitizer's
# shadow memory does not fit in (and its allocator reports a huge allocation itself).
ASAN_SKIP ?= ^bad_oom_names_buffer$$
# Reports also go to files under $(ASAN_BUILD)/sanitizer-reports, so that one from a test that expects a
# failure (the bad-input table) cannot hide behind the expected non-zero exit: any report fails the target.
ASAN_REPORTS = $(CURDIR)/$(ASAN_BUILD)/sanitizer-reports
ASAN_ENV = ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1:log_path=$(ASAN_REPORTS)/asan \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(ASAN_REPORTS)/ubsan
# make fuzz: libFuzzer targets for the checkpoint, shard and training-state parsers, the safetensors reader with
# GPT-2's config.json, Hugging Face's tokenizer files and the HellaSwag eval file, built with clang as host C++
# (ASan + UBSan), each run FUZZ_SECONDS from a small seed corpus. Not part of make test.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = checkpoint:model/checkpoint.cu,data/atomic_file.cu,data/paths.cu shard:data/shard.cu,data/atomic_file.cu,data/paths.cu \
               train_state:model/train_state.cu,model/checkpoint.cu,data/atomic_file.cu,data/paths.cu \
               safetensors:model/safetensors.cu,model/hf_gpt2.cu,model/checkpoint.cu,data/atomic_file.cu,data/paths.cu \
               hf_tokenizer:data/hf_tokenizer.cu,data/gpt2_tokenizer.cu,data/atomic_file.cu,data/paths.cu \
               eval_file:data/eval_file.cu,data/atomic_file.cu,data/paths.cu
# FUZZ_ONLY="safetensors eval_file": only those targets.
FUZZ_RUN = $(if $(FUZZ_ONLY),$(filter $(addsuffix :%,$(FUZZ_ONLY)),$(FUZZ_TARGETS)),$(FUZZ_TARGETS))
.PHONY: test-asan fuzz

test-asan: deps
	@PATH="$$PATH:/usr/local/cuda/bin" cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMM_SANITIZE=ON \
	  "-DCMAKE_CUDA_ARCHITECTURES=$(ASAN_ARCHS)" >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@rm -rf $(ASAN_REPORTS) && mkdir -p $(ASAN_REPORTS)
	cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 900 -L unit
	cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 900 -R '$(ASAN_TESTS)' -E '$(ASAN_SKIP)'
	@if ls $(ASAN_REPORTS) | grep -q .; then echo "sanitizer reports:"; head -40 $(ASAN_REPORTS)/*; exit 1; fi
	@echo "test-asan: no AddressSanitizer / UndefinedBehaviorSanitizer reports"

fuzz:
	@command -v clang++ >/dev/null || { echo "fuzz: clang++ not found: apt-get install clang (libFuzzer comes with it)"; exit 1; }
	@mkdir -p $(FUZZ_BUILD) && python3 tools/fuzz_seeds.py $(FUZZ_BUILD)/seeds
	@for t in $(FUZZ_RUN); do name=$${t%%:*}; srcs=$$(echo $${t#*:} | tr , ' '); \
	  clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
	    -I/usr/local/cuda/include -x c++ tools/fuzz_$$name.cu $$srcs -o $(FUZZ_BUILD)/fuzz_$$name -lpcre2-8 || exit 1; done
	@for t in $(FUZZ_RUN); do name=$${t%%:*}; mkdir -p $(FUZZ_BUILD)/corpus_$$name; \
	  echo "fuzz_$$name: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
	    $(FUZZ_BUILD)/corpus_$$name $(FUZZ_BUILD)/seeds/$$name 2> $(FUZZ_BUILD)/fuzz_$$name.log || \
	    { tail -40 $(FUZZ_BUILD)/fuzz_$$name.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" $(FUZZ_BUILD)/fuzz_$$name.log; done

# ---- the emulated GPU (test/emulator, issues 33 and 42) ---------------------------------------------------------
# make test-emulated: every gpu-labelled test on an emulated CUDA device, in $(EMU_BUILD): the project's .cu
# files compiled unchanged as host C++ (g++) after a source transform, against the emulator's CUDA runtime,
# cuBLAS and NCCL; the kernels run with one fiber per CUDA thread. The whole build is under AddressSanitizer
# (memcheck: one element past any cudaMalloc or shared array stops the kernel); exit code 77 (a skip) fails;
# the kernel tests (those of layers/ and parallel/) run again with their threads in reverse order (a missing
# barrier is caught whichever thread writes first); the emulator's own tests (label emulator) check each mode
# with a negative control. Then the race mode in $(EMU_RACE_BUILD) (ThreadSanitizer: a race between the threads
# of a block that CUDA's barriers do not order), CI's subset: its controls and the attention kernels' tests
# (label race-ci, test/emulator/cmake/emulator_tests.cmake). Times mean nothing.
# make test-emulated-full: the same, then the race mode on every kernel test (label race), and every gpu test
# (the trainer runs included) once more in reverse order and once shuffled (the seed is printed; EMU_SEED=n
# repeats one): not in CI (docs/testing.md says what each mode checks).
# make mutants: each barrier of the kernels deleted and each static shared array cut by one element, one at a
# time, and the file's gpu tests run under the modes above (test/emulator/mutants.py; not in CI).
EMU_BUILD ?= build-emulated
EMU_RACE_BUILD ?= build-emulated-race
EMU_SEED ?=
# The sanitizer of $(EMU_BUILD): address (memcheck, the default) or none (no memcheck: about half the tests' time).
EMU_SANITIZER ?= address
EMU_CONFIGURE = cmake -S . -DMM_EMULATED=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
EMU_NEW_FOLDER = $$(test -f $(1)/CMakeCache.txt || ! command -v ninja >/dev/null || echo -G Ninja)
EMU_CTEST = ctest --output-on-failure -j $(JOBS) --timeout 900
.PHONY: test-emulated test-emulated-full mutants
test-emulated: deps
	@$(EMU_CONFIGURE) -B $(EMU_BUILD) -DMM_EMU_SANITIZER=$(EMU_SANITIZER) $(call EMU_NEW_FOLDER,$(EMU_BUILD)) >/dev/null
	@cmake --build $(EMU_BUILD) -j $(JOBS)
	@$(EMU_CONFIGURE) -B $(EMU_RACE_BUILD) -DMM_EMU_SANITIZER=thread $(call EMU_NEW_FOLDER,$(EMU_RACE_BUILD)) >/dev/null
	@cmake --build $(EMU_RACE_BUILD) -j $(JOBS) --target emu_race_ci_programs
	cd $(EMU_BUILD) && $(EMU_CTEST) -L 'gpu|emulator'
	cd $(EMU_RACE_BUILD) && $(EMU_CTEST) -L race-ci

test-emulated-full: test-emulated
	@cmake --build $(EMU_RACE_BUILD) -j $(JOBS) --target emu_race_programs
	cd $(EMU_RACE_BUILD) && $(EMU_CTEST) -L race -LE race-ci
	cd $(EMU_BUILD) && EMU_THREAD_ORDER=reverse $(EMU_CTEST) -L gpu -E '_reverse$$'
	cd $(EMU_BUILD) && EMU_THREAD_ORDER=shuffle$(if $(EMU_SEED),:$(EMU_SEED)) $(EMU_CTEST) -L gpu -E '_reverse$$'

mutants: deps
	python3 test/emulator/mutants.py run --jobs $(JOBS)
