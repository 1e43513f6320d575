// cross_entropy.h — the local pieces of a (vocab-parallel) softmax cross-entropy over a padded vocabulary,
// in two passes over the logits: the row statistics (one online pass), then the gradient.
//
// logits: f32 [N, V_local], this rank's columns are global vocabulary ids [v_begin, v_begin + V_local);
// ids >= V (the padding up to Vp) are ignored everywhere. The caller combines the pieces across the TP
// group (parallel/vocab_parallel.cu: all-reduce MAX of rowmax, then each rank rescales its sumexp to the
// global maximum, then SUMs of sumexp and target_logit), so full logits are never gathered. At tp = 1 these
// are simply the steps of an ordinary cross-entropy. (bf16-stored logits are accepted too, and dlogits may
// be f32 or bf16; all math is fp32.)
//
// The plain math this file computes fast: layers/reference/cross_entropy.h
#pragma once
#include "runtime.h"

// Pass 1, one read of the logits: per row, the maximum and the sum of exponentials kept together as an
// online pair (when a larger value arrives, the sum so far is rescaled to it), and the target's logit.
//   rowmax[i]       = max over this rank's valid columns (-inf when it has none)
//   sumexp[i]       = Σ_local exp(logit − rowmax[i])  (0 when none)
//   target_logit[i] = the target's logit if this rank owns targets[i], else 0.
// local_max (optional: pass Tensor() for none) receives a copy of rowmax, for the cross-rank rescale after
// rowmax is all-reduced in place. All f32 [N]; targets i32 [N].
void ce_forward_stats(Ctx& ctx, Tensor rowmax, Tensor sumexp, Tensor target_logit, Tensor local_max, Tensor logits,
                      Tensor targets, int N, int V_local, int64_t v_begin, int V);
// The cross-rank combine of the pairs: with rowmax now the global maximum and local_max this rank's own,
// sumexp[i] *= exp(local_max[i] − rowmax[i]) (0 stays 0 for a rank that holds only padding). A SUM over the
// ranks then gives Σ over the whole vocabulary of exp(logit − rowmax).
void ce_rescale_sumexp(Ctx& ctx, Tensor sumexp, Tensor local_max, Tensor rowmax, int N);
// losses[i] = log(sumexp[i]) + rowmax[i] - target_logit[i]   (f32 [N])
void ce_losses(Ctx& ctx, Tensor losses, Tensor rowmax, Tensor sumexp, Tensor target_logit, int N);
// Pass 2: dlogits = scale · (softmax - onehot(target)), 0 in padded columns. dlogits: activation dtype
// [N, V_local].
void ce_backward(Ctx& ctx, Tensor dlogits, Tensor logits, Tensor rowmax, Tensor sumexp, Tensor targets,
                 float scale, int N, int V_local, int64_t v_begin, int V);
