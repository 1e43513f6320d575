// layernorm.h — LayerNorm over the last dimension (eps 1e-5, GPT-2), N rows of C channels.
// Under sequence parallelism these run on the rank's s/t shard of rows (parallel/sequence_parallel.cu).
// The plain math this file computes fast: layers/reference/layernorm.h
#pragma once
#include "runtime.h"

constexpr float kLayerNormEps = 1e-5f;

// out = (in - mean) * rstd * weight + bias. mean, rstd: f32 [N] (saved for backward; may be empty when the
// caller does not keep them). in, out, weight, bias: activation dtype.
void layernorm_forward(Ctx& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                       int N, int C);

// Accumulates: din += dL/din (activation dtype), dweight += , dbias += (f32 [C]); with GradWrite::Overwrite
// (runtime.h) dweight = and dbias = (din still accumulates: it is the residual stream's gradient).
// Deterministic on GPU (fixed-order reductions, no float atomics), so recompute policies stay bitwise identical.
void layernorm_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                        Tensor weight, Tensor mean, Tensor rstd, int N, int C,
                        GradWrite grads = GradWrite::Accumulate);

// The forward kernel a CUDA launch picks, decided on the host from C and the dtype alone: the packs of 8
// channels per lane of the row-in-registers kernel (4: C <= 1024, 8: <= 2048, 16: <= 4096, 24: <= 6144 in
// bf16 only), or 0 for the general kernel. test/layers/test_kernel_coverage.cu lists every value against
// the shapes the GPU tests run.
int layernorm_forward_slots(int C, DType dtype);

// Bytes of ctx_scratch (runtime.h) that layernorm_backward takes on the GPU for N rows of C channels: the
// model reserves them before its first step, so the scratch never grows (cudaFree) inside a step.
size_t layernorm_backward_scratch_bytes(int N, int C);
