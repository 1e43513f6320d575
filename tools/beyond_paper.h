// beyond_paper.h — the table the paper did not print (tools/memory_calculator.cu's last section, make paper):
// for the paper's models in its own layouts, per GPU of the first pipeline stage, the memory of each technique
// — none, full recompute, SP + selective recompute (the paper's), ZeRO-1/2/3, activation offloading — by kind,
// which combinations fit, and what each costs in the paper's terms: recompute FLOPs as a share of the step,
// data-parallel bytes beyond the all-reduce and host-link bytes, each as time at a stated bandwidth. Then the
// cheapest fitting combination per model, and a stacked picture (--beyond-chart FILE.png).
//
// Every number comes from the formulas the trainer measures itself against: recompute/memory_formulas.h (the
// activations), recompute/formulas.h (the model states by kind, FLOPs), recompute/memory_techniques.h (ZeRO's
// buffers and bytes, offloading's bytes) and parallel/offload_schedule.h (what offloading moves over the
// schedule). docs/paper.md "Beyond the paper" quotes the output.
#pragma once
#include <string>
#include <vector>
#include "parallel/pipeline_schedule.h"
#include "recompute/memory_formulas.h"

// One of the paper's runs, as the calculator computed it (its first stage's schedule counts included).
struct BeyondModel {
    std::string name;
    ModelFormulaInput shape;     // s, b, h, a, L, v (padded), t, p, m; d = 2; sp, rc, attention set per technique
    double vocab = 0;            // the vocabulary as given (stage_params pads it)
    int dp = 1, M = 1;           // data-parallel size, micro-batches per step on each DP rank
    double global_batch = 0;     // B
    PipeSchedule schedule = PipeSchedule::OneFOneB;
    int in_flight = 0;           // the first stage's (micro-batch, chunk) pairs in flight at its peak
    int embed_in_flight = 0;     // of those, micro-batches whose embedding chunk is held
    double iter_seconds = 0;     // the paper's measured iteration with SP + selective (Table 5, or the 530B run's)
};

// Prints the section; gpu_bytes: the memory a GPU has (80 GiB).
void print_beyond_paper(const std::vector<BeyondModel>& models, double gpu_bytes);
// The picture: one stacked bar per model and technique (weights, gradients, optimizer, activations, gathered
// weights, offloaded to the host), the GPU's memory as a dashed line. False (with the reason) when it cannot.
bool write_beyond_paper_chart(const std::vector<BeyondModel>& models, double gpu_bytes, const std::string& path,
                              std::string* error);
