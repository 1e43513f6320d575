// lt_survey.h — a benchmark's look at cuBLASLt's choices for the fused-bias forward GEMM (layer_bench
// --lt-survey, GPU only).
#pragma once
#include "../layers/runtime.h"

// For every shape the fused-bias forward GEMM has planned in this process (layers/linear_lt.h), print up to
// max_candidates algorithms of cuBLASLt's heuristic, each timed on scratch operands, with the first (the one
// that runs) against the fastest. Changes no plan. Nothing on the CPU.
void linear_lt_survey(Ctx& ctx, int max_candidates = 8);
