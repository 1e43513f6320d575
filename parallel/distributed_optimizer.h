// distributed_optimizer.h — the distributed optimizer (ZeRO stage 1) over the data-parallel group: each DP
// rank keeps the fp32 master weights and both AdamW moments of one shard of the parameters only.
//
// Without it every DP rank all-reduces the gradients and runs the same AdamW update on the whole model, so
// the optimizer states (12 of the 18 bytes per parameter in bf16 training) are held d times over. With it:
//   1. gradients are reduce-scattered (summed, then the same 1/d average): rank r receives its shard only;
//   2. AdamW runs on the shard (weight decay still per tensor: each tensor's overlap with the shard is known);
//   3. the updated weights are all-gathered: in bf16 straight into the compute copy, in fp32 into the fp32
//      weights (which are the master weights, model_state_memory.h).
// A ring all-reduce IS a reduce-scatter followed by an all-gather (parallel/collectives.h), so in fp32 the bytes
// are those of the all-reduce; in bf16 the all-gather moves half as much. Every element goes through the
// same float operations as the all-reduce path, so with d = 2 (where a sum of two is the same either way)
// losses, weights and moments are bitwise those of the ordinary optimizer; only the gradient norm is summed
// in another order (from the shards), which matters when clipping is triggered (within float rounding).
//
// The shard layout: the rank's flat parameter buffer (n elements, llm.c order, this TP rank's
// slices) is padded with zeros to a multiple of d, P = ⌈n/d⌉·d; shard r is [r·P/d, (r+1)·P/d). No tensor has
// to divide by d; a tensor may lie across shards. Megatron-LM does the same on its contiguous gradient buffer
// (its buckets padded so that each divides by the DP size); llm.c's ZeRO-1 splits its one flat buffer too.
//
// Everything here works on this rank's flat model-state buffers (ModelStates), the shard layout and the DP
// communicator, never on the model or its configuration, so it holds whatever this rank's tensors are; the
// model (model/gpt.cu, model/train_step.cu) hands them in. docs/design.md "The distributed optimizer".
#pragma once
#include <mpi.h>
#include <cstdint>
#include <string>
#include <vector>
#include "collectives.h"
#include "../layers/model_shape.h"
#include "../layers/runtime.h"
#include "../recompute/model_state_memory.h"

struct OptimizerShard {
    bool on = false;         // sharded (requested and d > 1)
    int d = 1, rank = 0;     // data-parallel size and this rank's index in it
    int64_t n = 0;           // local parameters
    int64_t padded = 0;      // P: n rounded up to a multiple of d (n when off)
    int64_t shard = 0;       // P / d
    int64_t begin = 0;       // this rank's shard: flat elements [begin, begin + shard)
    // Each tensor's overlap with the shard, in flat-buffer offsets (own_n 0: none of it is here).
    int64_t own_begin[NUM_PARAM_TENSORS] = {}, own_n[NUM_PARAM_TENSORS] = {};
    // Data-parallel bytes of the last step (ring model, parallel/collectives.h): reduce-scatter and all-gather.
    uint64_t step_reduce_scatter_bytes = 0, step_all_gather_bytes = 0;
};

// The five flat model-state buffers of one rank (views: a copy names the same memory). weights == master
// (the same buffer) in fp32 training.
struct ModelStates {
    Tensor master, weights, grads, adam_m, adam_v;
};

// One AdamW step's numbers: the learning rate, the hyperparameters, the step t (from 1) and the clipping
// factor already applied to the gradients' norm.
struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay;
    int t;
    float grad_scale;
};

// The layout for a flat buffer of n elements made of tensors at offsets/sizes, on a group of d ranks.
OptimizerShard optimizer_shard_layout(int64_t n, const int64_t* offsets, const int64_t* sizes, int d, int rank,
                                      bool distributed);

// Allocate the model states for the layout z through `mem` (weights in `dtype`, the rest fp32): with z.on
// the master (bf16 training) and the moments exist only as this rank's shard, and the weights and
// gradients are padded to P. model_states_free returns them to `mem` and empties s.
ModelStates model_states_allocate(ModelStateMemory& mem, const OptimizerShard& z, Device device, DType dtype);
void model_states_free(ModelStateMemory& mem, ModelStates& s);

// Step 1: the gradients of this rank's shard = the mean over the DP group (the rest of grads keeps this
// rank's own, unreduced values).
void reduce_scatter_gradients(Comm& dp, Ctx& ctx, OptimizerShard& z, Tensor grads);
// Steps 2 and 3: AdamW on the shard (weight decay per tensor, by kParamTable), then the all-gather.
void sharded_optimizer_step(Comm& dp, Ctx& ctx, OptimizerShard& z, const ModelStates& s, const AdamWStep& a);
// The part of a gradient view (a slice of grads) that this rank owns; the view itself when not sharded.
// gradient_norm (model/train_step.cu) sums the owned parts over DP.
Tensor owned_part(const OptimizerShard& z, Tensor grads, Tensor grad_view);
// The compute copy from the master shards (bf16: rounded into the shard, then all-gathered). Collective.
void refresh_weights_from_shards(Comm& dp, Ctx& ctx, const OptimizerShard& z, const ModelStates& s);

// Checkpoints stay consolidated: these turn a model-state buffer (one of s's) into this rank's whole local
// values (z.n floats, host), gathering the shards over DP; and load such values into the buffer (keeping
// the shard only where the buffer is a shard). Without sharding, a copy.
std::vector<float> local_values(Comm& dp, const OptimizerShard& z, const ModelStates& s, Tensor state);
void load_local_values(const OptimizerShard& z, Tensor state, const float* local);

// The model states of every rank of `world`, measured (mem) and by formula (f: this rank's, at its ZeRO stage),
// one line per rank (rank 0 gets the text; collective). Under pipeline parallelism the stages hold different
// tensors, so the ranks differ.
std::string model_states_by_rank(const ModelStateMemory& mem, const ModelStateFormula& f, MPI_Comm world);

// One line: the DP bytes of the last step (reduce-scatter + all-gather) next to the all-reduce they replace.
std::string distributed_optimizer_comm_line(const OptimizerShard& z, DType weights);
