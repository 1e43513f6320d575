// transformer_layer.h — one GPT-2 layer (pre-LN) under tensor parallelism, optionally with sequence
// parallelism, forward and backward, on this rank's slice of the weights.
//
//   x ─ LN1 ─ [g|f] ─ QKV (column-par.) ─ core attention ─ proj (row-par.) ─ [ḡ|f̄] ─ +bias ─ dropout ─ + ─ r1
//   r1 ─ LN2 ─ [g|f] ─ fc1 (column-par.) ─ GeLU ─ fc2 (row-par.) ─ [ḡ|f̄] ─ +bias ─ dropout ─ + ─ out
//
// Under SP, x, r1, out and the layer norms / dropouts live on sequence shards (S/t rows of the [S, B, C]
// activations); the parts between g and ḡ see the full sequence and a 1/t slice of heads or MLP columns.
// The layer itself does not branch on SP: the linear layers and the shapes it is given do (all of SP, and
// an index of where it touches the code: parallel/sequence_parallel.cu).
#pragma once
#include "../layers/attention.h"
#include "../layers/flash_attention.h"
#include "../layers/dropout.h"
#include "../parallel/tensor_parallel.h"
#include "../recompute/recompute.h"

struct LayerWeights {  // this rank's slices, activation dtype (views into the model's weights)
    Tensor ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};
struct LayerGrads {  // f32 gradients, accumulated (+=)
    Tensor ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

// A layer's context: everything one layer's forward and backward need besides its saved tensors — shapes,
// the TP/SP region, weight and gradient views, global dropout coordinates (built by gpt_layer_context).
struct LayerContext {
    Ctx* ctx = nullptr;
    ActivationAllocator* alloc = nullptr;
    Region region;         // TP group, SP on/off (parallel/sequence_parallel.h)
    DType dtype = DType::F32;
    int layer = 0;
    int S = 0, B = 0, C = 0;  // positions inside the TP regions (the sequence; S/c under CP), local batch, hidden
    int S_loc = 0;            // positions this rank holds outside the TP regions (S/t under SP: sp_shard)
    SeqRuns positions;        // their global positions, as runs (layers/positions.h): the dropouts' keys
    int C_loc = 0, F_loc = 0; // this rank's attention width (heads·HD) and MLP width (4C/t)
    AttnShape attn;           // local heads, global coordinates for dropout
    DropoutCoords where;      // global batch coordinates of this rank's [S_loc, B, C] block (s_offset: per run)
    float dropout = 0.f;
    uint64_t seed = 0;
    Attention attention = Attention::Unfused;  // core attention's form (recompute/memory_formulas.h)
    FlashCore flash = flash_attention_core();  // flash core attention: on S positions, or its ring (gpt_layer_context)
    LayerWeights w;
    LayerGrads g;
    // Accumulate into g, or Overwrite it: the layer's first backward of a step, when g holds last step's
    // gradients and is not zeroed (gpt_backward_chunk decides; runtime.h says why).
    GradWrite grads = GradWrite::Accumulate;
};

// Rows: N_shard = S_loc·B outside the TP regions, N_full = S·B inside them.
//
// out = layer(s.ln1_in). s.ln1_in is set by the caller (the layer's input, tagged "ln1_in"); `out` is
// allocated by the caller. Fills `s` and then keeps what `policy` says.
void layer_forward(LayerContext& run, SavedLayer& s, Tensor out, Recompute policy);

// dresid holds dL/d(out) on entry and dL/d(input) on return (updated in place, as the residual stream's
// gradient flows through both branches). Recomputes what the policy released first (full: this layer's
// forward again, from its saved input; selective: recompute_selective, recompute/recompute.h), accumulates
// the weight gradients into run.g (or overwrites them: run.grads), and releases all of `s`.
void layer_backward(LayerContext& run, SavedLayer& s, Tensor dresid, Recompute policy);
