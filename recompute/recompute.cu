// recompute.cu — none / selective / full activation recomputation (paper §5; see recompute.h).
#include "recompute.h"

#include "../layers/philox.h"

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

// The softmax output, its dropout mask and the dropout output (the paper's 5as²b/t of core attention),
// allocated under their names and computed from s.qkv. The forward pass and selective recompute both call
// this, so the rebuilt tensors are bitwise those of the forward pass.
void attention_probs_saved_forward(Ctx& ctx, ActivationAllocator& A, SavedLayer& s, const AttnShape& attn, DType dt,
                                   int layer, float p, uint64_t seed) {
    const int64_t n_ss = (int64_t)attn.B * attn.NH * attn.S * attn.S;  // elements of one s×s tensor per rank
    s.probs = A.alloc(dt, n_ss, layer, "probs");
    s.attn_mask = A.alloc(DType::U8, n_ss, layer, "attn_mask");
    s.probs_drop = A.alloc(dt, n_ss, layer, "probs_drop");
    attention_probs_forward(ctx, s.probs, s.attn_mask, s.probs_drop, s.qkv, attn, p, seed,
                            dropout_stream(layer, kSiteAttnProbs));
}

void recompute_selective(Ctx& ctx, ActivationAllocator& A, SavedLayer& s, Recompute policy, Attention attention,
                         const AttnShape& attn, DType dt, int layer, float p, uint64_t seed) {
    // QKᵀ → scale + causal mask → softmax → dropout, from the saved Q and K, with the same (counter-based)
    // dropout mask as the forward pass.
    if (policy == Recompute::Selective && attention == Attention::Unfused)
        attention_probs_saved_forward(ctx, A, s, attn, dt, layer, p, seed);
}

void release_saved(SavedLayer& s, ActivationAllocator& A) {
    Tensor* all[] = {&s.ln1_in, &s.ln1_mean, &s.ln1_rstd, &s.qkv_in, &s.qkv, &s.probs, &s.attn_mask,
                     &s.probs_drop, &s.lse, &s.proj_in, &s.attn_drop_mask, &s.ln2_in, &s.ln2_mean, &s.ln2_rstd,
                     &s.fc1_in, &s.gelu_in, &s.fc2_in, &s.mlp_drop_mask};
    for (Tensor* t : all) A.release(*t);
}
