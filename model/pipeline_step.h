// pipeline_step.h — the forwards and backwards of one training step at pp > 1, in a pipeline schedule's
// order (at pp 1 the step is a plain micro-batch loop: model/train_step.cu).
//
// The schedule (parallel/pipeline_schedule.h: AFAB, 1F1B, interleaved 1F1B; parallel/zero_bubble_schedule.h:
// ZB-H1, ZB-H2, ZB-V) lists this stage's ops. A forward of (micro-batch j, chunk c) receives its input from the
// previous virtual stage, unless it is the first (the embeddings), and sends its output on, unless it is the
// last (the loss); a backward receives the gradient of its output and sends the gradient of its input back; a W
// neither. Each op starts by posting one exchange, the previous op's sends with its own receive, and waits only
// for that receive (NCCL's rules, parallel/point_to_point.h); on NCCL the schedule's units, each one exchange
// that completes as a whole. The messages themselves: model/pipeline_ops.h.
#pragma once
#include "gpt.h"
#include "../recompute/memory_report.h"

// Zero the gradients, then run every op of this stage's schedule over the M micro-batches of B_local/M
// sequences each (rows [j·b, (j+1)·b) of inputs/targets, host [B_local, S]). Gradients accumulate in
// m.grads in micro-batch order (each chunk's backwards are FIFO); the loss gradient is scaled by 1/M.
// Right after the forward that brings this stage to the most micro-batches in flight (forward run, backward
// not; under a zero-bubble schedule forward run, W not: parallel/zero_bubble_schedule.h), it marks the peak
// (ActivationAllocator::mark_peak: the memory report's snapshot). Returns the mean loss over the M
// micro-batches on every stage (the last stage computes it). No gradient synchronization.
float pipeline_forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches);

// Under optimizer post-validation (m.pipe.post_validation, model/post_validation.h) the step does not end in a
// synchronization: the returned loss is the head stage's (0 on the others), and on the MPI backend with CPU
// tensors the tied word embedding's gradient sum over the first and last stage (sync_gradients) starts as soon
// as this stage's last B that writes it has run, so the first stage does not wait for the last at its end. This
// finishes that sum (it waits for the other end's part only); false when none was started (the caller sums it
// then).
bool pipeline_embedding_sum_finish(GPT& m);
// This stage's part of that sum leaves when the other end takes it: waited for before the next step's part
// (its buffer) and before the run ends (post_validation_settle).
void pipeline_embedding_send_wait(GPT& m);

// What this stage holds at its schedule's peak over M micro-batches (the moment it marks): each of its
// layers with the micro-batches of its chunk in flight, the embedding's on the first stage, the head's on the
// last. The memory report's formula side (recompute/memory_report.h). At pp 1, whatever m.schedule says, one
// micro-batch (model/train_step.cu's plain loop).
InFlightLayers pipeline_in_flight(const GPT& m, int M);
// Under a zero-bubble schedule, at the same moment: how many micro-batches' W inputs the stage holds (B run, W
// not; parallel/zero_bubble_schedule.h). 0 under the other schedules.
int pipeline_weight_pending(const GPT& m, int M);
