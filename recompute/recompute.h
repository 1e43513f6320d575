// recompute.h — activation recomputation policies (paper §5): none, selective, full. ("Recompute" is what
// Megatron-LM calls activation checkpointing: --recompute-granularity selective|full; nothing here writes
// a file.)
//
// The forward pass of a layer (model/transformer_layer.cu) computes every tensor; then `keep_for_backward`
// releases what the policy does not keep. Before the layer's backward, `recompute_for_backward` rebuilds what
// was released, by running *the same kernels on the same inputs* — so the three policies give bitwise
// identical losses and gradients, and dropout masks need no saved RNG state (they are a function of global
// coordinates: layers/philox.h).
#pragma once
#include "formulas.h"  // enum class Recompute
#include "saved_layer.h"
#include "../layers/activation_allocator.h"

struct LayerContext;  // model/transformer_layer.h

// Release what `policy` does not keep after the forward pass of a layer.
//  selective: the softmax output, its dropout mask and the dropout output (5as²b/t bytes), cheap to rebuild
//             from Q and K and by far the largest term at long sequences.
//  full:      everything but the layer's input.
void keep_for_backward(SavedLayer& s, Recompute policy, ActivationAllocator& alloc);

// Rebuild what keep_for_backward released. full: rerun the layer's forward from its input; selective:
// rerun QKᵀ → scale + mask → softmax → dropout from the saved Q and K.
void recompute_for_backward(LayerContext& run, SavedLayer& s, Recompute policy);

// Release everything (after the layer's backward).
void release_saved(SavedLayer& s, ActivationAllocator& alloc);
