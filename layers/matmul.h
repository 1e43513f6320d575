// matmul.h — the one GEMM primitive everything uses: OpenBLAS (CBLAS) on CPU, cuBLAS on GPU.
//
// Row-major semantics (as the rest of the code): C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C,
// op(X) = Xᵀ when trans is set. lda/ldb/ldc are row strides of the matrices *as stored*. Batched with
// element strides between consecutive matrices (batch = 1 for a plain GEMM).
// A and B share a dtype (f32 or bf16); C is f32 or that dtype. Accumulation is always fp32. On CPU, bf16
// operands are widened to fp32 scratch and the result rounded once (bf16 is storage only).
//
// The plain math this file computes fast: layers/reference/matmul.h
#pragma once
#include "runtime.h"

struct GemmOperand {
    const void* ptr;
    int64_t ld;          // row stride (elements) of the stored matrix
    int64_t stride = 0;  // elements between consecutive matrices of a batch
};

void gemm(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A,
          GemmOperand B, float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype, DType c_dtype,
          int batch = 1);

// A batch of outer × inner matrices whose offsets are not one constant stride: matrix (o, i) of an operand
// starts outer_stride · o + stride · i elements after ptr. Core attention needs it: the heads of one sequence
// sit HD columns apart in a qkv row, the sequences 3·NH·HD apart, so (sequence, head) is no single stride,
// yet one call over all of them replaces one call per sequence (layers/attention.cu).
struct GemmBatchOperand {
    const void* ptr;
    int64_t ld;            // row stride (elements) of each stored matrix
    int64_t outer_stride;  // elements between matrices o and o + 1
    int64_t stride;        // elements between matrices i and i + 1
};

// C(o, i) = alpha · op(A(o, i)) · op(B(o, i)) + beta · C(o, i) for o < outer, i < inner, in ONE call: on the
// GPU one cuBLAS call (strided-batched when one of outer, inner is 1, else cublasGemmBatchedEx with pointer
// arrays written on the device by a small kernel); on the CPU one OpenMP loop over all matrices and tiles.
// C.ptr is written (it is const only to share the struct). Same dtype rules as gemm().
void gemm_batched(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmBatchOperand A,
                  GemmBatchOperand B, float beta, GemmBatchOperand C, DType ab_dtype, DType c_dtype, int outer,
                  int inner);
// Bytes of ctx_scratch (runtime.h) gemm_batched takes on the GPU for outer × inner matrices (the pointer
// arrays): the model reserves them before its first step, so the scratch never grows inside a step.
size_t gemm_batched_scratch_bytes(int64_t outer, int64_t inner);

// CPU only: how gemm() cuts an output among its OpenMP tasks (matmul.cu says why): the longer side L into
// `count` tiles of `size` rows or columns, the last one possibly shorter. Public for bench/gemm_compare, which
// times the same cut with other libraries.
struct GemmTiles {
    int size, count;
};
GemmTiles cpu_gemm_tiles(int L);

// CPU only: one fp32 product of compact row-major operands on the calling thread, for an op that cuts its own
// work into OpenMP tasks (flash attention's tiles). cpu_gemm_single_threaded() says whether OpenBLAS runs
// single-threaded (the default; OPENBLAS_NUM_THREADS, when set, wins): only then may the caller's tasks run
// in parallel, each calling gemm_f32_here.
bool cpu_gemm_single_threaded();
void gemm_f32_here(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc);
