// vocab_parallel.h — the vocabulary-parallel token embedding and the vocabulary-parallel cross-entropy
// (Megatron-LM): each TP rank holds Vp/t rows of the tied token table; full logits are never gathered.
#pragma once
#include <vector>
#include "tensor_parallel.h"
#include "../layers/embedding.h"

// out = f̄(lookup) under TP (full [S·B, C]) or ḡ(lookup) under SP (this rank's sequence shard: the SP half,
// sp_vocab_parallel_embedding_*, is in parallel/sequence_parallel.cu): a rank looks up the tokens of its vocabulary range, writes zeros for the
// others, and the sum over the group completes every row.
void vocab_parallel_embedding_forward(Region& r, Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local,
                                      int64_t v_begin, int V_local, int N_full, int C);
// dwte_local += rows of dout (all-gathered first under SP; identity under TP).
void vocab_parallel_embedding_backward(Region& r, Ctx& ctx, Tensor dwte_local, Tensor dout,
                                       const EmbeddingIndex& idx, int N_full, int C);

// Cross-entropy over vocab-sharded logits [N, V_local] (f32), one pass over the logits: each rank's online
// (row max, exp-sum) pairs, then all-reduce MAX of the row maxima, each rank's exp-sums rescaled to the
// global maxima, SUM of the exp-sums and of the target logits. Fills rowmax/sumexp (f32 [N], kept for
// backward) and losses (f32 [N]), and returns the mean loss over the N rows (synchronizes). host_losses
// (optional) receives the N losses, which the mean is computed from anyway (evaluations that score single
// positions).
float vocab_parallel_cross_entropy(Comm& tp, Ctx& ctx, Tensor logits, Tensor targets, Tensor rowmax, Tensor sumexp,
                                   Tensor target_logit, Tensor losses, int N, int V_local, int64_t v_begin, int V,
                                   std::vector<float>* host_losses = nullptr);
