// memory_techniques.h — the memory techniques the paper names as complementary and leaves out (§1, §7):
// sharding the model states over data parallelism (ZeRO-1/2/3; Rajbhandari et al., SC 2020) and offloading
// saved activations to host memory; per GPU, what each holds and what each moves per step. Beyond the paper.
//
// The ONE implementation of these formulas: the trainer's --memory-report puts its measured bytes next to them
// (model states, the step's gathered weights and gradient buckets, data-parallel bytes, offloaded bytes, the
// bytes over the host link), test_zero_sharding and test_activation_offload check measured == formula with
// them, and the calculator's "Beyond the paper" table (tools/beyond_paper.cu) computes the paper's models with
// them. Model states per parameter are in formulas.h (zero_bytes_per_param) and recompute/model_state_memory.h.
//
// Units: bytes; parameters counted as the trainer pads them (each ZeRO-2/3 unit to a multiple of d; the
// calculator, at the paper's scale, leaves padding out). Data-parallel bytes follow the ring model of
// parallel/collectives.h: an all-gather or reduce-scatter of a tensor of B bytes sends (d−1)/d·B per rank, an
// all-reduce twice that. d = the ranks that hold the same weights (data × context parallel).
//
// Pure host code without dependencies (no MPI, no CUDA calls).
#pragma once
#include "formulas.h"

// ---- ZeRO-1/2/3: the step's bytes and buffers -------------------------------------------------------------
// How a rank's parameters are cut (parallel/zero_sharding.h): ZeRO-2/3 by unit, one per layer (its tensors'
// slices) and one for the edges (the embeddings and the final norm the stage holds). ZeRO-1 cuts the flat
// buffer in d: pass it as edges = P (the padded buffer) and no layers.
struct ZeroUnitSizes {
    double layer = 0;            // parameters of one layer's unit, padded to a multiple of d
    int layers = 0;              // the stage's layers (each its own unit)
    int layers_per_chunk = 0;    // a model chunk's (the interleaved schedule's chunks; else = layers)
    double edges = 0;            // the edges' unit, padded (0: a middle pipeline stage holds none)
    bool edges_forward = false;  // ZeRO-3 gathers the edges for a micro-batch's forward (the stage embeds or
    bool edges_backward = false; // ends in the head) / backward (the head only: the embeddings' backward
                                 // reads no weight)
    double padded() const { return layers * layer + edges; }
};
struct ZeroStepInput {
    int stage = 0;               // 0..3
    int d = 1;                   // ranks holding the same weights
    int weight_bytes = 2;        // the compute weights' bytes (bf16 2, fp32 4): what a gather moves
    int micro_batches = 1;       // M per step
    int pending_buckets = 1;     // layer gradient buckets live at once: 1, or under a zero-bubble schedule the
                                 // layers of the micro-batches whose B has run and W not
    ZeroUnitSizes units;
};
struct ZeroStepFormula {
    // Bytes one rank sends per step, by what sends them:
    double reduce_scatter = 0;    // the gradients: ZeRO-1 once; ZeRO-2/3 each layer per micro-batch, the edges once
    double optimizer_gather = 0;  // ZeRO-1/2: the updated weights; ZeRO-3: none (the shard is the weights)
    double forward_gather = 0;    // ZeRO-3: each layer's unit (and the edges) before its forward, per micro-batch
    double backward_gather = 0;   //         and again before its backward (a full-recompute rerun uses it)
    int reduce_scatters = 0, forward_gathers = 0, backward_gathers = 0;
    double all_reduce = 0;        // what the all-reduce of the fp32 gradients would send: 2(d−1)/d·4·P
    double total() const { return reduce_scatter + optimizer_gather + forward_gather + backward_gather; }
    // The buffers of the step, at their high-water marks:
    double gathered_peak = 0;     // ZeRO-3: w·(E + min(2, layers per chunk)·U) (a layer and the next one
                                  // prefetched, the edges while their chunk runs); ZeRO-2: the optimizer's
                                  // all-gather, one unit at a time, w·max(U, E)
    double bucket_peak = 0;       // ZeRO-2/3: 4·(E + pending·U), the edges' bucket held through the step
};
ZeroStepFormula zero_step_formula(const ZeroStepInput& in);

// ---- activation offloading ---------------------------------------------------------------------------------
// What one layer of one micro-batch moves to host memory: every tensor it keeps for its backward
// (layer_bytes, memory_formulas.h) and the layer-norm statistics the paper leaves out (4 fp32 numbers per
// token of the rank's shard; none under full recompute, which keeps only the layer's input).
double offload_layer_bytes(const LayerFormulaInput& in);
double layernorm_statistics_bytes(const LayerFormulaInput& in);
// The forward and backward FLOPs of one layer and micro-batch on one GPU (Appendix A: 72bsh²(1 + s/(6h)) per
// layer, /t under TP; a CP rank's s/c queries against all s keys), the compute a host-link transfer of the same layer can hide behind.
// in.s is the rank's s/c tokens, c the context-parallel size (1: none).
double layer_train_flops(const LayerFormulaInput& in, int c = 1);
// Seconds to move `bytes` at `bytes_per_second` (a stated bandwidth: the host link, the data-parallel network).
inline double transfer_seconds(double bytes, double bytes_per_second) { return bytes / bytes_per_second; }
// The bandwidths the reports state (one place): PCIe 4.0 x16 as an A100 sees it, about 25 GB/s each way;
// the data-parallel network of a DGX A100 cluster, 8 × 200 Gb/s HDR InfiniBand per node, 25 GB/s per GPU.
constexpr double kHostLinkBytesPerSecond = 25e9;
constexpr double kDataParallelBytesPerSecond = 25e9;
