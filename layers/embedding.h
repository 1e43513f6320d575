// embedding.h — token and position embeddings. Tokens are [S, B] (sequence-major: the host transposes the
// loader's [B, S] batch), so the output rows are already in the [s, b, h] activation layout.
// Vocab-parallel: a rank holds the rows [v_begin, v_begin + V_local) of the (padded) token table and writes
// zeros for tokens it does not own; parallel/vocab_parallel.cu then sums over the TP group.
// The plain math this file computes fast: layers/reference/embedding.h
#pragma once
#include <vector>
#include "runtime.h"

// out[r, :] = wte_local[tokens[r] - v_begin, :] if the token is in this rank's range, else 0. N = S·B rows.
// tokens: i32 [N] on ctx's device; wte_local, out: activation dtype.
void token_embedding_forward(Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local, int64_t v_begin,
                             int V_local, int N, int C);

// For a deterministic backward: rows grouped by (local) token id, built on the host from the host tokens.
// For unique local token u (0..U-1): token[u] (local row in wte_local) and rows[row_ptr[u] .. row_ptr[u+1]).
// Each tensor's .n is its capacity (buffers are reused across builds); the valid lengths are U, U + 1 and
// row_ptr[U] (the number of rows holding a token of this rank's range). Rows appear in ascending order
// within a group: that order is the (fixed) summation order of the backward.
struct EmbeddingIndex {
    Tensor token, row_ptr, rows;  // i32 on the target device, capacity reused across steps
    int U = 0;                    // unique tokens of this rank's range in this batch
};
// Built on the host, uploaded on ctx's stream (the index lives on ctx's device; the backward that reads it
// runs on the same stream).
void embedding_index_build(EmbeddingIndex& idx, const int32_t* tokens_host, int N, int64_t v_begin,
                           int V_local, const Ctx& ctx);
void embedding_index_free(EmbeddingIndex& idx);

// dwte_local[token] += sum of dout rows that used it (f32 accumulation, fixed order).
void token_embedding_backward(Ctx& ctx, Tensor dwte_local, Tensor dout, const EmbeddingIndex& idx, int C);

// out[s, b, :] += wpe[s_offset + s, :] for the S_loc positions of this block (global positions under SP).
void position_embedding_forward(Ctx& ctx, Tensor out, Tensor wpe, int64_t s_offset, int S_loc, int B, int C);
// dwpe[s_offset + s, :] += sum over b of dout[s, b, :]   (dwpe f32)
void position_embedding_backward(Ctx& ctx, Tensor dwpe, Tensor dout, int64_t s_offset, int S_loc, int B,
                                 int C);
