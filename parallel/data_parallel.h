// data_parallel.h — data parallelism: each DP rank runs the model on its own B/dp sequences of the global
// batch; gradients are averaged over the DP group, so the update equals the single-rank update on the
// whole global batch (the loss is a mean over all B·S targets).
#pragma once
#include "collectives.h"

// grads (f32, flat) = mean over the DP group.
void average_gradients(Comm& dp, const Ctx& ctx, Tensor grads);
// The mean of a host scalar over the DP group (the global batch's loss from the per-rank means).
double average_scalar(Comm& dp, double x);
