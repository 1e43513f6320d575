// flash_attention.cu — core attention in tiles, without the s×s tensors (see flash_attention.h).
// The plain math this file computes fast: layers/reference/flash_attention.h
//
// Forward, for one query tile Q_i of one (sequence, head), over the key tiles K_j, V_j on and below the
// diagonal (tiles wholly above it are skipped: the causal mask zeroes them), with per query q a running
// maximum m_q, a running sum l_q and an unnormalised output o_q (Dao 2023, FlashAttention-2, Algorithm 1):
//   x    = Q_i K_jᵀ / √HD                      (the keys k > q of the diagonal tile masked out)
//   m'   = max(m, max_k x_k);   α = e^{m − m'}  (rescales what the earlier tiles summed)
//   e_k  = e^{x_k − m'};        l ← α·l + Σ_k e_k
//   o    ← α·o + Σ_k z_k·e_k·V_k                (z_k: the unfused path's keep bit of (q, k), 0 or 1)
// and at the end out_q = o_q / l_q / (1 − p), lse_q = m_q + log l_q. The softmax sum l counts every key
// (dropout acts on the normalised probabilities, as in the unfused path), the output only the kept ones.
//
// Backward, for one key tile K_j, V_j over the query tiles Q_i on and below the diagonal, with
// D_q = Σ_c dO[q, c]·O[q, c] computed once per query (FlashAttention-2, Algorithm 2):
//   P    = e^{Q_i K_jᵀ/√HD − lse}               (exactly the forward's probabilities, up to rounding)
//   dV_j += (P ⊙ Z/(1−p))ᵀ dO_i
//   dP   = (dO_i V_jᵀ) ⊙ Z/(1−p)
//   dS   = P ⊙ (dP − D) / √HD
//   dQ_i += dS K_j,   dK_j += dSᵀ Q_i
// The keep bits Z are drawn again from Philox at their global indices (flash_attention.h): nothing random is
// stored between the passes.
//
// The files: this one (the whole sequence's ops, and the choice of device), flash_attention_cpu.cu (the CPU
// tiles), flash_attention_cuda.cu (the fp32 CUDA kernels; bf16 goes on to flash_attention_tc.cu's tensor cores)
// and flash_attention_blocks.cu (ring attention's blocks). flash_attention_call.h is the call they share.
#include "flash_attention.h"
#include "flash_attention_call.h"

#include "op_timer.h"

size_t flash_attention_scratch_bytes(int S, int B, int NH) { return (size_t)S * B * NH * sizeof(float); }

static void check_flash(const char* op, const Ctx& ctx, const AttnShape& sh, const Tensor& qkv, const Tensor& o,
                        const Tensor& lse) {
    if (sh.S <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape S=%d B=%d NH=%d HD=%d", op, sh.S, sh.B, sh.NH, sh.HD);
    if (sh.b_offset < 0 || sh.b_offset + sh.B > sh.B_total || sh.head_offset < 0 ||
        sh.head_offset + sh.NH > sh.NH_total)
        mm_fatal("%s: local block (b %lld+%d of %lld, heads %lld+%d of %lld) outside the global tensor", op,
                 (long long)sh.b_offset, sh.B, (long long)sh.B_total, (long long)sh.head_offset, sh.NH,
                 (long long)sh.NH_total);
    const int64_t rows = (int64_t)sh.S * sh.B;
    check_tensor(ctx, qkv, qkv.dtype, rows * 3 * sh.NH * sh.HD, op, "qkv");
    check_tensor(ctx, o, qkv.dtype, rows * sh.NH * sh.HD, op, "out");
    check_tensor(ctx, lse, DType::F32, (int64_t)sh.B * sh.NH * sh.S, op, "lse");
}

void flash_attention_forward(Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p,
                             uint64_t seed, uint32_t stream) {
    const char* op = "flash_attention_forward";
    check_flash(op, ctx, sh, qkv, out, lse);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
    OpScope scope(ctx, op, 2 * 2.0 * sh.B * sh.NH * (double)sh.S * sh.S * sh.HD);  // QKᵀ and P·V
    const FlashArgs a = flash_args(sh, p, seed, stream);
    const int64_t C = (int64_t)sh.NH * sh.HD;  // K starts C columns after Q, V 2C
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            flash_forward_cuda<T, T>(ctx, op, out.as<T>(), lse.as<float>(), qkv.as<T>(), qkv.as<T>() + C,
                                     qkv.as<T>() + 2 * C, a);
        else
            flash_forward_cpu<T, T>(out.as<T>(), lse.as<float>(), qkv.as<T>(), qkv.as<T>() + C, qkv.as<T>() + 2 * C, a);
    });
}

void flash_attention_backward(Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                              const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    const char* op = "flash_attention_backward";
    check_flash(op, ctx, sh, qkv, out, lse);
    check_tensor(ctx, dqkv, qkv.dtype, qkv.n, op, "dqkv");
    check_tensor(ctx, dout, qkv.dtype, out.n, op, "dout");
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
    // QKᵀ again, then dV, dP, dQ, dK: five products of the full square's size.
    OpScope scope(ctx, op, 5 * 2.0 * sh.B * sh.NH * (double)sh.S * sh.S * sh.HD);
    const FlashArgs a = flash_args(sh, p, seed, stream);
    const int64_t C = (int64_t)sh.NH * sh.HD;  // K starts C columns after Q, V 2C
    MM_DISPATCH_ACT(qkv.dtype, {
        if (ctx.device == Device::CUDA)
            flash_backward_cuda<false, T, T>(ctx, op, dqkv.as<T>(), dqkv.as<T>() + C, dqkv.as<T>() + 2 * C,
                                             dout.as<T>(), out.as<T>(), lse.as<float>(), nullptr, qkv.as<T>(),
                                             qkv.as<T>() + C, qkv.as<T>() + 2 * C, a);
        else
            flash_backward_cpu<false, T, T>(dqkv.as<T>(), dqkv.as<T>() + C, dqkv.as<T>() + 2 * C, dout.as<T>(),
                                            out.as<T>(), lse.as<float>(), nullptr, qkv.as<T>(), qkv.as<T>() + C,
                                            qkv.as<T>() + 2 * C, a);
    });
}

void flash_attention_rowdot(Ctx& ctx, Tensor D, Tensor dout, Tensor out, const AttnShape& sh) {
    const char* op = "flash_attention_rowdot";
    if (sh.S <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape S=%d B=%d NH=%d HD=%d", op, sh.S, sh.B, sh.NH, sh.HD);
    const int64_t n = (int64_t)sh.S * sh.B * sh.NH * sh.HD;
    check_tensor(ctx, out, out.dtype, n, op, "out");
    check_tensor(ctx, dout, out.dtype, n, op, "dout");
    check_tensor(ctx, D, DType::F32, (int64_t)sh.B * sh.NH * sh.S, op, "D");
    OpScope scope(ctx, op, 2.0 * n);
    const FlashArgs a = flash_args(sh, 0.f, 0, 0);
    MM_DISPATCH_ACT(out.dtype, {
        if (ctx.device == Device::CUDA)
            flash_rowdot_cuda<T>(ctx, op, D.as<float>(), dout.as<T>(), out.as<T>(), a);
        else
            flash_rowdot_cpu<T>(D.as<float>(), dout.as<T>(), out.as<T>(), a);
    });
}

FlashCore flash_attention_core() { return {flash_attention_forward, flash_attention_backward}; }
