// offload_model.h — activation offloading in the model (recompute/activation_offload.h moves the bytes): which
// layers and micro-batches go to host memory, the two calls model/gpt.cu's layer loops make, the step's scope,
// and what the memory report compares. Beyond the paper; the layer does not know about it.
//
// The policies (OffloadPolicy):
//   Layers    each model chunk's first N layers of every micro-batch (Megatron's --cpu-offloading-num-layers;
//             by default all but the chunk's last, whose backward comes first).
//   InFlight  every layer of the micro-batches a pipeline stage holds in flight beyond K, decided at each
//             forward from the stage's own schedule. With K the last stage's count (1 under 1F1B) this is
//             the paper's future work on the first stage's pressure (§4.3: under 1F1B stage r holds p − r
//             micro-batches): every stage then keeps on the device what the last one keeps.
// In the backward the layers come back one ahead: the reload of layer i−1 is issued before layer i's backward
// runs. Offloading never changes a bit: the tensors come back as they left (test_activation_offload).
#pragma once
#include <cstdio>
#include <vector>
#include "../recompute/activation_offload.h"
#include "../recompute/memory_report.h"
#include "../recompute/memory_techniques.h"
#include "../recompute/saved_layer.h"

struct GPT;  // model/gpt.h (which includes this header: its layer loops call the functions below)

// Whether any saved activation of this model moves to the host.
bool offload_on(const GPT& m);
// After gpt_create: offload by `policy` from now on (Off: never). Refuses a layer count beyond a chunk's.
void offload_configure(GPT& m, const OffloadPolicy& policy);
// Whether micro-batch j's layer `layer` (of model chunk `chunk`) goes to the host in the step in flight.
bool offload_chooses(const GPT& m, int j, int chunk, int layer);

// A training step's forwards and backwards (forward_backward, model/train_step.cu): the plan for its M
// micro-batches, the counters reset; outside it (validation, sampling) nothing moves.
class OffloadStep {
public:
    OffloadStep(GPT& m, int micro_batches);
    ~OffloadStep();
    OffloadStep(const OffloadStep&) = delete;
    OffloadStep& operator=(const OffloadStep&) = delete;

private:
    GPT& m_;
};

// gpt_forward_chunk, after a layer's forward: its saved tensors to the host when chosen; at the chunk's last
// layer the copies are waited for and the device blocks given back.
void offload_after_forward(GPT& m, int j, int chunk, int layer, SavedLayer& s);
// gpt_backward_chunk, before a layer's backward: its tensors back on the device (waited for), and the reload
// of the layer below issued to run meanwhile. saved: the micro-batch's layers, by local layer.
void reload_before_backward(GPT& m, int j, int chunk, int layer, std::vector<SavedLayer>& saved);

// ---- measured next to the formula --------------------------------------------------------------------------------
// At the moment the memory report is taken (the schedule's peak), each layer's micro-batches on the device and on
// the host; over the step, the most layer-micro-batches on the host and how many are moved each way.
struct OffloadCounts {
    std::vector<int> device, host;  // by global layer
    int host_peak = 0;              // layer-micro-batches on the host at the step's most
    int moved = 0;                  // layer-micro-batches moved out (and back) per step
};
OffloadCounts offload_counts(const GPT& m, int micro_batches);
// The report's in-flight counts with the offloaded layer-micro-batches taken off (the device's share).
InFlightLayers offload_resident(const GPT& m, int micro_batches, InFlightLayers held);
// --memory-report's lines: host bytes at their peak and the bytes moved each way per step, measured next to
// offload_layer_bytes × counts; the time of one layer's copy at the stated host-link bandwidth next to the
// layer's compute at the A100's peak. shape: the run's formula input (one micro-batch).
void print_offload_report(FILE* f, const GPT& m, int micro_batches, const ModelFormulaInput& shape);
