// matmul.cu — the one GEMM primitive (see matmul.h): OpenBLAS on CPU, cuBLAS on GPU.
// The plain math this file computes fast: layers/reference/matmul.h
//
// Every matrix product of the model (linear layers, the per-head products of attention, the LM head) goes
// through gemm() or gemm_batched() (a two-level batch: attention's sequences × heads in one call), so the two
// backends are written once here and nowhere else.
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

// Tiles: every matrix of the batch is one task, cut along the longer side of its M×N output into pieces. The
// cut depends only on the shape, never on the thread count, so which cblas_sgemm call computes an output
// element, and so its bits, are the same however many threads run the tasks. The pieces are as large as
// kGemmTileMax rows (or columns), near-equal, a multiple of kGemmTileAlign, and of an even count: a linear
// layer's products (M = 1024 tokens, N = 256-1024 at the CPU peer's shape) then make two or four equal tasks,
// which two threads share evenly. Why large: each tile is one OpenBLAS call, which packs the operand the tiles
// share (the weight, in a forward) again, and a small tile runs its kernel over fewer rows per packed panel.
// With 128-row pieces (the tile until 2026-12-04) the peer layer's linears ran at 0.16-0.18 TFLOP/s, with
// these at 0.18-0.19 (sgemm 0.20), and the 768 × 256 QKV weight gradient (6 pieces of 128 then) is now two of
// 384 rather than 512 + 256 (bench/PERF_NOTES.md "GEMM tiles"). OpenBLAS's result for an element depends on K
// and its kernels, not on the tile's M and N (checked: checkpoints byte-identical with 128-, 256- and 512-row
// tiles), so the tile is a speed choice only.
constexpr int kGemmTileMax = 512;
constexpr int kGemmTileAlign = 16;

GemmTiles cpu_gemm_tiles(int L) {  // L: the output's longer side
    if (L <= 0) return {1, 0};  // an empty output: no tiles
    int parts = (L + kGemmTileMax - 1) / kGemmTileMax;
    if (parts % 2 == 1 && L >= 2 * kGemmTileAlign) parts++;
    int size = (L + parts - 1) / parts;
    size = (size + kGemmTileAlign - 1) / kGemmTileAlign * kGemmTileAlign;
    return {size, (L + size - 1) / size};
}

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

static void gemm_cpu(bool transA, bool transB, int M, int N, int K, float alpha, GemmBatchOperand A,
                     GemmBatchOperand B, float beta, GemmBatchOperand Cm, DType ab_dtype, DType c_dtype, int outer,
                     int inner) {
    void* C = const_cast<void*>(Cm.ptr);
    const int64_t ldc = Cm.ld;
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    const bool split_rows = M >= N;
    const GemmTiles cut = cpu_gemm_tiles(split_rows ? M : N);
    const int tiles = cut.count;
    const int64_t tasks = (int64_t)outer * inner * tiles;
    const bool parallel = tasks > 1 && blas_single_threaded();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t task = 0; task < tasks; task++) {
        static thread_local std::vector<float> sa, sb, sc;
        const int64_t mat = task / tiles;
        const int tile = (int)(task % tiles);
        const int64_t o = mat / inner, i = mat % inner;  // matrix (o, i) of the batch
        const int r0 = split_rows ? tile * cut.size : 0, c0 = split_rows ? 0 : tile * cut.size;
        const int m = split_rows ? std::min(cut.size, M - r0) : M;
        const int n = split_rows ? N : std::min(cut.size, N - c0);
        // This tile's operands: rows r0.. of op(A) and columns c0.. of op(B), as element offsets into the
        // stored matrices (a row of op(A) is a column of a transposed A, and likewise for B).
        const int64_t a_off = o * A.outer_stride + i * A.stride + (transA ? r0 : (int64_t)r0 * A.ld);
        const int64_t b_off = o * B.outer_stride + i * B.stride + (transB ? (int64_t)c0 * B.ld : c0);
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
        const int64_t c_off = o * Cm.outer_stride + i * Cm.stride + (int64_t)r0 * ldc + c0;
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

bool cpu_gemm_single_threaded() { return blas_single_threaded(); }

void gemm_f32_here(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---------------------------------------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------------------------------------

static cudaDataType_t cublas_type(DType t) {
    if (t == DType::F32) return CUDA_R_32F;
    if (t == DType::BF16) return CUDA_R_16BF;
    mm_fatal("gemm: unsupported dtype %s", dtype_name(t));
}

// Pointer arrays for cublasGemmBatchedEx, written on the device (no host round trip, no upload per call):
// ptrs[0 .. n) for A, [n .. 2n) for B, [2n .. 3n) for C, matrix (o, i) at index o·inner + i.
struct GemmPtrArgs {
    const char *a, *b, *c;
    int64_t a_outer, a_inner, b_outer, b_inner, c_outer, c_inner;  // in bytes
    int inner;
    int64_t n;
};
__global__ void gemm_pointers_kernel(const void** ptrs, GemmPtrArgs g) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= g.n) return;
    const int64_t o = idx / g.inner, i = idx % g.inner;  // once per matrix, not per element
    ptrs[idx] = g.a + o * g.a_outer + i * g.a_inner;
    ptrs[g.n + idx] = g.b + o * g.b_outer + i * g.b_inner;
    ptrs[2 * g.n + idx] = g.c + o * g.c_outer + i * g.c_inner;
}

size_t gemm_batched_scratch_bytes(int64_t outer, int64_t inner) {
    // One constant stride (or one matrix) needs no pointer arrays: strided-batched cuBLAS, no scratch.
    if (outer <= 1 || inner <= 1) return 0;
    return 3 * (size_t)(outer * inner) * sizeof(void*);
}

static void gemm_cuda(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmBatchOperand A,
                      GemmBatchOperand B, float beta, GemmBatchOperand C, DType ab_dtype, DType c_dtype, int outer,
                      int inner) {
    // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B goes first, M and N swap.
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t tab = cublas_type(ab_dtype), tc = cublas_type(c_dtype);
    void* c = const_cast<void*>(C.ptr);
    if (outer == 1 && inner == 1) {
        CUBLAS_CHECK(cublasGemmEx(ctx.cublas, opB, opA, N, M, K, &alpha, B.ptr, tab, (int)B.ld, A.ptr, tab,
                                  (int)A.ld, &beta, c, tc, (int)C.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else if (outer == 1 || inner == 1) {  // one level: a constant stride
        const bool in = outer == 1;
        const long long sa = in ? A.stride : A.outer_stride, sb = in ? B.stride : B.outer_stride,
                        sc = in ? C.stride : C.outer_stride;
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, opB, opA, N, M, K, &alpha, B.ptr, tab, (int)B.ld, sb,
                                                A.ptr, tab, (int)A.ld, sa, &beta, c, tc, (int)C.ld, sc,
                                                in ? inner : outer, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        const int64_t n = (int64_t)outer * inner;
        if (n > INT32_MAX) mm_fatal("gemm_batched: %lld matrices in one call (cuBLAS takes at most 2^31 - 1)", (long long)n);
        // The arrays live in the context's scratch: this kernel and the cuBLAS call run in order on ctx.stream,
        // so the next call's kernel overwrites them only after this GEMM has read them.
        const void** ptrs = static_cast<const void**>(ctx_scratch(ctx, gemm_batched_scratch_bytes(outer, inner)));
        const int64_t ea = dtype_size(ab_dtype), ec = dtype_size(c_dtype);
        GemmPtrArgs g{static_cast<const char*>(A.ptr), static_cast<const char*>(B.ptr), static_cast<const char*>(C.ptr),
                      A.outer_stride * ea, A.stride * ea, B.outer_stride * ea, B.stride * ea, C.outer_stride * ec,
                      C.stride * ec, inner, n};
        gemm_pointers_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx.stream>>>(ptrs, g);
        CUDA_CHECK_LAST();
        CUBLAS_CHECK(cublasGemmBatchedEx(ctx.cublas, opB, opA, N, M, K, &alpha, ptrs + n, tab, (int)B.ld, ptrs, tab,
                                         (int)A.ld, &beta, (void* const*)(ptrs + 2 * n), tc, (int)C.ld, (int)n,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

void gemm_batched(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmBatchOperand A,
                  GemmBatchOperand B, float beta, GemmBatchOperand C, DType ab_dtype, DType c_dtype, int outer,
                  int inner) {
    if (ab_dtype != DType::F32 && ab_dtype != DType::BF16)
        mm_fatal("gemm: operands must be f32 or bf16, got %s", dtype_name(ab_dtype));
    // fp32 operands with a bf16 result is not a combination cuBLAS offers (and nothing here needs it).
    if (!(c_dtype == ab_dtype || c_dtype == DType::F32))
        mm_fatal("gemm: C must be f32 or the operands' dtype (%s), got %s", dtype_name(ab_dtype),
                 dtype_name(c_dtype));
    if (M < 0 || N < 0 || K < 0 || outer < 0 || inner < 0)
        mm_fatal("gemm: negative size M=%d N=%d K=%d batch=%d x %d", M, N, K, outer, inner);
    if (M == 0 || N == 0 || outer == 0 || inner == 0) return;
    // Leading dimensions must cover a stored row (BLAS rejects them otherwise; say which one is wrong).
    const int64_t a_cols = transA ? M : K, b_cols = transB ? K : N;
    if (A.ld < (a_cols > 1 ? a_cols : 1) || B.ld < (b_cols > 1 ? b_cols : 1) || C.ld < (N > 1 ? N : 1))
        mm_fatal("gemm: leading dimension too small (lda=%lld for %lld cols, ldb=%lld for %lld cols, ldc=%lld "
                 "for %d cols)", (long long)A.ld, (long long)a_cols, (long long)B.ld, (long long)b_cols,
                 (long long)C.ld, N);
    if (ctx.device == Device::CUDA)
        gemm_cuda(ctx, transA, transB, M, N, K, alpha, A, B, beta, C, ab_dtype, c_dtype, outer, inner);
    else
        gemm_cpu(transA, transB, M, N, K, alpha, A, B, beta, C, ab_dtype, c_dtype, outer, inner);
}

void gemm(Ctx& ctx, bool transA, bool transB, int M, int N, int K, float alpha, GemmOperand A, GemmOperand B,
          float beta, void* C, int64_t ldc, int64_t strideC, DType ab_dtype, DType c_dtype, int batch) {
    // A one-level batch: matrices i = 0 .. batch-1, one stride apart.
    gemm_batched(ctx, transA, transB, M, N, K, alpha, GemmBatchOperand{A.ptr, A.ld, 0, A.stride},
                 GemmBatchOperand{B.ptr, B.ld, 0, B.stride}, beta, GemmBatchOperand{C, ldc, 0, strideC}, ab_dtype,
                 c_dtype, 1, batch);
}
