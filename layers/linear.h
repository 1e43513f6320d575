// linear.h — y = x Wᵀ + b with W stored (out, in) as in llm.c / PyTorch. N rows (tokens).
// Column- and row-parallel versions (parallel/tensor_parallel.cu) call these on their weight shards.
// The plain math this file computes fast: layers/reference/linear.h
#pragma once
#include "runtime.h"

// out[N×OC] = in[N×IC] · weightᵀ (+ bias[OC] when bias is not empty).
// in, weight, bias: activation dtype; out: activation dtype or f32 (the LM head writes f32 logits).
void linear_forward(Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias, int N, int IC, int OC);

// din = dout · weight (or din += when accumulate_din), dweight += doutᵀ · in (f32 [OC×IC]),
// dbias += column sums of dout (f32 [OC]); with GradWrite::Overwrite, dweight = and dbias = (runtime.h).
// Any of din, dweight, dbias may be empty (skipped). dout, in, weight, din: activation dtype.
// While ctx.weight_grad_sink is set (a zero-bubble schedule's B), dweight and dbias go to the sink instead.
void linear_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                     Tensor weight, int N, int IC, int OC, bool accumulate_din = false,
                     GradWrite grads = GradWrite::Accumulate);

// dbias[C] += (or = with GradWrite::Overwrite) the sum over the N rows of dout[N×C] (f32 accumulation,
// deterministic order).
void bias_backward(Ctx& ctx, Tensor dbias, Tensor dout, int N, int C, GradWrite grads = GradWrite::Accumulate);

// Where a zero-bubble schedule's B puts the weight gradients off to its W (layers/weight_grad_queue.h implements
// it; this interface keeps the layer from knowing the queue, so the queue may call linear_backward back).
struct WeightGradSink {
    // Take dweight += doutᵀ·in and dbias += Σ dout for later (false: compute them now, as without a sink).
    virtual bool defer(Ctx& ctx, Tensor dweight, Tensor dbias, Tensor dout, Tensor in, int N, int IC, int OC,
                       GradWrite grads) = 0;

protected:
    ~WeightGradSink() = default;
};

// Which GPU forward runs for a call with a bias. FusedBias: one cuBLASLt GEMM with the bias in its epilogue
// (same input and output dtype, a 16-byte aligned bias, and only when cuBLASLt offers a kernel for the shape:
// otherwise Broadcast). Broadcast: bias_broadcast_kernel<out dtype, bias dtype> writes the bias into every
// row, then the GEMM adds the product with beta = 1. NoBias: the plain GEMM.
enum class LinearForwardPath : uint8_t { NoBias, FusedBias, Broadcast };
const char* linear_forward_path_name(LinearForwardPath p);
// The path the host picks before asking cuBLASLt (a plain host function: test/layers/test_kernel_coverage.cu
// lists every one against the GPU tests' shapes). FusedBias here still falls back to Broadcast at run time
// when cuBLASLt declines the shape, unless a test pinned the path (below).
LinearForwardPath linear_forward_path(DType in, DType out, bool has_bias);
// Tests only: pin every later GPU forward with a bias to one path, so that each is tested whatever cuBLASLt
// takes. Pinned to FusedBias, a call cuBLASLt declines stops with an error instead of falling back; pinned
// to Broadcast, cuBLASLt is not asked. NoBias (the default) unpins.
void linear_forward_pin(LinearForwardPath p);
// The path the last GPU forward with a bias took in this process (tests check that a pin held).
LinearForwardPath linear_forward_last_path();

// Bytes of ctx_scratch (runtime.h) that bias_backward takes on the GPU for N rows of C columns: the model
// reserves them before its first step, so the scratch never grows (cudaFree) inside a step.
size_t bias_backward_scratch_bytes(int N, int C);

