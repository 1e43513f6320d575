// flash_attention_call.h — one call of flash attention's tiled algorithm (flash_attention.cu), as its two
// backends take it: the CPU tiles (flash_attention_cpu.cu) and the CUDA kernels (flash_attention_cuda.cu). Internal
// to layers/: the whole sequence's ops (flash_attention.cu) and ring attention's blocks (flash_attention_blocks.cu)
// fill a FlashArgs and call one backend or the other; nothing outside layers/ includes this header.
#pragma once
#include <cmath>
#include "attention.h"
#include "philox.h"
#include "runtime.h"

// Everything a kernel needs, passed by value. One call is the queries of S consecutive positions against the
// keys of Sk consecutive positions: one rank's whole sequence (S = Sk = S_total, q_pos = k_pos = 0), or one
// block of ring attention (context parallelism: flash_block_forward below).
struct FlashArgs {
    int S, B, NH, HD;    // S: queries per (sequence, head)
    int Sk;              // keys per (sequence, head)
    float scale;         // 1/√HD
    uint32_t threshold;  // dropout_threshold(p)
    float inv_keep;      // 1/(1 − p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;
    int64_t q_pos, k_pos;    // global positions of the first query and the first key: the causal mask's
    int64_t S_total;         // and the dropout index's (the whole sequence's length)
    int q_width, kv_width;   // row widths of the Q and of the K, V matrices ([S·B, width])
    int dq_width, dkv_width; // and of their gradients' (the backward's outputs)
    int64_t lse_ld;          // elements between the lse rows of two (sequence, head) pairs
    int64_t d_ld;            // and between the rows of the backward's D = rowsum(dO ⊙ O)
};

static FlashArgs flash_args(const AttnShape& sh, float p, uint64_t seed, uint32_t stream) {
    FlashArgs a;
    a.S = sh.S;
    a.Sk = sh.S;
    a.B = sh.B;
    a.NH = sh.NH;
    a.HD = sh.HD;
    a.scale = 1.f / sqrtf((float)sh.HD);
    a.threshold = dropout_threshold(p);
    a.inv_keep = 1.f / (1.f - p);
    a.seed = seed;
    a.stream = stream;
    a.b_offset = sh.b_offset;
    a.head_offset = sh.head_offset;
    a.NH_total = sh.NH_total;
    a.q_pos = a.k_pos = 0;
    a.S_total = sh.S;
    a.q_width = a.kv_width = 3 * sh.NH * sh.HD;  // Q, K and V side by side in qkv (and dqkv)
    a.dq_width = a.dkv_width = a.q_width;
    a.lse_ld = sh.S;
    a.d_ld = sh.S;
    return a;
}

// The global dropout index of (b, n, q, k) of this call's block (attention.h): q, k count from the block's
// first query and key.
__host__ __device__ inline uint64_t flash_keep_index(const FlashArgs& a, int b, int n, int q, int k) {
    return attn_dropout_index(a.b_offset + b, a.head_offset + n, a.NH_total, a.S_total, a.q_pos + q, a.k_pos + k);
}

// ---- the backends ----------------------------------------------------------------------------------------
// The same algorithm on each device. T: the activation dtype (float or bf16). O: the forward's output, T for the
// whole sequence or f32 for a ring block. kAdd: the backward adds the block's terms into f32 accumulators (G =
// float: a ring block) instead of writing dQ, dK, dV in T. Dg: the queries' D = rowsum(dO ⊙ O) (rows a.d_ld
// apart), or null: the backend computes it. Instantiated for exactly the calls the two callers make.
template <class T, class O>
void flash_forward_cpu(O* out, float* lse, const T* Q, const T* K, const T* V, const FlashArgs& a);
template <bool kAdd, class T, class G>
void flash_backward_cpu(G* dQ, G* dK, G* dV, const T* dout, const T* out, const float* lse, const float* Dg,
                        const T* Q, const T* K, const T* V, const FlashArgs& a);
template <class T>
void flash_rowdot_cpu(float* D, const T* dout, const T* out, const FlashArgs& a);

template <class T, class O>
void flash_forward_cuda(Ctx& ctx, const char* op, O* out, float* lse, const T* Q, const T* K, const T* V,
                        const FlashArgs& a);
template <bool kAdd, class T, class G>
void flash_backward_cuda(Ctx& ctx, const char* op, G* dQ, G* dK, G* dV, const T* dout, const T* out,
                         const float* lse, const float* Dg, const T* Q, const T* K, const T* V, FlashArgs a);
template <class T>
void flash_rowdot_cuda(Ctx& ctx, const char* op, float* D, const T* dout, const T* out, const FlashArgs& a);
