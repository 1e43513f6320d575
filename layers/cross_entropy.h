// cross_entropy.h — the local pieces of a (vocab-parallel) softmax cross-entropy over a padded vocabulary.
//
// logits: f32 [N, V_local], this rank's columns are global vocabulary ids [v_begin, v_begin + V_local);
// ids >= V (the padding up to Vp) are ignored everywhere. The caller combines the pieces across the TP
// group (parallel/vocab_parallel.cu: all-reduce MAX of rowmax, SUM of sumexp and target_logit), so full
// logits are never gathered. At tp = 1 these are simply the steps of an ordinary cross-entropy.
// (bf16-stored logits are accepted too, and dlogits may be f32 or bf16; all math is fp32.)
#pragma once
#include "runtime.h"

// rowmax[i] = max over this rank's valid columns (-inf when it has none). f32 [N].
void ce_row_max(Ctx& ctx, Tensor rowmax, Tensor logits, int N, int V_local, int64_t v_begin, int V);
// With the global rowmax: sumexp[i] = Σ_local exp(logit - rowmax[i]); target_logit[i] = the target's logit
// if this rank owns targets[i], else 0. targets: i32 [N].
void ce_sumexp_target(Ctx& ctx, Tensor sumexp, Tensor target_logit, Tensor logits, Tensor rowmax,
                      Tensor targets, int N, int V_local, int64_t v_begin, int V);
// losses[i] = log(sumexp[i]) + rowmax[i] - target_logit[i]   (f32 [N])
void ce_losses(Ctx& ctx, Tensor losses, Tensor rowmax, Tensor sumexp, Tensor target_logit, int N);
// dlogits = scale · (softmax - onehot(target)), 0 in padded columns. dlogits: activation dtype [N, V_local].
void ce_backward(Ctx& ctx, Tensor dlogits, Tensor logits, Tensor rowmax, Tensor sumexp, Tensor targets,
                 float scale, int N, int V_local, int64_t v_begin, int V);
