// matmul.h — the one GEMM primitive everything uses: OpenBLAS (CBLAS) on CPU, cuBLAS on GPU.
//
// Row-major semantics (as the rest of the code): C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C,
// op(X) = Xᵀ when trans is set. lda/ldb/ldc are row strides of the matrices *as stored*. Batched with
// element strides between consecutive matrices (batch = 1 for a plain GEMM).
// A and B share a dtype (f32 or bf16); C is f32 or that dtype. Accumulation is always fp32. On CPU, bf16
// operands are widened to fp32 scratch and the result rounded once (bf16 is storage only).
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
