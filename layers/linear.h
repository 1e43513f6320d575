// linear.h — y = x Wᵀ + b with W stored (out, in) as in llm.c / PyTorch. N rows (tokens).
// Column- and row-parallel versions (parallel/tensor_parallel.cu) call these on their weight shards.
// The fast CPU path's plain reference: x·Wᵀ + b as a double loop, the backward by finite differences:
// `test_linear` in test/layers/test_linear.cu.
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
