// recompute.cu — none / selective / full activation recomputation (paper §5).
#include "recompute.h"

// The one include of model/ below model/: full recompute reruns the layer's forward (layer_forward), and
// the layer's forward and backward call keep_for_backward / recompute_for_backward here. That recursion is
// what full recomputation is (paper §5), so the two files depend on each other on purpose.
#include "../model/transformer_layer.h"

void keep_for_backward(SavedLayer& s, Recompute policy, ActivationAllocator& A) {
    if (policy == Recompute::None) return;
    // Selective (paper §5): drop core attention's s×s tensors; QKᵀ, softmax and dropout are cheap to redo
    // (2.7% extra FLOPs for GPT-3) compared with the 5as²b bytes they would occupy. (Flash attention never
    // made them: these releases of empty tensors do nothing, and selective keeps what none keeps.)
    A.release(s.probs);
    A.release(s.attn_mask);
    A.release(s.probs_drop);
    if (policy == Recompute::Selective) return;
    // Full: keep only the layer's input (ln1_in, owned here like the rest); everything else is recomputed.
    Tensor input = s.ln1_in;
    s.ln1_in = Tensor();
    release_saved(s, A);
    s.ln1_in = input;
}

void recompute_for_backward(LayerContext& run, SavedLayer& s, Recompute policy) {
    if (policy == Recompute::None) return;
    if (policy == Recompute::Full) {
        // Rerun the whole forward of the layer from its saved input, keeping everything this time; its
        // output (already consumed by the next layer) goes to a transient buffer.
        Tensor out = run.alloc->alloc(run.dtype, (int64_t)run.S_loc * run.B * run.C, run.layer, "tmp:recomputed_out");
        layer_forward(run, s, out, Recompute::None);
        run.alloc->release(out);
        return;
    }
    // Selective: QKᵀ → scale + causal mask → softmax → dropout, from the saved Q and K; the same call as in
    // the forward pass (model/transformer_layer.cu), and the same (counter-based) dropout mask. Under flash
    // attention there is nothing to rebuild here: its backward pass recomputes the probabilities itself,
    // tile by tile, from Q, K and the saved log-sum-exp.
    if (run.attention == Attention::Unfused) attention_probs_saved_forward(run, s);
}

void release_saved(SavedLayer& s, ActivationAllocator& A) {
    Tensor* all[] = {&s.ln1_in, &s.ln1_mean, &s.ln1_rstd, &s.qkv_in, &s.qkv, &s.probs, &s.attn_mask,
                     &s.probs_drop, &s.lse, &s.proj_in, &s.attn_drop_mask, &s.ln2_in, &s.ln2_mean, &s.ln2_rstd,
                     &s.fc1_in, &s.gelu_in, &s.fc2_in, &s.mlp_drop_mask};
    for (Tensor* t : all) A.release(*t);
}
