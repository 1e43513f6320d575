// offload_model.h — activation offloading in the model: what needs the whole model (recompute/activation_offload.h
// moves the bytes, model/offload_layers.h holds the policy and the two calls model/gpt.cu's layer loops make):
// the configuration, the step's scope (its plan), and what the memory report compares. Beyond the paper.
// model/gpt.cu does not include this header: its loops need less than the whole model.
//
// The in-flight policy with K the last stage's count (1 under 1F1B) is the paper's future work on the first
// stage's pressure (§4.3: under 1F1B stage r holds p − r micro-batches): every stage then keeps on the device
// what the last one keeps.
#pragma once
#include <cstdio>
#include <vector>
#include "gpt.h"
#include "../recompute/memory_report.h"
#include "../recompute/memory_techniques.h"

// Whether any saved activation of this model moves to the host.
bool offload_on(const GPT& m);
// After gpt_create: offload by `policy` from now on (Off: never). Refuses a layer count beyond a chunk's.
void offload_configure(GPT& m, const OffloadPolicy& policy);

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
