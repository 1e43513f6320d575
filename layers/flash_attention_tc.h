// flash_attention_tc.h — flash attention's bf16 CUDA kernels on tensor cores (layers/flash_attention_tc.cu).
// The plain math they compute: layers/reference/flash_attention.h
//
// The same function as the kernels of layers/flash_attention.cu — FlashAttention-2's tiles with an online
// softmax, one fp32 log-sum-exp per query kept, the backward rebuilding P from it, the causal mask and the
// dropout keep bits at GLOBAL positions — with the two products of the forward (Q·Kᵀ, P·V) and the five of the
// backward on mma.sync (layers/mma.cuh). flash_attention.cu hands them every bf16 call on a GPU: the whole
// sequence (flash_attention_forward / _backward) and ring attention's blocks (flash_block_forward / _backward,
// context parallelism). fp32 keeps the scalar kernels there.
#pragma once
#include <cstdint>
#include "runtime.h"
#include "tensor.h"

// One call: the queries of S consecutive positions against the keys of Sk consecutive positions, for B
// sequences × NH heads (flash_attention.cu fills it from its FlashArgs: the same fields).
struct FlashTcArgs {
    int S, Sk, B, NH, HD;
    float scale;                              // 1/√HD
    uint32_t threshold;                       // dropout_threshold(p): keep iff the random word >= it
    float inv_keep;                           // 1/(1 − p)
    uint64_t seed;
    uint32_t stream;
    int64_t b_offset, head_offset, NH_total;  // the global batch and head coordinates (the dropout index)
    int64_t q_pos, k_pos, S_total;            // global positions of the first query and key; the sequence length
    int q_width, kv_width;                    // row widths of Q and of K, V ([S·B, width], head n at column n·HD)
    int dq_width, dkv_width;                  // and of dQ and dK, dV
    int64_t lse_ld, d_ld;                     // elements between the lse (and D) rows of two (sequence, head) pairs
    int hd_bound;                             // the instantiation: flash_attention_hd_bound(HD), 32, 64 or 128
};

// out (rows of NH·HD: bf16 for the whole sequence, f32 for a ring block) and lse = m + log l (f32,
// lse[(b·NH + n)·lse_ld + q]; −inf and out = 0 for a query that sees no key of the block).
void flash_tc_forward(Ctx& ctx, const char* op, bf16* out, float* lse, const bf16* Q, const bf16* K, const bf16* V,
                      const FlashTcArgs& a);
void flash_tc_forward(Ctx& ctx, const char* op, float* out, float* lse, const bf16* Q, const bf16* K, const bf16* V,
                      const FlashTcArgs& a);

// dQ, dK, dV from dout (rows of NH·HD), the forward's lse and D = rowsum(dO ⊙ O) (f32, rows d_ld apart): written
// as bf16 (the whole sequence), or added into f32 accumulators (a ring block's terms). dQ is summed by the one
// block that owns its query tile, in a fixed order: two runs give the same bits.
void flash_tc_backward(Ctx& ctx, const char* op, bf16* dQ, bf16* dK, bf16* dV, const bf16* dout, const float* lse,
                       const float* D, const bf16* Q, const bf16* K, const bf16* V, const FlashTcArgs& a);
void flash_tc_backward(Ctx& ctx, const char* op, float* dQ, float* dK, float* dV, const bf16* dout, const float* lse,
                       const float* D, const bf16* Q, const bf16* K, const bf16* V, const FlashTcArgs& a);

// Which dtype's flash attention runs these kernels on a GPU: bf16 (tensor cores take bf16 operands); fp32 keeps
// the scalar kernels. The kernels are instantiated per flash_attention_hd_bound(HD) (32, 64 or 128) like the
// scalar ones; test_kernel_coverage names the instantiations from these two functions.
constexpr bool flash_attention_uses_tensor_cores(DType dt) { return dt == DType::BF16; }
