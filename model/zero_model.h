// zero_model.h — the model under ZeRO-2 and ZeRO-3: what needs the whole model (parallel/zero_sharding.h holds
// the mechanism, parallel/zero_scopes.h what model/gpt.cu's chunk and layer loops do): the step's end, the
// gradient norm's sums and the optimizer step model/train_step.cu calls, and the report. Beyond the paper
// (docs/design.md "ZeRO-2 and ZeRO-3"). model/gpt.cu does not include this header: its loops need less than the
// whole model.
#pragma once
#include <cstdio>
#include <vector>
#include "gpt.h"
#include "../recompute/memory_techniques.h"

// Whether this model's gradients (ZeRO-2) and weights (ZeRO-3) are sharded.
bool zero_sharded(const GPT& m);

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
