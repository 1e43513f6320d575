// flash_attention_blocks.cu — the blocks of ring attention (context parallelism, parallel/context_parallel.h):
// one run of a rank's queries against one run of keys, with the causal mask and the dropout bits of the GLOBAL
// positions, on the CPU tiles or the CUDA kernels (flash_attention_call.h); and the log-sum-exp merge of a
// block's output into the running one (flash_attention.h, "the blocks of ring attention").
#include "flash_attention.h"
#include "flash_attention_call.h"

#include <algorithm>
#include <cmath>
#include "matmul.h"
#include "op_timer.h"

// The kernels keep positions block-local in ints (flash_diagonal, q + dg): a sequence past 2^30 positions is
// refused rather than wrapped.
static void flash_check_positions(const char* op, const FlashArgs& a) {
    if (a.S_total > (int64_t)1 << 30)
        mm_fatal("%s: sequence of %lld positions: the CUDA kernels take at most 2^30", op, (long long)a.S_total);
}

// Ring attention's blocks on the GPU: the kernels above with a block's positions, widths and f32 outputs (o
// written; dQ, dK, dV added into).
template <class T>
static void flash_block_forward_cuda(Ctx& ctx, const char* op, float* o, float* lse, const T* Q, const T* K,
                                     const T* V, const FlashArgs& a) {
    flash_check_positions(op, a);
    flash_forward_cuda<T, float>(ctx, op, o, lse, Q, K, V, a);
}
template <class T>
static void flash_block_backward_cuda(Ctx& ctx, const char* op, float* dq, float* dk, float* dv, const T* dout,
                                      const T* out, const float* lse, const float* D, const T* Q, const T* K,
                                      const T* V, const FlashArgs& a) {
    flash_check_positions(op, a);
    flash_backward_cuda<true, T, float>(ctx, op, dq, dk, dv, dout, out, lse, D, Q, K, V, a);
}

static FlashArgs block_args(const AttnBlock& blk, float p, uint64_t seed, uint32_t stream) {
    FlashArgs a = flash_args(blk.attn, p, seed, stream);
    a.S = blk.Sq;
    a.Sk = blk.Sk;
    a.q_pos = blk.q_pos;
    a.k_pos = blk.k_pos;
    a.S_total = blk.S_total;
    a.q_width = blk.q_width;
    a.kv_width = blk.kv_width;
    a.lse_ld = blk.lse_ld;
    return a;
}

static void check_block(const char* op, const AttnBlock& b, float p) {
    const AttnShape& sh = b.attn;
    if (b.Sq <= 0 || b.Sk <= 0 || sh.B <= 0 || sh.NH <= 0 || sh.HD <= 0)
        mm_fatal("%s: bad shape Sq=%d Sk=%d B=%d NH=%d HD=%d", op, b.Sq, b.Sk, sh.B, sh.NH, sh.HD);
    if (b.q_pos < 0 || b.k_pos < 0 || b.q_pos + b.Sq > b.S_total || b.k_pos + b.Sk > b.S_total)
        mm_fatal("%s: positions q %lld+%d, k %lld+%d outside the sequence of %lld", op, (long long)b.q_pos, b.Sq,
                 (long long)b.k_pos, b.Sk, (long long)b.S_total);
    if (b.q_width < sh.NH * sh.HD || b.kv_width < sh.NH * sh.HD || b.lse_ld < b.Sq)
        mm_fatal("%s: row widths q %d, kv %d or lse stride %lld smaller than the block", op, b.q_width, b.kv_width,
                 (long long)b.lse_ld);
    if (!(p >= 0.f && p < 1.f)) mm_fatal("%s: dropout p=%g outside [0, 1)", op, p);
}

// A view that must hold `rows` rows of `width` elements, the last one `used` elements long.
static void check_rows(const Ctx& ctx, const Tensor& t, DType dt, int64_t rows, int64_t width, int64_t used,
                       const char* op, const char* name) {
    check_tensor(ctx, t, dt, t.n, op, name);
    if (t.n < (rows - 1) * width + used)
        mm_fatal("%s: %s holds %lld elements, the block needs %lld", op, name, (long long)t.n,
                 (long long)((rows - 1) * width + used));
}

static void check_lse(const Ctx& ctx, const Tensor& t, const AttnBlock& b, const char* op, const char* name) {
    check_rows(ctx, t, DType::F32, (int64_t)b.attn.B * b.attn.NH, b.lse_ld, b.Sq, op, name);
}

// The views every block op reads: Q, K, V (the activation dtype of q) and the lse.
static void check_block_operands(const char* op, const Ctx& ctx, const AttnBlock& b, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& lse) {
    const int64_t C = (int64_t)b.attn.NH * b.attn.HD, rows_q = (int64_t)b.Sq * b.attn.B, rows_k = (int64_t)b.Sk * b.attn.B;
    check_rows(ctx, q, q.dtype, rows_q, b.q_width, C, op, "q");
    check_rows(ctx, k, q.dtype, rows_k, b.kv_width, C, op, "k");
    check_rows(ctx, v, q.dtype, rows_k, b.kv_width, C, op, "v");
    check_lse(ctx, lse, b, op, "lse");
}

double flash_block_pairs(const AttnBlock& b) {
    // Query q (block-local) sees the keys up to its global position: clamp(q_pos + q − k_pos + 1, 0, Sk).
    double pairs = 0;
    for (int q = 0; q < b.Sq; q++) pairs += (double)std::clamp<int64_t>(b.q_pos + q - b.k_pos + 1, 0, b.Sk);
    return pairs;
}

// The log-sum-exp rule for one query's two partial results, in fp32, shared by the CPU loop and the CUDA
// kernels: lse' = log(e^l + e^lb) = mx + log(e^(l − mx) + e^(lb − mx)), mx = max(l, lb), and the two weights
// e^(l − lse'), e^(lb − lse') of the outputs. −inf (no key seen yet) gets weight 0; both −inf stay −inf.
__host__ __device__ inline void flash_merge_weights(float l, float lb, float* w, float* wb, float* merged) {
    const float mx = l > lb ? l : lb;
    if (mx == -INFINITY) {
        *w = 0.f, *wb = 0.f, *merged = -INFINITY;
        return;
    }
    const float el = expf(l - mx), eb = expf(lb - mx), sum = el + eb;
    *merged = mx + logf(sum);
    *w = el / sum;
    *wb = eb / sum;
}

// o' = w·o + wb·o_blk, one thread per element of o; lse is rewritten afterwards (flash_merge_lse_kernel), so
// that every thread reads the old lse.
__global__ void flash_merge_out_kernel(float* o, const float* lse, const float* ob, const float* lb, int Sq, int B,
                                       int NH, int HD, int64_t lse_ld) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, C = (int64_t)NH * HD;
    if (i >= (int64_t)Sq * B * C) return;
    const int64_t row = i / C;
    const int n = (int)((i % C) / HD), b = (int)(row % B), q = (int)(row / B);
    const int64_t at = ((int64_t)b * NH + n) * lse_ld + q;
    float w, wb, merged;
    flash_merge_weights(lse[at], lb[at], &w, &wb, &merged);
    o[i] = w * o[i] + wb * ob[i];
}
__global__ void flash_merge_lse_kernel(float* lse, const float* lb, int Sq, int BNH, int64_t lse_ld) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)Sq * BNH) return;
    const int64_t at = (i / Sq) * lse_ld + i % Sq;
    float w, wb;
    flash_merge_weights(lse[at], lb[at], &w, &wb, &lse[at]);
}

void flash_block_merge(Ctx& ctx, Tensor o, Tensor lse, Tensor o_blk, Tensor lse_blk, const AttnBlock& blk) {
    const char* op = "flash_block_merge";
    check_block(op, blk, 0.f);
    const int Sq = blk.Sq, B = blk.attn.B, NH = blk.attn.NH, HD = blk.attn.HD;
    const int64_t C = (int64_t)NH * HD, n = (int64_t)Sq * B * C;
    check_rows(ctx, o, DType::F32, n, 1, 1, op, "o");
    check_rows(ctx, o_blk, DType::F32, n, 1, 1, op, "o_blk");
    check_lse(ctx, lse, blk, op, "lse");
    check_lse(ctx, lse_blk, blk, op, "lse_blk");
    OpScope scope(ctx, op, 3.0 * n);
    float *O = o.as<float>(), *L = lse.as<float>();
    const float *Ob = o_blk.as<float>(), *Lb = lse_blk.as<float>();
    if (ctx.device == Device::CUDA) {
        const int threads = 256;
        flash_merge_out_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, ctx.stream>>>(O, L, Ob, Lb, Sq, B,
                                                                                                    NH, HD, blk.lse_ld);
        CUDA_CHECK_LAST();
        const int64_t rows = (int64_t)Sq * B * NH;
        flash_merge_lse_kernel<<<(unsigned)((rows + threads - 1) / threads), threads, 0, ctx.stream>>>(L, Lb, Sq, B * NH,
                                                                                                     blk.lse_ld);
        CUDA_CHECK_LAST();
        return;
    }
#pragma omp parallel for if (cpu_gemm_single_threaded())
    for (int64_t bn = 0; bn < (int64_t)B * NH; bn++) {
        const int b = (int)(bn / NH), h = (int)(bn % NH);
        for (int q = 0; q < Sq; q++) {
            const int64_t at = bn * blk.lse_ld + q;
            float w, wb, merged;
            flash_merge_weights(L[at], Lb[at], &w, &wb, &merged);
            float* orow = O + ((int64_t)q * B + b) * C + (int64_t)h * HD;
            const float* brow = Ob + ((int64_t)q * B + b) * C + (int64_t)h * HD;
#pragma omp simd
            for (int c = 0; c < HD; c++) orow[c] = w * orow[c] + wb * brow[c];
            L[at] = merged;
        }
    }
}

void flash_block_forward(Ctx& ctx, Tensor o, Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p,
                         uint64_t seed, uint32_t stream) {
    const char* op = "flash_block_forward";
    check_block(op, blk, p);
    const AttnShape& sh = blk.attn;
    const int64_t C = (int64_t)sh.NH * sh.HD, rows_q = (int64_t)blk.Sq * sh.B;
    check_block_operands(op, ctx, blk, q, k, v, lse);
    check_rows(ctx, o, DType::F32, rows_q * C, 1, 1, op, "o");
    // QKᵀ and P·V over the block's visible pairs
    OpScope scope(ctx, op, 2 * 2.0 * sh.B * sh.NH * flash_block_pairs(blk) * sh.HD);
    const FlashArgs a = block_args(blk, p, seed, stream);
    MM_DISPATCH_ACT(q.dtype, {
        if (ctx.device == Device::CUDA)
            flash_block_forward_cuda<T>(ctx, op, o.as<float>(), lse.as<float>(), q.as<T>(), k.as<T>(), v.as<T>(), a);
        else
            flash_forward_cpu<T, float>(o.as<float>(), lse.as<float>(), q.as<T>(), k.as<T>(), v.as<T>(), a);
    });
}

void flash_block_backward(Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, int dkv_width, Tensor dout, Tensor out,
                          Tensor lse, Tensor q, Tensor k, Tensor v, const AttnBlock& blk, float p, uint64_t seed,
                          uint32_t stream, Tensor D) {
    const char* op = "flash_block_backward";
    check_block(op, blk, p);
    const AttnShape& sh = blk.attn;
    const int64_t C = (int64_t)sh.NH * sh.HD, rows_q = (int64_t)blk.Sq * sh.B, rows_k = (int64_t)blk.Sk * sh.B;
    if (dkv_width < C) mm_fatal("%s: dK, dV row width %d below NH*HD = %lld", op, dkv_width, (long long)C);
    check_block_operands(op, ctx, blk, q, k, v, lse);
    check_rows(ctx, out, q.dtype, rows_q * C, 1, 1, op, "out");
    check_rows(ctx, dout, q.dtype, rows_q * C, 1, 1, op, "dout");
    check_rows(ctx, dq, DType::F32, rows_q * C, 1, 1, op, "dq");
    check_rows(ctx, dk, DType::F32, rows_k, dkv_width, C, op, "dk");
    check_rows(ctx, dv, DType::F32, rows_k, dkv_width, C, op, "dv");
    OpScope scope(ctx, op, 5 * 2.0 * sh.B * sh.NH * flash_block_pairs(blk) * sh.HD);
    if (D.data) check_lse(ctx, D, blk, op, "D");  // the caller's, laid out like lse
    FlashArgs a = block_args(blk, p, seed, stream);
    a.dq_width = (int)C;
    a.dkv_width = dkv_width;
    a.d_ld = blk.lse_ld;
    const float* Dp = D.data ? D.as<float>() : nullptr;
    MM_DISPATCH_ACT(q.dtype, {
        if (ctx.device == Device::CUDA)
            flash_block_backward_cuda<T>(ctx, op, dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<T>(),
                                         out.as<T>(), lse.as<float>(), Dp, q.as<T>(), k.as<T>(), v.as<T>(), a);
        else
            flash_backward_cpu<true, T, float>(dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<T>(),
                                               out.as<T>(), lse.as<float>(), Dp, q.as<T>(), k.as<T>(), v.as<T>(), a);
    });
}

