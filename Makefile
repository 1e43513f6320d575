# mini-megatron — the front door.
#   make train   build, prepare the default data, train a small GPT with TP 2 + SP + selective recompute under mpirun
#   make test    build and run every CTest test (unit, mpi; gpu tests skip without a GPU)
#   make bench   layer and end-to-end benchmarks (tiny shapes on CPU; the paper's shapes on a GPU)
#   make paper   the paper-scale calculator: Table 2, Figure 7 (docs/figure7.png), memory totals, MFU/HFU
#   make memory  the Table 2 grid measured on a small model on CPU, next to the formulas
#   make deps    install missing Debian packages (as root), else print the command
#   make clean
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# CUDA architectures: A100 and H100/H200 by default.
CUDA_ARCHS ?= 80;90
NP ?= 2
MPIRUN ?= mpirun --oversubscribe --bind-to none
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
DEB_PACKAGES = cmake g++ make openmpi-bin libopenmpi-dev libopenblas-dev libstb-dev python3

TRAIN_ARGS ?= --tp 2 --sp --recompute selective --memory-report --layers 4 --heads 4 --hidden 128 --seq 64 \
              --batch 16 --steps 600 --lr 2e-3 --warmup 50 --dropout 0.0 --val-every 200 --log-every 50 \
              --sample 400 --temperature 0.7 --top-k 20 --save $(BUILD)/model.bin --log $(BUILD)/train.jsonl

.PHONY: all build train test bench paper memory deps data clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; \
	elif [ "$$(id -u)" = 0 ]; then echo "deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	else echo "deps: missing$$missing; run: sudo apt-get install -y$$missing"; exit 1; fi
	@command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc || \
	  { echo "deps: nvcc not found: install the CUDA Toolkit (nvcc, cuBLAS, NCCL); it is needed to build"; exit 1; }

$(BUILD)/Makefile: CMakeLists.txt
	@PATH="$$PATH:/usr/local/cuda/bin" cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)" >/dev/null

build: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS)

# The default corpus is the project's own text (docs and sources): no network needed.
data: build
	@test -f data/generated/default/train.bin || $(BUILD)/prepare_data --default --root .

train: build data
	$(MPIRUN) -np $(NP) $(BUILD)/train_gpt $(TRAIN_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@if nvidia-smi -L >/dev/null 2>&1; then bash bench/gpu_suite.sh $(BUILD)/bench-results; \
	else echo "no GPU visible: tiny CPU shapes (timings are CPU timings)"; \
	  $(BUILD)/layer_bench --device cpu --hidden 64 --heads 8 --seq 64 --batch 2 --reps 3 --warmup 1 && \
	  $(BUILD)/e2e_bench --device cpu --layers 2 --hidden 64 --heads 4 --seq 64 --batch 4 --steps 3 --warmup 1; fi

paper: build
	@mkdir -p docs && $(BUILD)/memory_calculator --chart docs/figure7.png && echo "chart: docs/figure7.png"

memory: build data
	@for tp in 1 2 4; do for sp in "" "--sp"; do for rc in none selective full; do \
	  $(MPIRUN) -np $$tp $(BUILD)/train_gpt --device cpu --dtype bf16 --tp $$tp $$sp --recompute $$rc --layers 2 --heads 8 \
	    --hidden 64 --seq 64 --batch 2 --steps 1 --val-batches 0 --memory-report | grep -E "^  (total|model) " | \
	    sed "s/^/tp=$$tp $${sp:-   } $$rc: /"; done; done; done

clean:
	rm -rf $(BUILD)
