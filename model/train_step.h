// train_step.h — one optimizer step: forward, backward, gradient synchronization (the SP sum over the TP
// group, the average over the DP group), global-norm clipping, AdamW, and the bf16 weight refresh.
#pragma once
#include <string>
#include "gpt.h"
#include "../layers/test_hooks.h"

struct OptimConfig {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
    float grad_clip = 1.0f;  // max global gradient norm; 0 disables clipping
};

struct StepStats {
    float loss = 0;       // mean over the global batch
    float grad_norm = 0;  // global norm before clipping
    // False when the loss or the gradient norm was not finite: the optimizer update was NOT applied (the
    // weights and moments are those of the previous step; the gradients are left for inspection).
    bool applied = true;
    // The forward and backward passes (forward_backward): their seconds, and of those the seconds this rank
    // spent blocked in exchanges with its neighbouring pipeline stages (its idle time: the pipeline bubble).
    double pipeline_seconds = 0, recv_wait_seconds = 0;
};

// inputs/targets: this rank's host batch [B_local, S]. step counts from 1. micro_batches M > 1 (gradient
// accumulation): the B_local sequences run as M micro-batches of B_local/M (forward_backward), their
// gradients summed; the loss and gradients are those of the whole batch (up to float reassociation).
StepStats train_step(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S,
                     const OptimConfig& opt, int step, float lr, int micro_batches = 1);
// The forwards and backwards of a step, gradients zeroed first and accumulated, no synchronization; returns
// the mean loss over the M micro-batches (on every stage). At pp 1 a plain loop: forward of micro-batch j,
// backward of j, for j = 0 .. M-1 (one micro-batch in flight: its forward marks the activations' peak,
// ActivationAllocator::mark_peak). At pp > 1 the pipeline schedule (model/pipeline_step.h).
float forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches = 1);
// The gradient synchronization: under SP the sum over TP of the replicated parameters' gradients
// (sum_sequence_parallel_grads, parallel/sequence_parallel.h), then the average over DP.
void sync_gradients(GPT& m);
// Global L2 norm of the (synchronized) gradients over the whole model (all TP slices, replicated tensors
// counted once).
double gradient_norm(GPT& m);
// After a step with a non-finite gradient: the first gradient tensor, in llm.c order and per layer, that
// holds a NaN or Inf on any rank, e.g. "qkvw (layer 1) on rank 0"; "" when every gradient is finite.
// Collective: every rank of the grid must call it.
std::string first_nonfinite_gradient(GPT& m);
// Evaluation: mean loss of a batch, no backward.
float eval_loss(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S);
