// matmul.cu — the one GEMM primitive (see matmul.h): OpenBLAS on CPU, cuBLAS on GPU.
//
// Every matrix product of the model (linear layers, the per-head products of attention, the LM head) goes
// through gemm(), so the two backends are written once here and nowhere else.
//
// Row-major everywhere. C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C, batched with element strides.
//  - CPU: cblas_sgemm in CblasRowMajor mode. bf16 is a storage format only: bf16 operands are widened into
//    fp32 scratch first and a bf16 C is computed in fp32 scratch and rounded once at the end.
//  - GPU: cuBLAS is column-major. A row-major matrix X (r×c, row stride ld) read column-major is Xᵀ (c×r,
//    leading dimension ld). So instead of C = op(A)·op(B) we ask cuBLAS for Cᵀ = op(B)ᵀ · op(A)ᵀ: swap the
//    operands (B first), keep each operand's own transpose flag, and swap M and N. No data moves.
//    Accumulation is CUBLAS_COMPUTE_32F: plain fp32, never TF32 (FAST_TF32 would change the bits and the
//    accuracy the GPU tests hold cuBLAS to).
#include "matmul.h"

#include <cblas.h>
#include <vector>

// ---------------------------------------------------------------------------------------------------------
// CPU
// ---------------------------------------------------------------------------------------------------------

// Per-thread fp32 scratch that only grows: no allocation per call once the sizes of a training step were
// seen (docs/design.md "Performance direction": no per-step allocation).
static float* cpu_scratch(std::vector<float>& buf, size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// Widen a stored rows×cols bf16 matrix (row stride ld) into a compact fp32 matrix (row stride cols).
static void widen_bf16(float* dst, const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = to_f32(src[r * ld + c]);
}

static void gemm_cpu(bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A, GemmOperand B,
                     float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype, DType c_dtype,
                     int batch) {
    static thread_local std::vector<float> sa, sb, sc;
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    // Stored shapes: op(A) is M×K, so A is stored M×K (or K×M when transposed); likewise B.
    const int64_t a_rows = transA ? K : M, a_cols = transA ? M : K;
    const int64_t b_rows = transB ? N : K, b_cols = transB ? K : N;
    for (int i = 0; i < batch; i++) {
        const float* a;
        const float* b;
        int64_t lda = A.ld, ldb = B.ld;
        if (ab_dtype == DType::F32) {
            a = static_cast<const float*>(A.ptr) + (size_t)i * A.stride;
            b = static_cast<const float*>(B.ptr) + (size_t)i * B.stride;
        } else {
            float* wa = cpu_scratch(sa, (size_t)(a_rows * a_cols));
            float* wb = cpu_scratch(sb, (size_t)(b_rows * b_cols));
            widen_bf16(wa, static_cast<const bf16*>(A.ptr) + (size_t)i * A.stride, a_rows, a_cols, A.ld);
            widen_bf16(wb, static_cast<const bf16*>(B.ptr) + (size_t)i * B.stride, b_rows, b_cols, B.ld);
            a = wa;
            b = wb;
            lda = a_cols > 0 ? a_cols : 1;
            ldb = b_cols > 0 ? b_cols : 1;
        }
        if (c_dtype == DType::F32) {
            float* c = static_cast<float*>(C) + (size_t)i * strideC;
            cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        } else {
            // bf16 C: compute in fp32 (reading the old C when beta != 0) and round once.
            bf16* c = static_cast<bf16*>(C) + (size_t)i * strideC;
            float* wc = cpu_scratch(sc, (size_t)M * N);
            if (beta != 0.f) widen_bf16(wc, c, M, N, ldc);
            cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, (int)lda, b, (int)ldb, beta, wc,
                        N > 0 ? N : 1);
#pragma omp parallel for schedule(static) if ((int64_t)M * N > (1 << 16))
            for (int64_t r = 0; r < M; r++)
                for (int64_t col = 0; col < N; col++) c[r * ldc + col] = from_f32<bf16>(wc[r * N + col]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------------------------------------

static cudaDataType_t cublas_type(DType t) {
    if (t == DType::F32) return CUDA_R_32F;
    if (t == DType::BF16) return CUDA_R_16BF;
    mm_fatal("gemm: unsupported dtype %s", dtype_name(t));
}

static void gemm_cuda(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A,
                      GemmOperand B, float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype,
                      DType c_dtype, int batch) {
    // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B goes first, M and N swap.
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t tab = cublas_type(ab_dtype), tc = cublas_type(c_dtype);
    if (batch == 1) {
        CUBLAS_CHECK(cublasGemmEx(ctx.cublas, opB, opA, N, M, K, &alpha, B.ptr, tab, (int)B.ld, A.ptr, tab,
                                  (int)A.ld, &beta, C, tc, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, opB, opA, N, M, K, &alpha, B.ptr, tab, (int)B.ld,
                                                (long long)B.stride, A.ptr, tab, (int)A.ld, (long long)A.stride,
                                                &beta, C, tc, (int)ldc, (long long)strideC, batch,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

void gemm(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A, GemmOperand B,
          float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype, DType c_dtype, int batch) {
    if (ab_dtype != DType::F32 && ab_dtype != DType::BF16)
        mm_fatal("gemm: operands must be f32 or bf16, got %s", dtype_name(ab_dtype));
    // fp32 operands with a bf16 result is not a combination cuBLAS offers (and nothing here needs it).
    if (!(c_dtype == ab_dtype || c_dtype == DType::F32))
        mm_fatal("gemm: C must be f32 or the operands' dtype (%s), got %s", dtype_name(ab_dtype),
                 dtype_name(c_dtype));
    if (M < 0 || N < 0 || K < 0 || batch < 0) mm_fatal("gemm: negative size M=%d N=%d K=%d batch=%d", M, N, K, batch);
    if (M == 0 || N == 0 || batch == 0) return;
    // Leading dimensions must cover a stored row (BLAS rejects them otherwise; say which one is wrong).
    const int64_t a_cols = transA ? M : K, b_cols = transB ? K : N;
    if (A.ld < (a_cols > 1 ? a_cols : 1) || B.ld < (b_cols > 1 ? b_cols : 1) || ldc < (N > 1 ? N : 1))
        mm_fatal("gemm: leading dimension too small (lda=%lld for %lld cols, ldb=%lld for %lld cols, ldc=%lld "
                 "for %d cols)", (long long)A.ld, (long long)a_cols, (long long)B.ld, (long long)b_cols,
                 (long long)ldc, N);
    if (ctx.device == Device::CUDA)
        gemm_cuda(ctx, transA, transB, M, N, K, alpha, A, B, beta, C, ldc, strideC, ab_dtype, c_dtype, batch);
    else
        gemm_cpu(transA, transB, M, N, K, alpha, A, B, beta, C, ldc, strideC, ab_dtype, c_dtype, batch);
}
