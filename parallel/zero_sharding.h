// zero_sharding.h — ZeRO stages 2 and 3 over the ranks that hold the same weights (data- and context-parallel):
// the gradients (ZeRO-2), and the weights too (ZeRO-3), kept as this rank's shard only. Rajbhandari et al.,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC 2020), the stages P_os+g and
// P_os+g+p; Megatron-FSDP's --data-parallel-sharding-strategy optim_grads / optim_grads_params, FSDP2's
// reshard_after_forward False / True. Beyond the paper (Korthikanti et al. name it as complementary).
//
// ZeRO-1 (distributed_optimizer.h) cuts the rank's flat llm.c-layout buffer into d contiguous shards: the
// gradients are whole until the step's end, when one reduce-scatter hands each rank its shard. Stages 2 and 3
// need a layer's gradients and weights as ONE unit, while its backward runs and just before its forward; in
// llm.c's layout a layer's 12 tensors are 12 separate slices. So these stages cut by unit, as FSDP does:
//   units   each of the stage's layers (its 12 tensors' slices, in llm.c order), then the edges (the word and
//           position embeddings, the final layer norm: whichever this stage holds), each padded with zeros to
//           a multiple of d; rank r keeps piece r of every unit, the pieces back to back in its shard buffers.
//   ZeRO-2  the gradients are a shard. A layer's backward writes into a bucket (the unit's full gradient, fp32,
//           from this file's pool), which is then summed over SP's TP group (the replicated tensors,
//           sequence_parallel.h), reduce-scattered over the d ranks, and added into the shard: once per layer
//           and micro-batch, as the backward produces it. (The choice of every micro-batch over holding the
//           whole gradient until the last: docs/design.md "ZeRO-2 and ZeRO-3".) Under a zero-bubble schedule a
//           layer's weight gradients come with its W (layers/weight_grad_queue.h): its bucket waits until then.
//           The edges' bucket is held through the step (the embeddings are written by scatter-adds and, at
//           pp > 1, summed over the tied pair first) and reduce-scattered with the step's synchronization.
//           AdamW runs on the shard; the updated weights are all-gathered unit by unit into the whole weights.
//   ZeRO-3  the weights are a shard too. Each layer's unit is all-gathered just before its forward and again
//           before its backward (whose full-recompute rerun of the forward uses that gather), into a buffer
//           from the pool, and freed after; the next layer's gather is issued ahead (prefetch) on the
//           communication stream (all_gather_async: one in flight), so at most two layers' units are gathered
//           at once, plus the edges while the chunk that uses them runs. AdamW updates the shard in place.
// Each element goes through the operations of ZeRO-1: at d = 2, one micro-batch, the same bits (a sum of two
// is the same in any order). With several micro-batches ZeRO-2 sums d ranks' gradients per micro-batch, then
// the micro-batches: another order than ZeRO-1's (micro-batches first), equal within float rounding.
//
// Checkpoints stay consolidated (zero_local_values, zero_load_local_values): the format does not change, and a
// checkpoint resumes at any stage and layout. Everything here works on flat buffers, the unit list the model
// hands in and the communicators, never on the model.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "distributed_optimizer.h"
#include "../layers/activation_allocator.h"

// One tensor's slice inside a unit (or inside this rank's shard): `flat` is its offset in the rank's
// llm.c-layout buffers, `at` its offset in the unit (owned pieces: in the shard buffers), `layer` the global
// layer (-1: the edges).
struct ZeroSegment {
    int id = 0, layer = -1;
    int64_t flat = 0, at = 0, n = 0;
};

struct ZeroUnit {
    int layer = -1;                  // global layer index; -1: the edges
    std::vector<ZeroSegment> segs;   // its tensors' slices, in llm.c order, back to back from at = 0
    int64_t n = 0;                   // elements
    int64_t padded = 0;              // n rounded up to a multiple of d
    int64_t piece = 0;               // padded / d: what each rank keeps
    int64_t shard_at = 0;            // where this rank's piece starts in its shard buffers
};

// Bytes moved per step over the d ranks (the ring model of collectives.h), by what moved them.
struct ZeroStepBytes {
    uint64_t reduce_scatter = 0, forward_gather = 0, backward_gather = 0, optimizer_gather = 0;
    int reduce_scatters = 0, forward_gathers = 0, backward_gathers = 0;
    int rerun_gathers = 0;  // backward gathers whose weights a full-recompute rerun of the forward used first
    uint64_t total() const { return reduce_scatter + forward_gather + backward_gather + optimizer_gather; }
};

enum class ZeroPass { Forward, Backward };

struct ZeroSharding {
    int stage = 0;                     // 2 or 3; 0: not in use (not asked, or d = 1)
    int d = 1, rank = 0;
    int64_t n = 0, padded = 0, shard = 0;  // local parameters, Σ padded units, Σ pieces (= padded / d)
    DType weights = DType::F32;        // the compute weights' dtype (the gathered units')
    std::vector<ZeroUnit> units;       // the stage's layers in local order, then the edges (if any)
    std::map<int, int> unit_of_layer;  // global layer -> unit
    int edges = -1;                    // the edges' unit (-1: a middle pipeline stage holds none)
    std::vector<ZeroSegment> owned;    // this rank's pieces cut by tensor (at: offset in the shard buffers)

    // ---- the step's buffers: their own tagged account (layers/activation_allocator.h), apart from the
    // saved activations: "gathered" weight units (ZeRO-3) and fp32 "grad_bucket"s.
    std::unique_ptr<ActivationAllocator> pool;
    std::vector<Tensor> gathered;      // by unit: its gathered weights while open (ZeRO-3)
    std::vector<int> gathered_users;   // how many scopes hold each (a unit can be open in two nested scopes)
    int prefetching = -1;              // the unit whose gather is in flight on the communication stream
    std::map<std::pair<int, int>, Tensor> buckets;  // (micro-batch, unit) -> its gradient bucket
    std::vector<Tensor> open_grads;    // by unit: the bucket its gradient views point into now
    Tensor edges_bucket;               // the edges' gradients, held through the step
    std::vector<bool> written;         // by unit: its shard piece written this step (first write copies)
    ZeroStepBytes step;                // this step's bytes (reset by zero_begin_step)
    bool in_step = false;              // between zero_begin_step and the optimizer step
    size_t gathered_live = 0, gathered_peak = 0, bucket_live = 0, bucket_peak = 0;  // bytes, high-water marks

    bool on() const { return stage >= 2; }
    int unit(int layer) const;         // the unit of a global layer (fatal when this stage does not hold it)
};

// The unit layout of a flat buffer of n elements (tensors at offsets/sizes, llm.c order) holding the layers
// `layers` (global indices, in local order: per-layer tensors are stacked in that order), on a group of d
// ranks, this rank `rank`. stage < 2 or d = 1: an empty (off) layout.
void zero_layout(ZeroSharding& z, int stage, int64_t n, const int64_t* offsets, const int64_t* sizes,
                 const std::vector<int>& layers, int d, int rank, DType weights, Device device);

// The model states at rest (through `mem`, the tagged account): the gradients, master (bf16 training) and
// moments as the shard; ZeRO-2's weights whole (the llm.c buffer, n), ZeRO-3's a shard (in fp32 the master
// shard is the weights). Free them with model_states_free.
ModelStates zero_states_allocate(ModelStateMemory& mem, ZeroSharding& z, Device device, DType dtype);

// ---- views (model/gpt.cu's gpt_param / gpt_grad) --------------------------------------------------------------
// Tensor `id` of `layer` (-1: an edge tensor): ZeRO-3's gathered unit (fatal when it is not gathered: a use
// outside the scopes that gather it, a bug, named), or the open gradient bucket (an empty tensor when none
// is open: a forward's layer context names the gradients it does not write).
Tensor zero_weight_view(const ZeroSharding& z, int id, int layer);
Tensor zero_grad_view(const ZeroSharding& z, int id, int layer);

// ---- the step --------------------------------------------------------------------------------------------------
// The start of a step's gradients: the edges' bucket zeroed, every unit's shard piece to be written afresh.
void zero_begin_step(ZeroSharding& z, Ctx& ctx);
// ZeRO-3: make unit u's weights usable on ctx.stream (gather now, or wait for its prefetch); prefetch:
// issue unit u's gather on the communication stream without waiting (at most one in flight). s: the states.
void zero_gather(Comm& c, Ctx& ctx, ZeroSharding& z, const ModelStates& s, int u, ZeroPass pass, bool rerun = false);
void zero_prefetch(Comm& c, Ctx& ctx, ZeroSharding& z, const ModelStates& s, int u, ZeroPass pass);
void zero_release_gathered(ZeroSharding& z, int u);
// ZeRO-2/3: open unit u's gradient bucket for micro-batch j (a fresh bucket: the layer overwrites it), and
// point its views there. Returns the bucket.
Tensor zero_open_bucket(ZeroSharding& z, Ctx& ctx, int j, int u);
// Unit u's gradients of micro-batch j are complete: sum the replicated tensors over `tp` when sp_sum (SP),
// reduce-scatter over `dp`, add the piece into the shard `grads`, free the bucket.
void zero_reduce_bucket(Comm& dp, Comm& tp, bool sp_sum, Ctx& ctx, ZeroSharding& z, Tensor grads, int j, int u);
// The step's end, after the edges' bucket has its SP and tied sums (the caller's): reduce-scatter it, then
// the same x · (1/d) as every other gradient path on the whole shard.
void zero_finish_gradients(Comm& dp, Ctx& ctx, ZeroSharding& z, Tensor grads);
// The edges' tensors' offsets in their bucket, as sum_sequence_parallel_grads takes them (size 0: absent).
void zero_edges_offsets(const ZeroSharding& z, int64_t offsets[NUM_PARAM_TENSORS], int64_t sizes[NUM_PARAM_TENSORS]);

// AdamW on the shard (weight decay per tensor), then (ZeRO-2) the updated weights all-gathered unit by unit
// into the whole weights. ZeRO-3: nothing to gather (the shard is the weights).
void zero_optimizer_step(Comm& dp, Ctx& ctx, ZeroSharding& z, const ModelStates& s, const AdamWStep& a);
// The compute weights from the master (after a load): ZeRO-2 rounds (bf16) and all-gathers, ZeRO-3 rounds.
void zero_refresh_weights(Comm& dp, Ctx& ctx, ZeroSharding& z, const ModelStates& s);

// Σ x² of each tensor's owned pieces (index: tensor id), with one host synchronization (gradient_norm).
std::vector<double> zero_sums_of_squares(Ctx& ctx, const ZeroSharding& z, Tensor grads);
// The owned part of tensor id of `layer` (-1: an edge tensor) in the shard buffer `grads`; empty when this
// rank owns none of it (the NaN report).
Tensor zero_owned_grad(const ZeroSharding& z, Tensor grads, int id, int layer);

// ---- consolidation (checkpoints): the format does not change ------------------------------------------------
// A model-state buffer (whole, or a shard) as this rank's whole local values (z.n floats, llm.c layout),
// gathering the shards over dp; and back (keeping the piece where the buffer is a shard).
std::vector<float> zero_local_values(Comm& dp, const ZeroSharding& z, Tensor state);
void zero_load_local_values(const ZeroSharding& z, Tensor state, const float* local);

// The step's buffers at their high-water marks, and the bytes of the last step, as text (the trainer's end
// line names the stage).
std::string zero_comm_line(const ZeroSharding& z);
