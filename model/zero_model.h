// zero_model.h — the model under ZeRO-2 and ZeRO-3 (parallel/zero_sharding.h holds the mechanism): the scopes
// model/gpt.cu's chunk and layer loops open, and the step's pieces model/train_step.cu calls. Beyond the paper;
// the layer (model/transformer_layer.cu) does not know about it: it reads the views gpt_layer_context hands it,
// which under ZeRO-3 are the gathered unit's and under ZeRO-2/3 the open gradient bucket's.
//
// What a step does, by pass (docs/design.md "ZeRO-2 and ZeRO-3"):
//   forward of a chunk    ZeRO-3: the edges gathered when the chunk embeds or ends in the head; each layer's
//                         unit gathered before it runs (the next one's gather issued ahead), freed after.
//   backward of a chunk   ZeRO-3: the same (the edges only for the head: the embeddings' backward is a
//                         scatter-add that reads no weight); ZeRO-2/3: each layer's gradients into a fresh
//                         bucket, reduce-scattered into the shard when the layer is done, or, under a
//                         zero-bubble schedule, when its W is (zero_after_weight_pass).
//   the step's end        the edges' bucket: SP sum, tied-embedding sum, reduce-scatter; the 1/d mean.
#pragma once
#include <cstdio>
#include <vector>
#include "../layers/tensor.h"
#include "../parallel/distributed_optimizer.h"
#include "../parallel/zero_sharding.h"
#include "../recompute/memory_techniques.h"

struct GPT;  // model/gpt.h (which includes this header: its loops open the scopes below)

// Whether this model's gradients (ZeRO-2) and weights (ZeRO-3) are sharded.
bool zero_sharded(const GPT& m);

// gpt_create: the unit layout of this stage's tensors over the weight-holding ranks, and the states at rest
// (the weights, gradients, master and moments through m.state_memory). Nothing at stage < 2 or d = 1.
void zero_model_create(GPT& m, int stage, DType dtype);

// Around a chunk's forward or backward (the whole of gpt_forward_chunk / gpt_backward_chunk).
class ZeroChunkScope {
public:
    ZeroChunkScope(GPT& m, int chunk, ZeroPass pass);
    ~ZeroChunkScope();
    ZeroChunkScope(const ZeroChunkScope&) = delete;
    ZeroChunkScope& operator=(const ZeroChunkScope&) = delete;

private:
    GPT& m_;
    bool edges_ = false;
};

// Around one layer's forward or backward of micro-batch j (opened before gpt_layer_context, which reads the
// views). fresh_bucket(): its gradients go to a bucket of their own (write, do not add).
class ZeroLayerScope {
public:
    ZeroLayerScope(GPT& m, int j, int chunk, int layer, ZeroPass pass);
    ~ZeroLayerScope();
    ZeroLayerScope(const ZeroLayerScope&) = delete;
    ZeroLayerScope& operator=(const ZeroLayerScope&) = delete;
    bool fresh_bucket() const { return unit_ >= 0 && pass_ == ZeroPass::Backward; }

private:
    GPT& m_;
    int j_, unit_ = -1;
    ZeroPass pass_;
    bool deferred_ = false;  // a zero-bubble W still owes the bucket its weight gradients
};

// After the W pass of (micro-batch j, chunk): its layers' buckets are complete; reduce-scatter them.
void zero_after_weight_pass(GPT& m, int j, int chunk);

// sync_gradients under ZeRO-2/3 (model/train_step.cu): the layers are reduce-scattered already; the edges' bucket
// gets the SP sum and the tied embedding's sum, then its reduce-scatter; then the 1/d mean of the shard.
void zero_sync_gradients(GPT& m);
// The gradient norm's per-tensor sums of squares over this rank's owned pieces (summed over the group by the
// caller); the owned part of one tensor-layer (the NaN report); the optimizer step on the shard.
std::vector<double> zero_gradient_sums(GPT& m);
Tensor zero_owned_gradient(GPT& m, int id, int layer);
void zero_model_optimizer_step(GPT& m, const AdamWStep& a);

// ---- measured next to the formula (recompute/memory_techniques.h) ------------------------------------------------
// This rank's ZeRO step in the formula's terms: its stage (ZeRO-1: the distributed optimizer's flat buffer),
// units, micro-batches and, under a zero-bubble schedule, the most layer buckets its W passes keep open.
ZeroStepInput zero_step_input(const GPT& m, int micro_batches);
// --memory-report's lines (after a step): the gathered weights' and the gradient buckets' high-water marks and the
// data-parallel bytes of the step, each measured next to zero_step_formula. Nothing without a ZeRO stage.
void print_zero_report(FILE* f, const GPT& m, int micro_batches);
