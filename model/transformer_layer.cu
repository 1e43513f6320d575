// transformer_layer.cu — forward and backward of one GPT-2 layer under TP (+ SP); see the header's diagram.
//
// Every activation is allocated from the tagged allocator under the paper's tensor names, so what this
// layer keeps for backward is measured (recompute/memory_report.cu). Transient buffers are tagged "tmp:"
// and released as soon as they are used.
#include "transformer_layer.h"

#include "../layers/gelu.h"
#include "../layers/layernorm.h"
#include "../layers/linear.h"
#include "../layers/philox.h"

// Bias + dropout + residual on this rank's [S_loc, B, C] block, by run of global positions (layers/positions.h).
static void hidden_dropout(LayerContext& run, Tensor out, Tensor mask, Tensor x, Tensor bias, Tensor resid,
                           DropoutSite site) {
    bias_dropout_residual_runs(*run.ctx, out, mask, x, bias, resid, run.dropout, run.seed,
                               dropout_stream(run.layer, site), run.positions, run.B, run.C, run.where);
}

void layer_forward(LayerContext& run, SavedLayer& s, Tensor out, Recompute policy) {
    Ctx& ctx = *run.ctx;
    ActivationAllocator& A = *run.alloc;
    const int l = run.layer, C = run.C;
    const int N_shard = run.S_loc * run.B;  // rows outside the TP regions (a sequence shard under SP)
    const int N_full = run.S * run.B;       // rows inside them (the whole sequence)
    const DType dt = run.dtype;
    const LayerWeights& w = run.w;

    // ---- attention block --------------------------------------------------------------------------------
    s.ln1_mean = A.alloc(DType::F32, N_shard, l, "ln1_mean");
    s.ln1_rstd = A.alloc(DType::F32, N_shard, l, "ln1_rstd");
    s.qkv_in = A.alloc(dt, (int64_t)N_shard * C, l, "qkv_in");
    layernorm_forward(ctx, s.qkv_in, s.ln1_mean, s.ln1_rstd, s.ln1_in, w.ln1w, w.ln1b, N_shard, C);

    s.qkv = A.alloc(dt, (int64_t)N_full * 3 * run.C_loc, l, "qkv");
    column_parallel_forward(run.region, ctx, s.qkv, s.qkv_in, w.qkvw, w.qkvb, N_full, C, 3 * run.C_loc);

    if (run.attention == Attention::Flash) {
        // Core attention in tiles: no s×s tensor at all, one fp32 log-sum-exp per query and head kept instead.
        s.lse = A.alloc(DType::F32, (int64_t)run.B * run.attn.NH * run.S, l, "lse");
        s.proj_in = A.alloc(dt, (int64_t)N_full * run.C_loc, l, "proj_in");
        run.flash.forward(ctx, s.proj_in, s.lse, s.qkv, run.attn, run.dropout, run.seed,
                          dropout_stream(l, kSiteAttnProbs));
    } else {
        // The selective region (paper Fig. 3), the call that selective recompute repeats (recompute/recompute.h).
        attention_probs_saved_forward(ctx, A, s, run.attn, dt, l, run.dropout, run.seed);
        s.proj_in = A.alloc(dt, (int64_t)N_full * run.C_loc, l, "proj_in");
        attention_context_forward(ctx, s.proj_in, s.probs_drop, s.qkv, run.attn);
    }

    Tensor y = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:attn_out");
    row_parallel_forward(run.region, ctx, y, s.proj_in, w.attprojw, N_full, run.C_loc, C);
    s.attn_drop_mask = A.alloc(DType::U8, (int64_t)N_shard * C, l, "attn_drop_mask");
    s.ln2_in = A.alloc(dt, (int64_t)N_shard * C, l, "ln2_in");
    hidden_dropout(run, s.ln2_in, s.attn_drop_mask, y, w.attprojb, s.ln1_in, kSiteAttnOut);
    A.release(y);

    // ---- MLP block ----------------------------------------------------------------------------------------
    s.ln2_mean = A.alloc(DType::F32, N_shard, l, "ln2_mean");
    s.ln2_rstd = A.alloc(DType::F32, N_shard, l, "ln2_rstd");
    s.fc1_in = A.alloc(dt, (int64_t)N_shard * C, l, "fc1_in");
    layernorm_forward(ctx, s.fc1_in, s.ln2_mean, s.ln2_rstd, s.ln2_in, w.ln2w, w.ln2b, N_shard, C);

    s.gelu_in = A.alloc(dt, (int64_t)N_full * run.F_loc, l, "gelu_in");
    column_parallel_forward(run.region, ctx, s.gelu_in, s.fc1_in, w.fcw, w.fcb, N_full, C, run.F_loc);
    s.fc2_in = A.alloc(dt, (int64_t)N_full * run.F_loc, l, "fc2_in");
    gelu_forward(ctx, s.fc2_in, s.gelu_in, (int64_t)N_full * run.F_loc);

    Tensor y2 = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:mlp_out");
    row_parallel_forward(run.region, ctx, y2, s.fc2_in, w.fcprojw, N_full, run.F_loc, C);
    s.mlp_drop_mask = A.alloc(DType::U8, (int64_t)N_shard * C, l, "mlp_drop_mask");
    hidden_dropout(run, out, s.mlp_drop_mask, y2, w.fcprojb, s.ln2_in, kSiteMlpOut);
    A.release(y2);

    keep_for_backward(s, policy, A);
}

void layer_backward(LayerContext& run, SavedLayer& s, Tensor dresid, Recompute policy) {
    Ctx& ctx = *run.ctx;
    ActivationAllocator& A = *run.alloc;
    const int l = run.layer, C = run.C;
    const int N_shard = run.S_loc * run.B, N_full = run.S * run.B;  // as in layer_forward
    const DType dt = run.dtype;

    // ---- recomputation (paper §5, recompute/recompute.h) ---------------------------------------------------
    if (policy == Recompute::Full) {
        // The whole forward again from the saved input, keeping everything this time; its output (already
        // consumed by the next layer) goes to a transient buffer.
        Tensor out = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:recomputed_out");
        layer_forward(run, s, out, Recompute::None);
        A.release(out);
    } else {
        recompute_selective(ctx, A, s, policy, run.attention, run.attn, dt, l, run.dropout, run.seed);
    }
    const LayerWeights& w = run.w;
    const LayerGrads& g = run.g;
    const GradWrite gw = run.grads;  // each of the layer's 12 gradients is written exactly once below
    const int64_t n_ss = (int64_t)run.B * run.attn.NH * run.S * run.S;  // one s×s tensor per rank

    // ---- MLP block (reverse order) -----------------------------------------------------------------------
    Tensor dy2 = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:dmlp_out");
    dropout_backward(ctx, dy2, dresid, s.mlp_drop_mask, run.dropout, (int64_t)N_shard * C);
    bias_backward(ctx, g.fcprojb, dy2, N_shard, C, gw);  // under SP: this shard's part (sum_sequence_parallel_grads)
    Tensor dh = A.alloc(dt, (int64_t)N_full * run.F_loc, l, "tmp:dfc2_in");
    row_parallel_backward(run.region, ctx, dh, g.fcprojw, dy2, s.fc2_in, w.fcprojw, N_full, run.F_loc, C, gw);
    A.release(dy2);
    gelu_backward(ctx, dh, s.gelu_in, dh, (int64_t)N_full * run.F_loc);
    Tensor dln2 = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:dfc1_in");
    column_parallel_backward(run.region, ctx, dln2, g.fcw, g.fcb, dh, s.fc1_in, w.fcw, N_full, C, run.F_loc, gw);
    A.release(dh);
    // The residual stream's gradient gets the MLP branch's contribution: dresid becomes dL/d(ln2_in).
    layernorm_backward(ctx, dresid, g.ln2w, g.ln2b, dln2, s.ln2_in, w.ln2w, s.ln2_mean, s.ln2_rstd, N_shard, C, gw);
    A.release(dln2);

    // ---- attention block ----------------------------------------------------------------------------------
    Tensor dy = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:dattn_out");
    dropout_backward(ctx, dy, dresid, s.attn_drop_mask, run.dropout, (int64_t)N_shard * C);
    bias_backward(ctx, g.attprojb, dy, N_shard, C, gw);
    Tensor dctx = A.alloc(dt, (int64_t)N_full * run.C_loc, l, "tmp:dproj_in");
    row_parallel_backward(run.region, ctx, dctx, g.attprojw, dy, s.proj_in, w.attprojw, N_full, run.C_loc, C, gw);
    A.release(dy);
    Tensor dqkv = A.alloc(dt, (int64_t)N_full * 3 * run.C_loc, l, "tmp:dqkv");
    if (run.attention == Attention::Flash) {
        run.flash.backward(ctx, dqkv, dctx, s.proj_in, s.lse, s.qkv, run.attn, run.dropout, run.seed,
                           dropout_stream(l, kSiteAttnProbs));
    } else {
        Tensor scratch = A.alloc(dt, n_ss, l, "tmp:dprobs");
        attention_backward(ctx, dqkv, dctx, s.qkv, s.probs, s.attn_mask, s.probs_drop, scratch, run.attn,
                           run.dropout);
        A.release(scratch);
    }
    A.release(dctx);
    Tensor dln1 = A.alloc(dt, (int64_t)N_shard * C, l, "tmp:dqkv_in");
    column_parallel_backward(run.region, ctx, dln1, g.qkvw, g.qkvb, dqkv, s.qkv_in, w.qkvw, N_full, C, 3 * run.C_loc,
                             gw);
    A.release(dqkv);
    layernorm_backward(ctx, dresid, g.ln1w, g.ln1b, dln1, s.ln1_in, w.ln1w, s.ln1_mean, s.ln1_rstd, N_shard, C, gw);
    A.release(dln1);

    release_saved(s, A);
}
