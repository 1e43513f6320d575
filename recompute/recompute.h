// recompute.h — activation recomputation policies (paper §5): none, selective, full. ("Recompute" is what
// Megatron-LM calls activation checkpointing: --recompute-granularity selective|full; nothing here writes
// a file.)
//
// Everything a policy decides is in this file and recompute.cu, next to what it rebuilds:
//   keep_for_backward            what each policy keeps after a layer's forward pass (the rest is released);
//   attention_probs_saved_forward the selective region (the paper's Fig. 3): QKᵀ → scale + causal mask →
//                                softmax → dropout, computed from the saved Q and K into the three s×s tensors.
//                                The layer's forward pass makes them with this call, and selective
//                                recomputation rebuilds them with it before the backward pass;
//   recompute_selective          that rebuild.
// Full recomputation reruns the whole layer forward from its saved input: the layer's backward does that
// itself (layer_backward, model/transformer_layer.cu), so this file calls nothing above it. Rebuilding runs
// *the same kernels on the same inputs*, so the three policies give bitwise identical losses and gradients,
// and dropout masks need no saved RNG state (they are a function of global coordinates: layers/philox.h).
// The functions take their shapes and tensors as arguments: no layer context.
#pragma once
#include "memory_formulas.h"  // enum class Recompute, Attention
#include "saved_layer.h"
#include "../layers/activation_allocator.h"
#include "../layers/attention.h"

// Release what `policy` does not keep after the forward pass of a layer.
//  selective: the softmax output, its dropout mask and the dropout output (5as²b/t bytes), cheap to rebuild
//             from Q and K and by far the largest term at long sequences.
//  full:      everything but the layer's input.
void keep_for_backward(SavedLayer& s, Recompute policy, ActivationAllocator& alloc);

// Allocate s.probs, s.attn_mask, s.probs_drop (tagged with the paper's names, for layer `layer`) and compute
// them from s.qkv: core attention's QKᵀ → scale + causal mask → softmax → dropout (probability p, this step's
// seed) for the rank's heads `attn`, in dtype `dt`. Unfused attention only.
void attention_probs_saved_forward(Ctx& ctx, ActivationAllocator& alloc, SavedLayer& s, const AttnShape& attn,
                                   DType dt, int layer, float p, uint64_t seed);

// Selective recomputation before the layer's backward: rebuild what keep_for_backward released, with the
// forward's own call. Nothing to do under none, or under flash attention (its backward pass rebuilds the
// probabilities itself, tile by tile, from Q, K and the saved log-sum-exp); full is the layer's (above).
void recompute_selective(Ctx& ctx, ActivationAllocator& alloc, SavedLayer& s, Recompute policy, Attention attention,
                         const AttnShape& attn, DType dt, int layer, float p, uint64_t seed);

// Release everything (after the layer's backward).
void release_saved(SavedLayer& s, ActivationAllocator& alloc);
