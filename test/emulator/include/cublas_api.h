// cublas_api.h (emulated) — the cuBLAS types this project uses, for the emulated GPU (test/emulator/).
//
// Test infrastructure only: the real toolkit's header is used by every GPU build. The names and meanings
// follow the cuBLAS documentation; the enum values are this emulator's own where nothing depends on them.
// The implementation is test/emulator/cublas.cc (fp32 on OpenBLAS, bf16 in a plain fp32-accumulating loop).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>   // cudaStream_t (the emulated runtime's)
#include <library_types.h>  // cudaDataType_t: CUDA_R_32F, CUDA_R_16BF (the toolkit's plain C header)

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

// Only CUBLAS_COMPUTE_32F runs (plain fp32 accumulation); the others are named so that a call with one of
// them is refused with CUBLAS_STATUS_NOT_SUPPORTED instead of not compiling.
typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32I = 72
} cublasComputeType_t;

// The algorithm does not change the emulator's result (one loop per dtype); any documented value is accepted.
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

const char* cublasGetStatusString(cublasStatus_t status);
