// linear.h — y = x Wᵀ + b with W stored (out, in) as in llm.c / PyTorch. N rows (tokens).
// Column- and row-parallel versions (parallel/tensor_parallel.cu) call these on their weight shards.
#pragma once
#include "runtime.h"

// out[N×OC] = in[N×IC] · weightᵀ (+ bias[OC] when bias is not empty).
// in, weight, bias: activation dtype; out: activation dtype or f32 (the LM head writes f32 logits).
void linear_forward(Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias, int N, int IC, int OC);

// din = dout · weight (or din += when accumulate_din), dweight += doutᵀ · in (f32 [OC×IC]),
// dbias += column sums of dout (f32 [OC]); with GradWrite::Overwrite, dweight = and dbias = (runtime.h).
// Any of din, dweight, dbias may be empty (skipped). dout, in, weight, din: activation dtype.
void linear_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                     Tensor weight, int N, int IC, int OC, bool accumulate_din = false,
                     GradWrite grads = GradWrite::Accumulate);

// dbias[C] += (or = with GradWrite::Overwrite) the sum over the N rows of dout[N×C] (f32 accumulation,
// deterministic order).
void bias_backward(Ctx& ctx, Tensor dbias, Tensor dout, int N, int C, GradWrite grads = GradWrite::Accumulate);

// Benchmarks only (layer_bench --lt-survey, on the GPU): for every shape the fused-bias forward GEMM has
// planned in this process, print up to max_candidates algorithms of cuBLASLt's heuristic, each timed on
// scratch operands, with the first (the one that runs) against the fastest. Changes no plan.
void linear_lt_survey(Ctx& ctx, int max_candidates = 8);

