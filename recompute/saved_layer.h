// saved_layer.h — what one transformer layer keeps between its forward and its backward.
//
// One field per tensor of the paper's list (docs/paper.md, "Stored activations of one transformer layer"), named
// as in recompute/memory_formulas.h, so that the memory report can put the measured bytes of each next to its
// formula. Which fields are filled after the forward pass depends on the recompute policy
// (recompute/recompute.h):
//   none      all of them;
//   selective all but probs, attn_mask and probs_drop (the 5as²b of core attention);
//   full      only ln1_in, the layer's input.
// Under flash attention (layers/flash_attention.h) probs, attn_mask and probs_drop are never filled, and lse
// (one fp32 log-sum-exp per query and head) is, under none and selective alike.
// Under sequence parallelism the LN inputs, qkv_in, fc1_in and the hidden-dropout masks are sequence
// shards (s/t rows); the rest are split by heads or by the MLP columns under any tensor parallelism.
#pragma once
#include "../layers/tensor.h"

struct SavedLayer {
    // attention block
    Tensor ln1_in;          // layer input = LN1 input             [S_loc·B, C]
    Tensor ln1_mean, ln1_rstd;  // extras: LN1 statistics            f32 [S_loc·B]
    Tensor qkv_in;          // LN1 output = input of the QKV linear  [S_loc·B, C] (a shard under SP)
    Tensor qkv;             // Q, K, V of this rank's heads          [S·B, 3·C/t]
    Tensor probs;           // softmax output                        [B, a/t, S, S]
    Tensor attn_mask;       // its dropout mask (u8)                  [B, a/t, S, S]
    Tensor probs_drop;      // dropout output, multiplied by V        [B, a/t, S, S]
    Tensor lse;             // flash attention only, instead of the three above: f32 [B, a/t, S]
    Tensor proj_in;         // attention context = projection input  [S·B, C/t]
    Tensor attn_drop_mask;  // dropout mask after the projection     [S_loc·B, C] (u8)
    // MLP block
    Tensor ln2_in;          // residual stream = LN2 input           [S_loc·B, C]
    Tensor ln2_mean, ln2_rstd;  // extras
    Tensor fc1_in;          // LN2 output = fc1 input                [S_loc·B, C]
    Tensor gelu_in;         // fc1 output                            [S·B, 4C/t]
    Tensor fc2_in;          // GeLU output = fc2 input               [S·B, 4C/t]
    Tensor mlp_drop_mask;   // dropout mask after fc2                [S_loc·B, C] (u8)
};
