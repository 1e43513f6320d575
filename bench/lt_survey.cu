// lt_survey.cu — layer_bench --lt-survey: the heuristic's candidates for every shape the fused-bias GEMM has
// planned so far, each timed on scratch operands, so that a shape whose first choice is slow shows. The
// first choice is what the trainer runs; nothing here changes a plan (the bias pointer set here is set again
// before every real call, layers/linear.cu).
#include "lt_survey.h"

#include <cstdio>
#include <vector>
#include "../layers/linear_lt.h"

// An algorithm's configuration attribute (id, tile, stages, split-k) for the table.
static int lt_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = -1;  // ID and SPLITK_NUM are int32, TILE_ID and STAGES_ID uint32: the same 4 bytes
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return (int)v;  // -1: not readable
}

void linear_lt_survey(Ctx& ctx, int max_candidates) {
    if (ctx.device != Device::CUDA || ctx.cublaslt == nullptr) return;
    printf("\ncuBLASLt fused-bias GEMMs (linear_forward with a bias): the heuristic's candidates, each timed\n"
           "(mean of 20 launches after 3; #0 is what runs; id / tile / stages / split-k of each algorithm):\n");
    std::vector<cublasLtMatmulHeuristicResult_t> results((size_t)max_candidates);
    for (auto& entry : lt_planned()) {
        const LtKey& k = entry.first;
        const LtPlan& p = entry.second;
        if (!p.ok) continue;
        const int found = lt_heuristics(ctx, p, k, results.data(), max_candidates);
        const size_t eab = k.ab == (int)DType::F32 ? 4 : 2, ec = k.c == (int)DType::F32 ? 4 : 2;
        void *A, *B, *C, *bias;
        CUDA_CHECK(cudaMalloc(&A, eab * (size_t)k.IC * k.OC));
        CUDA_CHECK(cudaMalloc(&B, eab * (size_t)k.IC * k.N));
        CUDA_CHECK(cudaMalloc(&C, ec * (size_t)k.OC * k.N));
        CUDA_CHECK(cudaMalloc(&bias, eab * (size_t)k.OC));
        // Small non-zero operands (every byte 0x3C: about 0.0115 in bf16 and in f32).
        CUDA_CHECK(cudaMemsetAsync(A, 0x3C, eab * (size_t)k.IC * k.OC, ctx.stream));
        CUDA_CHECK(cudaMemsetAsync(B, 0x3C, eab * (size_t)k.IC * k.N, ctx.stream));
        CUDA_CHECK(cudaMemsetAsync(bias, 0x3C, eab * (size_t)k.OC, ctx.stream));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        const double flops = 2.0 * k.N * (double)k.IC * k.OC;
        printf("  N %d, IC %d, OC %d, %s: %d candidate%s\n", k.N, k.IC, k.OC, dtype_name((DType)k.ab), found,
               found == 1 ? "" : "s");
        double first = 0, best = 0;
        int best_i = 0;
        for (int i = 0; i < found; i++) {
            const float alpha = 1.f, beta = 0.f;
            // A candidate that does not launch is reported and skipped: a survey never stops the program.
            cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
            auto launch = [&] {
                if (st == CUBLAS_STATUS_SUCCESS)
                    st = cublasLtMatmul(ctx.cublaslt, p.op, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c,
                                        &results[(size_t)i].algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                                        ctx.stream);
            };
            for (int w = 0; w < 3; w++) launch();
            CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
            for (int r = 0; r < 20; r++) launch();
            CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            if (st != CUBLAS_STATUS_SUCCESS) {
                printf("    #%d did not run: %s\n", i, cublasGetStatusString(st));
                if (i == 0) break;  // no first choice to compare with
                continue;
            }
            float ms = 0.f;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            const double each = ms / 20.0;
            if (i == 0) first = each;
            if (i == 0 || each < best) best = each, best_i = i;
            const cublasLtMatmulAlgo_t& a = results[(size_t)i].algo;
            printf("    #%d %8.4f ms %7.1f TFLOP/s | id %d tile %d stages %d split-k %d | waves %.2f\n", i, each,
                   flops / (each * 1e-3) / 1e12, lt_config(a, CUBLASLT_ALGO_CONFIG_ID),
                   lt_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID), lt_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                   lt_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), results[(size_t)i].wavesCount);
        }
        if (first > 0)
            printf("    first choice %.4f ms, best #%d %.4f ms: the first choice is %.1f%% slower\n", first, best_i, best,
                   100.0 * (first / best - 1.0));
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        CUDA_CHECK(cudaFree(A));
        CUDA_CHECK(cudaFree(B));
        CUDA_CHECK(cudaFree(C));
        CUDA_CHECK(cudaFree(bias));
    }
}
