// hellaswag.h — multiple-choice accuracy (HellaSwag, in llm.c's eval-file format: data/eval_file.h) of the
// model, distributed over the data-parallel ranks.
//
// Each data-parallel rank scores a contiguous block of the examples (eval_share); the ranks of a tensor-
// parallel group score the same rows together (the forward pass is the trainer's, vocab-parallel loss
// included). Per example the candidate whose completion tokens have the lowest mean loss is the answer; the
// correct counts are summed over the DP group. Dropout is off (as for validation).
#pragma once
#include <vector>
#include "gpt.h"
#include "../data/eval_file.h"

struct EvalScore {
    int correct = 0, total = 0;
    double accuracy() const { return total ? (double)correct / total : 0.0; }
};

// Sequences of T tokens, `examples_per_forward` examples (4 rows each) per forward pass on each DP rank.
// Collective over the whole grid. Every example must fit (check with eval_problem first).
EvalScore hellaswag_evaluate(GPT& m, const std::vector<EvalExample>& examples, int T, int examples_per_forward);
// "" when every example fits in T tokens (context + each completion) and every token id is below the model's
// vocabulary; else what is wrong with the first one that does not.
std::string eval_problem(const std::vector<EvalExample>& examples, int T, int vocab);
