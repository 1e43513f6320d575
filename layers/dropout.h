// dropout.h — hidden dropout (after the attention projection, after fc2, after the embedding), fused with
// the row-parallel bias and the residual add, with 1-byte masks (the paper's sbh per dropout).
//
// Element (s, b, c) of this rank's block [S_loc, B_loc, C] (sequence-major rows, row = s * B_loc + b) is
// element ((s_offset + s) * B_total + (b_offset + b)) * C + c of the global [S, B, C] tensor; its mask bit
// is dropout_keep(seed, stream, that global index) (philox.h). So TP, SP and DP ranks reproduce the masks
// of a single-rank run exactly.
//
// The plain math this file computes fast: layers/reference/dropout.h
#pragma once
#include "positions.h"
#include "runtime.h"

struct DropoutCoords {
    int64_t s_offset = 0;  // first global sequence position of this block (SP shard start: sp_shard)
    int64_t b_offset = 0;  // first global batch index of this block (DP rank's first sequence)
    int64_t B_total = 1;   // global batch
};

// out = resid + mask ⊙ (x + bias) / (1 - p); mask[i] = 1 (keep) or 0.
// bias [C] may be empty (no bias), resid may be empty (no residual), mask is always written (all ones when
// p == 0, so that the stored bytes match the paper's accounting). out may alias x or resid.
// x, bias, resid, out: activation dtype (f32 or bf16); mask: u8 [S_loc * B_loc * C].
void bias_dropout_residual_forward(Ctx& ctx, Tensor out, Tensor mask, Tensor x, Tensor bias, Tensor resid,
                                   float p, uint64_t seed, uint32_t stream, int S_loc, int B_loc, int C,
                                   const DropoutCoords& where);

// dx = dout ⊙ mask / (1 - p)  (dx may alias dout). n elements.
void dropout_backward(Ctx& ctx, Tensor dx, Tensor dout, Tensor mask, float p, int64_t n);

// bias_dropout_residual_forward on a rank's [positions, B, C] rows, once per run of `runs` (positions.h) with
// that run's first global position as its s_offset (where.s_offset is ignored): the hidden and embedding
// dropouts draw the single-rank masks whatever positions the rank holds (one run for the whole sequence or
// an SP shard, two for a CP rank's zigzag chunks). resid may be empty (no residual), as above.
void bias_dropout_residual_runs(Ctx& ctx, Tensor out, Tensor mask, Tensor x, Tensor bias, Tensor resid, float p,
                                uint64_t seed, uint32_t stream, const SeqRuns& runs, int B, int C, DropoutCoords where);
