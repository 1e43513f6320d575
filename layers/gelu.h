// gelu.h — GeLU with the tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// The plain math this file computes fast: layers/reference/gelu.h
#pragma once
#include "runtime.h"

void gelu_forward(Ctx& ctx, Tensor out, Tensor in, int64_t n);
// din = dout * gelu'(in)   (din may alias dout)
void gelu_backward(Ctx& ctx, Tensor din, Tensor in, Tensor dout, int64_t n);
