// linear_lt.h — the cuBLASLt plans of the fused-bias forward GEMM (linear.cu builds one per key and runs it),
// open to a benchmark that wants to look at them: bench/lt_survey.cu re-asks the heuristic for every planned
// shape and times each candidate. The trainer needs none of this header; linear.h is the layer.
#pragma once
#include <cstdint>
#include <map>
#include <tuple>
#include "runtime.h"

// What a plan depends on: the shapes, the dtypes (DType as int), the pointer alignments cuBLASLt may assume
// and our workspace size. The heuristic gives the same algorithm for the same key, so a plan is made once.
struct LtKey {
    int N, IC, OC;
    int ab, c;
    uint32_t align_a, align_b, align_c, align_bias;
    size_t workspace;
    bool operator<(const LtKey& o) const {
        return std::tie(N, IC, OC, ab, c, align_a, align_b, align_c, align_bias, workspace) <
               std::tie(o.N, o.IC, o.OC, o.ab, o.c, o.align_a, o.align_b, o.align_c, o.align_bias, o.workspace);
    }
};
struct LtPlan {
    bool ok = false;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
};

// Up to `max` algorithms for the plan's descriptors, best first by cuBLASLt's own estimate, for exactly the
// key's workspace and pointer alignments; 0 when this combination has no fused-bias kernel. The one
// heuristic query: the plan takes its first answer.
int lt_heuristics(Ctx& ctx, const LtPlan& p, const LtKey& k, cublasLtMatmulHeuristicResult_t* results, int max);

// Every plan made in this process so far (ok == false: the key has no fused-bias kernel and runs the
// broadcast path). A benchmark may set a plan's bias pointer: linear_forward sets it again before each call.
const std::map<LtKey, LtPlan>& lt_planned();
