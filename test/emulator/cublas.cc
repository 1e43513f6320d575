// cublas.cc — the emulated cuBLAS and cuBLASLt: the calls this project makes (include/cublas_v2.h,
// include/cublasLt.h), with their documented column-major semantics, on the emulated GPU. Test only.
//
// Every GEMM is one piece of host work queued on its stream (emu::stream_enqueue, device.h), so it runs after
// the kernels queued before it and before those queued after it, exactly as a cuBLAS kernel would. The
// arguments are checked when the call is made, as cuBLAS does, and a bad one returns its status
// (CUBLAS_STATUS_INVALID_VALUE for a bound, a null pointer or a mismatched layout; CUBLAS_STATUS_NOT_SUPPORTED
// for a type combination or an epilogue the emulator does not run), so the project's CUBLAS_CHECK prints its
// message. A pointer that is not inside device memory stops the process (emu::check_device_range): on a GPU it
// would be an illegal address in the kernel.
//
// The arithmetic: op(A)·op(B) is accumulated in fp32 into a scratch matrix (cblas_sgemm when A and B are fp32,
// a plain loop over bf16 inputs widened to fp32 otherwise), then the epilogue alpha·acc + beta·C (+ bias) is
// evaluated in fp32 and rounded once to C's type (round to nearest even for bf16, as cuBLAS writes it).
// beta = 0 never reads C (it may hold the NaN pattern of a fresh allocation). Not faithful: the summation
// order of cuBLAS's tiles and split-K (results differ in the last bits, within the GPU tests' tolerances),
// tensor-core timing, and every performance property.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "device.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};
struct cublasLtContext {
    int unused = 0;
};
struct cublasLtMatmulDescEmu {
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType_t scale = CUDA_R_32F;
    cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    bool bias_type_set = false;
    cudaDataType_t bias_type = CUDA_R_32F;
};
struct cublasLtMatrixLayoutEmu {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct cublasLtMatmulPreferenceEmu {
    uint64_t max_workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};
};

const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
    }
    return "unknown cuBLAS status";
}

namespace {

// ---- bf16 <-> fp32 (bf16 is the top half of an fp32) ----------------------------------------------------
float bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f) {  // round to nearest, ties to even; NaN stays a (quiet) NaN
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float load(const void* p, cudaDataType_t t, int64_t i) {
    return t == CUDA_R_32F ? static_cast<const float*>(p)[i] : bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}
void store(void* p, cudaDataType_t t, int64_t i, float v) {
    if (t == CUDA_R_32F)
        static_cast<float*>(p)[i] = v;
    else
        static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
}
size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// ---- one GEMM ---------------------------------------------------------------------------------------------
// A column-major operand as stored: rows × cols, leading dimension ld, transposed by op before the product.
struct Operand {
    const void* p;
    cudaDataType_t type;
    int64_t ld;
    bool trans;
};

// The one GEMM every entry point comes to, run on the stream's worker:
// D[i, j] = alpha·Σ_p op(A)[i, p]·op(B)[p, j] + beta·C[i, j] + bias[i], i < m, j < n, rounded once to D's type.
void gemm_now(int m, int n, int k, float alpha, Operand A, Operand B, float beta, const void* C, int64_t ldc,
              void* D, cudaDataType_t dtype, int64_t ldd, const void* bias, cudaDataType_t bias_type) {
    if (m == 0 || n == 0) return;
    std::vector<float> acc((size_t)m * (size_t)n, 0.f);  // column-major, ld m
    if (k > 0 && A.type == CUDA_R_32F) {
        cblas_sgemm(CblasColMajor, A.trans ? CblasTrans : CblasNoTrans, B.trans ? CblasTrans : CblasNoTrans, m, n,
                    k, 1.f, static_cast<const float*>(A.p), (int)A.ld, static_cast<const float*>(B.p), (int)B.ld, 0.f,
                    acc.data(), m);
    } else if (k > 0) {
        // bf16: widen op(A) (m × k, column-major) and op(B) (k × n) once, then accumulate over p in order.
        std::vector<float> a((size_t)m * (size_t)k), b((size_t)k * (size_t)n);
        for (int64_t p = 0; p < k; p++)
            for (int64_t i = 0; i < m; i++) a[(size_t)(i + p * m)] = load(A.p, A.type, A.trans ? p + i * A.ld : i + p * A.ld);
        for (int64_t j = 0; j < n; j++)
            for (int64_t p = 0; p < k; p++) b[(size_t)(p + j * k)] = load(B.p, B.type, B.trans ? j + p * B.ld : p + j * B.ld);
        for (int64_t j = 0; j < n; j++) {
            float* col = acc.data() + j * m;
            for (int64_t p = 0; p < k; p++) {
                const float bv = b[(size_t)(p + j * k)];
                const float* acol = a.data() + p * m;
                for (int64_t i = 0; i < m; i++) col[i] += acol[i] * bv;
            }
        }
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            float v = alpha * acc[(size_t)(i + j * m)];
            if (beta != 0.f) v += beta * load(C, dtype, i + j * ldc);
            if (bias) v += load(bias, bias_type, i);
            store(D, dtype, i + j * ldd, v);
        }
}

// Elements spanned by a rows × cols column-major matrix with leading dimension ld.
size_t extent(int64_t rows, int64_t cols, int64_t ld) {
    return rows == 0 || cols == 0 ? 0 : (size_t)(ld * (cols - 1) + rows);
}

bool supported_types(cudaDataType_t a, cudaDataType_t b, cudaDataType_t c) {
    if (a != b) return false;
    if (a == CUDA_R_32F) return c == CUDA_R_32F;   // fp32 in, fp32 out
    if (a == CUDA_R_16BF) return c == CUDA_R_16BF || c == CUDA_R_32F;  // bf16 in, bf16 or fp32 out
    return false;
}
bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// The checks cuBLAS makes before launching a GEMM (cuBLAS documentation, cublasGemmEx: "Error values").
cublasStatus_t check_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const void* alpha, const void* beta, cudaDataType_t at, int lda, cudaDataType_t bt, int ldb,
                          cudaDataType_t ct, int ldc, cublasComputeType_t compute, int batch) {
    if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
        ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F || !supported_types(at, bt, ct)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

// The device range of each operand of one GEMM: inside one live allocation, or the process stops.
void check_ranges(const char* what, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
                  cudaDataType_t at, int lda, const void* B, int ldb, const void* C, cudaDataType_t ct, int ldc) {
    const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
    if (m > 0 && n > 0 && k > 0) {
        emu::check_device_range(A, extent(na ? m : k, na ? k : m, lda) * type_size(at), what);
        emu::check_device_range(B, extent(nb ? k : n, nb ? n : k, ldb) * type_size(at), what);
    }
    emu::check_device_range(C, extent(m, n, ldc) * type_size(ct), what);
}

bool null_operand(int m, int n, int k, const void* A, const void* B, const void* C) {
    if (m == 0 || n == 0) return false;
    return C == nullptr || (k > 0 && (A == nullptr || B == nullptr));
}

}  // namespace

// ---- cuBLAS ---------------------------------------------------------------------------------------------
cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    // cuBLAS synchronizes before releasing the handle's resources: its queued GEMMs finish first.
    emu::stream_drain(handle->stream);
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    // cuBLAS documents 256-byte alignment for a user workspace.
    if (bytes > 0 && (workspace == nullptr || (uintptr_t)workspace % 256 != 0)) return CUBLAS_STATUS_INVALID_VALUE;
    if (bytes > 0) emu::check_device_range(workspace, bytes, "cublasSetWorkspace");
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    cublasStatus_t st = check_gemm(handle, transa, transb, m, n, k, alpha, beta, Atype, lda, Btype, ldb, Ctype, ldc,
                                   computeType, 1);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (null_operand(m, n, k, A, B, C)) return CUBLAS_STATUS_INVALID_VALUE;
    check_ranges("cublasGemmEx", transa, transb, m, n, k, A, Atype, lda, B, ldb, C, Ctype, ldc);
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    const Operand oa{A, Atype, lda, transa != CUBLAS_OP_N}, ob{B, Btype, ldb, transb != CUBLAS_OP_N};
    emu::stream_enqueue(handle->stream, [=] { gemm_now(m, n, k, a, oa, ob, b, C, ldc, C, Ctype, ldc, nullptr, Ctype); },
                        "cublasGemmEx");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    cublasStatus_t st = check_gemm(handle, transa, transb, m, n, k, alpha, beta, Atype, lda, Btype, ldb, Ctype, ldc,
                                   computeType, batchCount);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (batchCount == 0) return CUBLAS_STATUS_SUCCESS;
    if (null_operand(m, n, k, A, B, C)) return CUBLAS_STATUS_INVALID_VALUE;
    const size_t ea = type_size(Atype), ec = type_size(Ctype);
    for (int i = 0; i < batchCount; i++)
        check_ranges("cublasGemmStridedBatchedEx", transa, transb, m, n, k, static_cast<const char*>(A) + i * strideA * (long long)ea,
                     Atype, lda, static_cast<const char*>(B) + i * strideB * (long long)ea, ldb,
                     static_cast<const char*>(C) + i * strideC * (long long)ec, Ctype, ldc);
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    emu::stream_enqueue(handle->stream, [=] {
        for (int i = 0; i < batchCount; i++) {
            const Operand oa{static_cast<const char*>(A) + i * strideA * (long long)ea, Atype, lda, transa != CUBLAS_OP_N};
            const Operand ob{static_cast<const char*>(B) + i * strideB * (long long)ea, Btype, ldb, transb != CUBLAS_OP_N};
            char* c = static_cast<char*>(C) + i * strideC * (long long)ec;
            gemm_now(m, n, k, a, oa, ob, b, c, ldc, c, Ctype, ldc, nullptr, Ctype);
        }
    }, "cublasGemmStridedBatchedEx");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* const Aarray[], cudaDataType Atype,
                                   int lda, const void* const Barray[], cudaDataType Btype, int ldb, const void* beta,
                                   void* const Carray[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    cublasStatus_t st = check_gemm(handle, transa, transb, m, n, k, alpha, beta, Atype, lda, Btype, ldb, Ctype, ldc,
                                   computeType, batchCount);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (batchCount == 0) return CUBLAS_STATUS_SUCCESS;
    if (Aarray == nullptr || Barray == nullptr || Carray == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    // The arrays are device memory; their entries are read when the GEMM runs (a kernel queued before this
    // call may still be writing them, as gemm_pointers_kernel in layers/matmul.cu does).
    const char* what = "cublasGemmBatchedEx";
    emu::check_device_range(Aarray, batchCount * sizeof(void*), what);
    emu::check_device_range(Barray, batchCount * sizeof(void*), what);
    emu::check_device_range(Carray, batchCount * sizeof(void*), what);
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    emu::stream_enqueue(handle->stream, [=] {
        for (int i = 0; i < batchCount; i++) {
            if (null_operand(m, n, k, Aarray[i], Barray[i], Carray[i]))
                emu::fatal("cublasGemmBatchedEx: matrix %d of %d has a null pointer in its array (A %p, B %p, C %p)", i,
                           batchCount, Aarray[i], Barray[i], (void*)Carray[i]);
            check_ranges(what, transa, transb, m, n, k, Aarray[i], Atype, lda, Barray[i], ldb, Carray[i], Ctype, ldc);
            const Operand oa{Aarray[i], Atype, lda, transa != CUBLAS_OP_N}, ob{Barray[i], Btype, ldb, transb != CUBLAS_OP_N};
            gemm_now(m, n, k, a, oa, ob, b, Carray[i], ldc, Carray[i], Ctype, ldc, nullptr, Ctype);
        }
    }, what);
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt -------------------------------------------------------------------------------------------
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasLtContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cublasLtMatmulDescEmu();
    (*desc)->compute = computeType;
    (*desc)->scale = scaleType;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

namespace {
template <class T>
cublasStatus_t read_attr(T& out, const void* buf, size_t size) {
    if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&out, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: return read_attr(desc->transa, buf, size);
        case CUBLASLT_MATMUL_DESC_TRANSB: return read_attr(desc->transb, buf, size);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attr(desc->epilogue, buf, size);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attr(desc->bias, buf, size);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
            desc->bias_type_set = true;
            return read_attr(desc->bias_type, buf, size);
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return read_attr(desc->compute, buf, size);
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return read_attr(desc->scale, buf, size);
        default: return CUBLAS_STATUS_NOT_SUPPORTED;  // an attribute this project never sets
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutEmu{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceEmu();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attr(pref->max_workspace, buf, size);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return read_attr(pref->align[0], buf, size);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return read_attr(pref->align[1], buf, size);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return read_attr(pref->align[2], buf, size);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return read_attr(pref->align[3], buf, size);
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

namespace {
// What a matmul's descriptors must say for the emulator to run it (the same checks for the heuristic and the
// matmul): shapes that agree, ld ≥ rows, C and D alike, a supported type combination and epilogue.
cublasStatus_t check_lt(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
    if (op == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (!valid_op(op->transa) || !valid_op(op->transb)) return CUBLAS_STATUS_INVALID_VALUE;
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
        if (l->ld < (int64_t)std::max<uint64_t>(1, l->rows) || l->rows > INT32_MAX || l->cols > INT32_MAX)
            return CUBLAS_STATUS_INVALID_VALUE;
    const bool na = op->transa == CUBLAS_OP_N, nb = op->transb == CUBLAS_OP_N;
    const uint64_t m = d->rows, n = d->cols, k = na ? a->cols : a->rows;
    if ((na ? a->rows : a->cols) != m || (nb ? b->rows : b->cols) != k || (nb ? b->cols : b->rows) != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (c->rows != d->rows || c->cols != d->cols || c->type != d->type) return CUBLAS_STATUS_INVALID_VALUE;
    if (op->compute != CUBLAS_COMPUTE_32F || op->scale != CUDA_R_32F || !supported_types(a->type, b->type, d->type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && op->epilogue != CUBLASLT_EPILOGUE_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && op->bias_type_set && op->bias_type != CUDA_R_32F &&
        op->bias_type != d->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}
constexpr uint64_t kAlgoId = 1;  // the emulator's one algorithm (the loop of gemm_now)
}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (pref == nullptr || requested <= 0 || results == nullptr || returned == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    cublasStatus_t st = check_lt(op, a, b, c, d);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cublasLtMatmulHeuristicResult_t r;
    std::memset(&r, 0, sizeof r);
    r.algo.data[0] = kAlgoId;  // ID; tile, split-K and stages 0 (data[1..3])
    r.workspaceSize = 0;       // the emulator needs no workspace
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.f;
    results[0] = r;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
    if (algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    int slot;
    switch (attr) {
        case CUBLASLT_ALGO_CONFIG_ID: slot = 0; break;
        case CUBLASLT_ALGO_CONFIG_TILE_ID: slot = 1; break;
        case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: slot = 2; break;
        case CUBLASLT_ALGO_CONFIG_STAGES_ID: slot = 3; break;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    // Every one of these is documented as 32 bits wide (int32 or uint32).
    if (written) *written = sizeof(uint32_t);
    if (size == 0 && written) return CUBLAS_STATUS_SUCCESS;  // a size query
    if (buf == nullptr || size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    const uint32_t v = (uint32_t)algo->data[slot];
    std::memcpy(buf, &v, sizeof v);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = check_lt(op, a, b, c, d);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (algo != nullptr && algo->data[0] != kAlgoId) return CUBLAS_STATUS_INVALID_VALUE;  // not one we gave out
    if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    const int m = (int)d->rows, n = (int)d->cols, k = (int)(op->transa == CUBLAS_OP_N ? a->cols : a->rows);
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    if (null_operand(m, n, k, A, B, D) || (be != 0.f && m > 0 && n > 0 && C == nullptr)) return CUBLAS_STATUS_INVALID_VALUE;
    const bool with_bias = op->epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (with_bias && op->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    const cudaDataType_t bias_type = op->bias_type_set ? op->bias_type : d->type;  // default: D's type
    const char* what = "cublasLtMatmul";
    if (m > 0 && n > 0 && k > 0) {
        emu::check_device_range(A, extent(a->rows, a->cols, a->ld) * type_size(a->type), what);
        emu::check_device_range(B, extent(b->rows, b->cols, b->ld) * type_size(b->type), what);
    }
    if (be != 0.f) emu::check_device_range(C, extent(c->rows, c->cols, c->ld) * type_size(c->type), what);
    emu::check_device_range(D, extent(d->rows, d->cols, d->ld) * type_size(d->type), what);
    if (with_bias) emu::check_device_range(op->bias, (size_t)m * type_size(bias_type), what);
    if (workspace_bytes > 0) emu::check_device_range(workspace, workspace_bytes, what);
    const Operand oa{A, a->type, a->ld, op->transa != CUBLAS_OP_N}, ob{B, b->type, b->ld, op->transb != CUBLAS_OP_N};
    const int64_t ldc = c->ld, ldd = d->ld;
    const cudaDataType_t dt = d->type;
    const void* bias = with_bias ? op->bias : nullptr;  // the pointer as set now (linear.cu sets it per call)
    emu::stream_enqueue(stream, [=] { gemm_now(m, n, k, al, oa, ob, be, C, ldc, D, dt, ldd, bias, bias_type); }, what);
    return CUBLAS_STATUS_SUCCESS;
}
