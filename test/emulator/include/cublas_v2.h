// cublas_v2.h (emulated) — the cuBLAS calls this project makes (layers/runtime.cu, layers/matmul.cu), with
// their documented column-major semantics, on the emulated GPU (test/emulator/cublas.cc). Test only.
//
// Every GEMM runs on the handle's stream (cublasSetStream), after the work queued there before it; alpha
// and beta are host pointers (CUBLAS_POINTER_MODE_HOST, the default) read when the call is made.
#pragma once

#include "cublas_api.h"

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes);

// C = alpha·op(A)·op(B) + beta·C, column-major: op(A) m×k, op(B) k×n, C m×n. beta = 0: C is not read.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);
// batchCount GEMMs, matrix i at A + i·strideA (elements), likewise B and C.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);
// batchCount GEMMs, matrix i at Aarray[i], Barray[i], Carray[i]: the arrays are device memory, read when the
// call runs on the stream (so a kernel queued before it may write them).
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* const Aarray[], cudaDataType Atype,
                                   int lda, const void* const Barray[], cudaDataType Btype, int ldb, const void* beta,
                                   void* const Carray[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo);
