// residual.h — the residual stream's element-wise sums (forward add, gradient accumulation).
// The residual adds after dropout are fused into bias_dropout_residual_forward (dropout.h).
#pragma once
#include "runtime.h"

// out = a + b (out may alias a or b); all activation dtype.
void residual_forward(Ctx& ctx, Tensor out, Tensor a, Tensor b, int64_t n);
// dst += src (the gradient of a residual branch joining the stream); dst, src: same dtype (f32 or bf16).
void accumulate(Ctx& ctx, Tensor dst, Tensor src, int64_t n);
