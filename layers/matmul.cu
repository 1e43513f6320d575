// matmul.cu — the one GEMM primitive (see matmul.h): OpenBLAS on CPU, cuBLAS on GPU.
//
// Every matrix product of the model (linear layers, the per-head products of attention, the LM head) goes
// through gemm(), so the two backends are written once here and nowhere else.
//
// Row-major everywhere. C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C, batched with element strides.
//  - CPU: cblas_sgemm in CblasRowMajor mode. bf16 is a storage format only: bf16 operands are widened into
//    fp32 scratch first and a bf16 C is computed in fp32 scratch and rounded once at the end. OpenBLAS runs
//    single-threaded inside OpenMP threads, one call per output tile (a tiling fixed by the shape).
//  - GPU: cuBLAS is column-major. A row-major matrix X (r×c, row stride ld) read column-major is Xᵀ (c×r,
//    leading dimension ld). So instead of C = op(A)·op(B) we ask cuBLAS for Cᵀ = op(B)ᵀ · op(A)ᵀ: swap the
//    operands (B first), keep each operand's own transpose flag, and swap M and N. No data moves.
//    Accumulation is CUBLAS_COMPUTE_32F: plain fp32, never TF32 (FAST_TF32 would change the bits and the
//    accuracy the GPU tests hold cuBLAS to).
#include "matmul.h"

#include <cblas.h>
#include <algorithm>
#include <cstdlib>
#include <vector>

// ---------------------------------------------------------------------------------------------------------
// CPU
// ---------------------------------------------------------------------------------------------------------

// One thread pool. OpenBLAS (the Debian pthread build) and OpenMP (every element-wise loop) each keep their
// own threads, and each pool's threads spin for a while after their work: on a machine with as many cores as
// threads, the first OpenMP loop after a GEMM shared its cores with spinning OpenBLAS threads and the GEMM
// after an OpenMP loop with spinning OpenMP threads (bench/PERF_NOTES.md: "Why LN1 took 4× LN2"). So the CPU
// backend runs OpenBLAS single-threaded and parallelises the GEMM itself, over OpenMP threads: the output is
// cut into tiles and each thread calls cblas_sgemm on its tiles. OPENBLAS_NUM_THREADS, when set, wins (then
// the tiles run one after the other and OpenBLAS threads each call, as before).
static bool blas_single_threaded() {
    static const bool single = [] {
        if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
        return openblas_get_num_threads() == 1;
    }();
    return single;
}

// Tiles: every matrix of the batch is one task, cut along the longer side of its M×N output into pieces of
// kGemmTile rows (or columns). The cut depends only on the shape, never on the thread count, so which
// cblas_sgemm call computes an output element, and so its bits, are the same however many threads run the
// tasks. The tiles are large so that OpenBLAS's packing of the shared operand, repeated per tile, stays a
// small fraction of the multiply.
constexpr int kGemmTile = 256;

// Per-thread fp32 scratch that only grows: no allocation per call once the sizes of a training step were
// seen (docs/design.md "Performance direction": no per-step allocation).
static float* cpu_scratch(std::vector<float>& buf, size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// Widen a stored rows×cols bf16 matrix (row stride ld) into a compact fp32 matrix (row stride cols).
static void widen_bf16(float* dst, const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = to_f32(src[r * ld + c]);
}

static void gemm_cpu(bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A, GemmOperand B,
                     float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype, DType c_dtype,
                     int batch) {
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    const bool split_rows = M >= N;
    const int tiles = ((split_rows ? M : N) + kGemmTile - 1) / kGemmTile;
    const int64_t tasks = (int64_t)batch * tiles;
    const bool parallel = tasks > 1 && blas_single_threaded();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t task = 0; task < tasks; task++) {
        static thread_local std::vector<float> sa, sb, sc;
        const int i = (int)(task / tiles), tile = (int)(task % tiles);
        const int r0 = split_rows ? tile * kGemmTile : 0, c0 = split_rows ? 0 : tile * kGemmTile;
        const int m = split_rows ? std::min(kGemmTile, M - r0) : M;
        const int n = split_rows ? N : std::min(kGemmTile, N - c0);
        // This tile's operands: rows r0.. of op(A) and columns c0.. of op(B), as element offsets into the
        // stored matrices (a row of op(A) is a column of a transposed A, and likewise for B).
        const int64_t a_off = (int64_t)i * A.stride + (transA ? r0 : (int64_t)r0 * A.ld);
        const int64_t b_off = (int64_t)i * B.stride + (transB ? (int64_t)c0 * B.ld : c0);
        const int64_t a_rows = transA ? K : m, a_cols = transA ? m : K;  // stored shapes of the tile
        const int64_t b_rows = transB ? n : K, b_cols = transB ? K : n;
        const float* a;
        const float* b;
        int64_t lda = A.ld, ldb = B.ld;
        if (ab_dtype == DType::F32) {
            a = static_cast<const float*>(A.ptr) + a_off;
            b = static_cast<const float*>(B.ptr) + b_off;
        } else {
            float* wa = cpu_scratch(sa, (size_t)(a_rows * a_cols));
            float* wb = cpu_scratch(sb, (size_t)(b_rows * b_cols));
            widen_bf16(wa, static_cast<const bf16*>(A.ptr) + a_off, a_rows, a_cols, A.ld);
            widen_bf16(wb, static_cast<const bf16*>(B.ptr) + b_off, b_rows, b_cols, B.ld);
            a = wa;
            b = wb;
            lda = a_cols > 0 ? a_cols : 1;
            ldb = b_cols > 0 ? b_cols : 1;
        }
        const int64_t c_off = (int64_t)i * strideC + (int64_t)r0 * ldc + c0;
        if (c_dtype == DType::F32) {
            float* c = static_cast<float*>(C) + c_off;
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        } else {
            // bf16 C: compute in fp32 (reading the old C when beta != 0) and round once.
            bf16* c = static_cast<bf16*>(C) + c_off;
            float* wc = cpu_scratch(sc, (size_t)m * n);
            if (beta != 0.f) widen_bf16(wc, c, m, n, ldc);
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, (int)lda, b, (int)ldb, beta, wc, n);
            for (int64_t r = 0; r < m; r++)
                for (int64_t col = 0; col < n; col++) c[r * ldc + col] = from_f32<bf16>(wc[r * n + col]);
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
