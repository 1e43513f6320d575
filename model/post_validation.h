// post_validation.h — optimizer post-validation (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR
// 2024: beyond the paper this project reproduces): a training step without the synchronization at its end.
//
// The synchronous step (model/train_step.h) ends in three checks that every stage waits for: the global gradient
// norm, the clip it implies, and the non-finite verdict. They keep each pipeline schedule's start and end
// triangles: a stage that finishes its ops early waits for the last one. Here instead each stage, as soon as its
// own gradients are synchronized (sync_gradients: TP, the tied embedding, DP), steps its optimizer as if no check
// fails (scale 1), having kept what it needs to undo that: the weights, the AdamW moments and the gradients
// (a snapshot). The checks' inputs leave at once without waiting: the stage's part of the squared norm and, from
// the stage that holds the head, the loss, summed over the pipeline by eager messages (host_sum_post). The next step's
// forwards and backwards run meanwhile; after them the step before is validated (its all-reduce has long arrived):
//  - if the loss or the norm is not finite, the update is rolled back (the snapshot restored) and skipped;
//  - if the clip would have changed the update (norm > --grad-clip), it is rolled back and redone with the clip's
//    scale, from the snapshot's gradients;
// and in both cases the forwards and backwards just run (with the wrong weights) are run again. The norm is summed
// in the synchronous path's order (TP, then DP under the distributed optimizer, then the pipeline), the same
// AdamW calls run on the same buffers, so the weights and moments are bitwise the synchronous path's, rollbacks
// included (test_post_validation).
//
// What it costs: a snapshot of the stage's fp32 master weights, AdamW moments (this rank's shard under the
// distributed optimizer), compute weights when they are a separate copy, and gradients: 16 bytes per parameter
// (plus 2 in bf16), and a copy of them per step; a rollback costs one more forward-backward and optimizer step.
// The statistics of a step (loss, norm, applied) are known one step later: post_validated_step returns those
// of the step it has just validated (step 0 when none), and post_validation_settle validates the last one.
#pragma once
#include <vector>
#include "train_step.h"
#include "../parallel/point_to_point.h"

struct PostValidation {
    int pending = 0;  // the step updated as if valid and not yet validated (0: none)
    OptimConfig opt;
    float lr = 0;
    double reduced[2] = {0, 0};  // over the pipeline: the squared norm's stage parts, the head stage's loss
    HostSum sum;                 // their sum in flight (parallel/point_to_point.h)
    Tensor master, weights, adam_m, adam_v, grads;  // the snapshot (allocated once)
    std::vector<StepStats> validated;               // validated and not yet returned
    int rollbacks = 0;
};
void post_validation_free(PostValidation& pv);

// One training step under post-validation: forward and backward of `step` (run again when the step before is
// rolled back), the step before validated, the gradients synchronized, the optimizer stepped as if valid. Returns
// the statistics of the earliest validated step not yet returned (StepStats::step; 0 when none yet).
StepStats post_validated_step(GPT& m, PostValidation& pv, const int32_t* inputs, const int32_t* targets, int B_local,
                              int S, const OptimConfig& opt, int step, float lr, int micro_batches = 1);
// Validate the pending step now (rolling it back if it fails) and return what post_validated_step has not yet
// returned, oldest first: before a checkpoint, an evaluation, or the end of the run.
std::vector<StepStats> post_validation_settle(GPT& m, PostValidation& pv);
