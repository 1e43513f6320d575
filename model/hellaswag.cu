// hellaswag.cu — multiple-choice accuracy of the model over the DP ranks (see hellaswag.h).
#include "hellaswag.h"

#include <algorithm>
#include "pipeline_ops.h"
#include "../parallel/comm.h"

std::string eval_problem(const std::vector<EvalExample>& examples, int T, int vocab) {
    std::vector<int32_t> in, tg;
    std::vector<uint8_t> mask;
    std::string err;
    for (size_t i = 0; i < examples.size(); i++) {
        if (!eval_rows(examples, (int)i, 1, T, in, tg, mask, err)) return err + " (use a longer --seq)";
        for (int32_t t : in)
            if (t >= vocab)
                return "eval example " + std::to_string(i) + ": token " + std::to_string(t) + " is not below the vocabulary size " +
                       std::to_string(vocab) + " (an eval file made with another tokenizer?)";
    }
    return "";
}

EvalScore hellaswag_evaluate(GPT& m, const std::vector<EvalExample>& examples, int T, int examples_per_forward) {
    const ProcessGrid& g = *m.grid;
    int first = 0, count = 0;
    eval_share((int)examples.size(), g.dp, g.dp_rank, &first, &count);
    const float dropout = m.dropout;
    m.dropout = 0.f;  // a deterministic score, as validation
    int correct = 0;
    std::vector<int32_t> inputs, targets;
    std::vector<uint8_t> mask;
    std::vector<float> losses;
    std::string err;
    for (int e = first; e < first + count; e += examples_per_forward) {
        const int n = std::min(examples_per_forward, first + count - e);
        if (!eval_rows(examples, e, n, T, inputs, targets, mask, err)) mm_fatal("hellaswag: %s", err.c_str());
        evaluation_forward(m, inputs.data(), targets.data(), kEvalCompletions * n, T, false, &losses);
        correct += eval_correct(examples, e, n, T, losses, mask);
    }
    m.dropout = dropout;
    EvalScore s;
    s.total = (int)examples.size();
    s.correct = correct;
    // Every rank of a TP group counted the same examples: sum over the DP group only.
    if (g.dp > 1) MPI_CHECK(MPI_Allreduce(&correct, &s.correct, 1, MPI_INT, MPI_SUM, g.dp_comm.mpi));
    return s;
}
