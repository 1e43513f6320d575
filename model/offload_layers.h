// offload_layers.h — activation offloading in a pipeline stage's layer loops (recompute/activation_offload.h
// moves the bytes): whether a layer of a micro-batch goes to host memory, and the two calls model/gpt.cu's
// layer loops make. Beyond the paper; the layer does not know about it. It reads what it needs (the offloading
// state, the pipeline stage), not the model: model/gpt.cu includes it, and what needs the whole model (the
// configuration, the step's plan, the report) is model/offload_model.h's, which gpt.cu does not include.
//
// The policies (OffloadPolicy):
//   Layers    each model chunk's first N layers of every micro-batch (Megatron's --cpu-offloading-num-layers;
//             by default all but the chunk's last, whose backward comes first).
//   InFlight  every layer of the micro-batches a pipeline stage holds in flight beyond K, decided at each
//             forward from the stage's own schedule (the plan: parallel/offload_schedule.h).
// In the backward the layers come back one ahead: the reload of layer i−1 is issued before layer i's backward
// runs. Offloading never changes a bit: the tensors come back as they left (test_activation_offload).
#pragma once
#include <vector>
#include "../parallel/pipeline_stage.h"
#include "../recompute/activation_offload.h"
#include "../recompute/saved_layer.h"

// Whether micro-batch j's layer `layer` (global, of model chunk `chunk`) goes to the host under `policy`;
// plan: the in-flight policy's [micro-batch][chunk] for the step (parallel/offload_schedule.h).
bool offload_chooses(const OffloadPolicy& policy, const std::vector<std::vector<bool>>& plan, const PipelineStage& st,
                     int j, int chunk, int layer);

// gpt_forward_chunk, after a layer's forward: the previous layer's copies are waited for and its device blocks
// given back (one layer later: its copy ran beside this layer's forward), then this layer's saved tensors go to
// the host when chosen; at the chunk's last layer its own copies too. Nothing outside a training step.
void offload_after_forward(OffloadState& o, const PipelineStage& st, int j, int chunk, int layer, SavedLayer& s);
// gpt_backward_chunk, before a layer's backward: its tensors back on the device (waited for), and the reload
// of the layer below issued to run meanwhile. saved: the micro-batch's layers, by local layer.
void reload_before_backward(OffloadState& o, const PipelineStage& st, int j, int chunk, int layer,
                            std::vector<SavedLayer>& saved);
