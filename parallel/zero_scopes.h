// zero_scopes.h — ZeRO-2 and ZeRO-3 in a pipeline stage's loops (zero_sharding.h holds the mechanism): the scopes
// model/gpt.cu's chunk and layer loops open, and the reduce-scatter after a zero-bubble W pass. Beyond the paper;
// the layer (model/transformer_layer.cu) does not know about it: it reads the views gpt_layer_context hands it,
// which under ZeRO-3 are the gathered unit's and under ZeRO-2/3 the open gradient bucket's. What needs the whole
// model (the step's end, the gradient norm, the optimizer step, the reports) is model/zero_model.h's.
//
// What the loops do, by pass (docs/design.md "ZeRO-2 and ZeRO-3"):
//   forward of a chunk    ZeRO-3: the edges gathered when the chunk embeds or ends in the head; each layer's
//                         unit gathered before it runs (the next one's gather issued ahead), freed after.
//   backward of a chunk   ZeRO-3: the same (the edges only for the head: the embeddings' backward is a
//                         scatter-add that reads no weight); ZeRO-2/3: each layer's gradients into a fresh
//                         bucket, reduce-scattered into the shard when the layer is done, or, under a
//                         zero-bubble schedule, when its W is (zero_after_weight_pass).
#pragma once
#include "pipeline_schedule.h"
#include "pipeline_stage.h"
#include "process_grid.h"
#include "zero_sharding.h"

// What the loops' ZeRO work reads of the model: its units and step buffers, the states (the weights' shard a
// gather reads, the gradients' shard a bucket is added into), the stage's layers and the communicators; whether
// the backward reruns the forward (full recompute: the rerun uses the backward's gather, counted) and the
// schedule (a zero-bubble W ends a layer's bucket).
struct ZeroLoop {
    ZeroSharding& z;
    Ctx& ctx;
    ProcessGrid& grid;
    const PipelineStage& stage;
    ModelStates states;
    bool rerun_forward;
    PipeSchedule schedule;
};

// Whether model chunk `chunk` reads the edges in this pass: the embeddings' forward (the first virtual stage)
// and the head, forward and backward (the last). model/zero_model.cu counts the gathers with it.
bool zero_chunk_reads_edges(const PipelineStage& st, int chunk, ZeroPass pass);

// Around a chunk's forward or backward (the whole of gpt_forward_chunk / gpt_backward_chunk).
class ZeroChunkScope {
public:
    ZeroChunkScope(const ZeroLoop& loop, int chunk, ZeroPass pass);
    ~ZeroChunkScope();
    ZeroChunkScope(const ZeroChunkScope&) = delete;
    ZeroChunkScope& operator=(const ZeroChunkScope&) = delete;

private:
    ZeroLoop loop_;
    bool edges_ = false;
};

// Around one layer's forward or backward of micro-batch j (opened before gpt_layer_context, which reads the
// views). fresh_bucket(): its gradients go to a bucket of their own (write, do not add).
class ZeroLayerScope {
public:
    ZeroLayerScope(const ZeroLoop& loop, int j, int chunk, int layer, ZeroPass pass);
    ~ZeroLayerScope();
    ZeroLayerScope(const ZeroLayerScope&) = delete;
    ZeroLayerScope& operator=(const ZeroLayerScope&) = delete;
    bool fresh_bucket() const { return unit_ >= 0 && pass_ == ZeroPass::Backward; }

private:
    ZeroLoop loop_;
    int j_, unit_ = -1;
    ZeroPass pass_;
    bool deferred_ = false;  // a zero-bubble W still owes the bucket its weight gradients
};

// After the W pass of (micro-batch j, chunk): its layers' buckets are complete; reduce-scatter them.
void zero_after_weight_pass(const ZeroLoop& loop, int j, int chunk);
