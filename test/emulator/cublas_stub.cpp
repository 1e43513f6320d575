// Link-time stand-in for cuBLAS/cuBLASLt (see cublas_stub.h): handles work, a GEMM stops the program.
#include "cublas_stub.h"
#include "device.h"

struct cublasContext { int unused; };
struct cublasLtContext { int unused; };
const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "error"; }
cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = new cublasContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new cublasLtContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
#define EMU_NOT_YET(name, ...) \
    cublasStatus_t name(__VA_ARGS__) { emu::fatal("%s: cuBLAS is not emulated in this build", #name); }
EMU_NOT_YET(cublasGemmEx, cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
            cudaDataType_t, int, const void*, cudaDataType_t, int, const void*, void*, cudaDataType_t, int,
            cublasComputeType_t, cublasGemmAlgo_t)
EMU_NOT_YET(cublasGemmStridedBatchedEx, cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
            const void*, cudaDataType_t, int, long long, const void*, cudaDataType_t, int, long long, const void*, void*,
            cudaDataType_t, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t)
EMU_NOT_YET(cublasGemmBatchedEx, cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
            const void* const[], cudaDataType_t, int, const void* const[], cudaDataType_t, int, const void*,
            void* const[], cudaDataType_t, int, int, cublasComputeType_t, cublasGemmAlgo_t)
EMU_NOT_YET(cublasLtMatmulDescCreate, cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t)
EMU_NOT_YET(cublasLtMatmulDescDestroy, cublasLtMatmulDesc_t)
EMU_NOT_YET(cublasLtMatmulDescSetAttribute, cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t)
EMU_NOT_YET(cublasLtMatrixLayoutCreate, cublasLtMatrixLayout_t*, cudaDataType_t, uint64_t, uint64_t, int64_t)
EMU_NOT_YET(cublasLtMatrixLayoutDestroy, cublasLtMatrixLayout_t)
EMU_NOT_YET(cublasLtMatmulPreferenceCreate, cublasLtMatmulPreference_t*)
EMU_NOT_YET(cublasLtMatmulPreferenceDestroy, cublasLtMatmulPreference_t)
EMU_NOT_YET(cublasLtMatmulPreferenceSetAttribute, cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
            const void*, size_t)
EMU_NOT_YET(cublasLtMatmulAlgoGetHeuristic, cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
            cublasLtMatmulHeuristicResult_t*, int*)
EMU_NOT_YET(cublasLtMatmulAlgoConfigGetAttribute, const cublasLtMatmulAlgo_t*, cublasLtMatmulAlgoConfigAttributes_t,
            void*, size_t, size_t*)
EMU_NOT_YET(cublasLtMatmul, cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
            const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*,
            cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t)
