// generate.cu — sampling: run the model, read one row of the vocab-parallel logits, gather it, sample.
#include "generate.h"
#include "pipeline_ops.h"

#include <algorithm>
#include <cmath>
#include <random>

// Temperature 0: greedy decoding, the most likely token of the real vocabulary (the lowest id of a tie).
static int greedy_token(const std::vector<float>& logits, int vocab) {
    return (int)(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
}

// Temperature > 0: a draw from the softmax over the real vocabulary at this temperature, optionally
// restricted to the top k.
static int sample_token(const std::vector<float>& all, int vocab, float temperature, int top_k, std::mt19937_64& rng) {
    std::vector<std::pair<float, int>> cand;
    for (int v = 0; v < vocab; v++) cand.push_back({all[v] / temperature, v});
    if (top_k > 0 && top_k < (int)cand.size()) {
        std::partial_sort(cand.begin(), cand.begin() + top_k, cand.end(),
                          [](auto& a, auto& b) { return a.first > b.first; });
        cand.resize(top_k);
    }
    float mx = -INFINITY;
    for (auto& c : cand) mx = std::max(mx, c.first);
    double sum = 0;
    for (auto& c : cand) sum += std::exp((double)c.first - mx);
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * sum, acc = 0;
    int next = cand.back().second;
    for (auto& c : cand) {
        acc += std::exp((double)c.first - mx);
        if (acc >= u) { next = c.second; break; }
    }
    return next;
}

void generate(GPT& m, std::vector<int>& tokens, int n, int window, float temperature, int top_k, uint64_t seed,
              const std::function<void(int)>& on_token) {
    const GPTConfig& cfg = m.cfg;
    const int tp = m.grid->tp, V_local = cfg.padded_vocab / tp;
    float saved_dropout = m.dropout;
    m.dropout = 0.f;
    std::mt19937_64 rng(seed);  // the same seed on every rank: every rank samples the same token
    std::vector<int32_t> in(window), tg(window, 0);
    std::vector<float> row(V_local), all((size_t)V_local * tp);
    for (int step = 0; step < n; step++) {
        int len = std::min((int)tokens.size(), window);
        int start = (int)tokens.size() - len;
        for (int i = 0; i < window; i++) in[i] = i < len ? tokens[start + i] : 0;
        evaluation_forward(m, in.data(), tg.data(), 1, window, true);
        // On the last pipeline stage: row (len-1) of this rank's logits [S·B, V_local] (B = 1), then the
        // slices of the whole TP group; then to every stage. Under CP, position len-1 is on one CP rank (the
        // one whose zigzag chunk holds it): its row, then to the others.
        const ProcessGrid& g = *m.grid;
        int owner = 0, row_at = len - 1;
        for (int q = 0; q < g.cp; q++) {
            const SeqRuns held = cp_runs(window, g.cp, q);
            for (int i = 0; i < held.total(); i++)
                if (runs_position(held, i) == len - 1) owner = q, row_at = i;
        }
        if (m.stage.last() && g.cp_rank == owner) {
            Tensor r = m.flight[0].logits.slice((int64_t)row_at * V_local, V_local);
            row = tensor_to_host_f32(r);
            if (tp > 1)
                MPI_CHECK(MPI_Allgather(row.data(), V_local, MPI_FLOAT, all.data(), V_local, MPI_FLOAT, m.grid->tp_comm.mpi));
            else
                all = row;
        }
        if (g.cp > 1 && m.stage.last())
            MPI_CHECK(MPI_Bcast(all.data(), (int)all.size(), MPI_FLOAT, owner, g.cp_comm.mpi));
        if (m.grid->pp > 1)
            MPI_CHECK(MPI_Bcast(all.data(), (int)all.size(), MPI_FLOAT, m.stage.head_rank(), m.grid->pp_comm.mpi));
        gpt_release_activations(m);
        tokens.push_back(temperature > 0 ? sample_token(all, cfg.vocab, temperature, top_k, rng) : greedy_token(all, cfg.vocab));
        if (on_token) on_token(tokens.back());
    }
    m.dropout = saved_dropout;
}
