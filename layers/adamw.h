// adamw.h — AdamW on fp32 master weights and fp32 moments (llm.c's update rule), plus the reductions the
// optimizer step needs (gradient norm for clipping).
// The plain math this file computes fast: layers/reference/adamw.h
#pragma once
#include <vector>
#include "runtime.h"

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  g = grad · grad_scale (the clipping factor)
// param -= lr · ( m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay · param )      t = step, from 1
void adamw_update(Ctx& ctx, Tensor param, Tensor grad, Tensor m, Tensor v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale);
// The same update, fused with the rounding of the new weight into the bf16 compute copy: compute[i] =
// bf16(param[i]) in the same pass (bitwise what adamw_update followed by tensor_convert gives, without a
// second read of the fp32 weights). compute may be empty (fp32 training: the weights are the master).
// The optimizer step uses it on the whole model and, with the distributed optimizer, on a rank's shard
// (parallel/distributed_optimizer.h).
void adamw_update_fused(Ctx& ctx, Tensor param, Tensor compute, Tensor grad, Tensor m, Tensor v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);

// Σ x² of a tensor (f32 or bf16 storage), in double and in a fixed order (deterministic), returned on the host
// (synchronizes).
double sum_of_squares(Ctx& ctx, Tensor x);
// The same sums for several tensors, each bit-identical to sum_of_squares of it alone, with ONE host
// synchronization for all of them (the gradient norm of a step needs 16 tensors).
std::vector<double> sums_of_squares(Ctx& ctx, const std::vector<Tensor>& xs);
// Bytes of ctx_scratch (runtime.h) sums_of_squares takes on the GPU for tensors of these sizes: the model
// reserves them before its first step, so the scratch never grows inside a step.
size_t sums_of_squares_scratch_bytes(const std::vector<int64_t>& sizes);
// x *= s (f32)
void scale_inplace(Ctx& ctx, Tensor x, float s);
// acc += x (f32, element by element): ZeRO-2 adds each micro-batch's reduce-scattered gradient piece into the
// rank's shard (parallel/zero_sharding.h).
void add_inplace(Ctx& ctx, Tensor acc, Tensor x);
