// test_hellaswag.cu — model/hellaswag.cu: the multiple-choice accuracy the trainer reports (--hellaswag)
// equals a brute-force computation from per-token losses, at any layout.
//
// Rank 0 scores every (example, candidate) alone on a single-rank model (one row per forward pass): the mean
// of the per-token losses over the completion's target positions, the lowest wins. The labels are then set
// so that the answer is right for the even examples and wrong for the odd ones (examples whose two best
// candidates are closer than 1e-3 are left out, so that float reassociation cannot flip them). The batched,
// distributed evaluation at --tp T (and dp = world / T), through an eval file on disk, must count exactly
// the even examples.
//   test_hellaswag --tp T [--sp]
//   test_hellaswag --write FILE VOCAB T   write a small eval file (for the trainer's CLI test)
#include <cstring>
#include "model_fixture.h"
#include "../../model/hellaswag.h"

static std::vector<EvalExample> random_examples(int n, int vocab, int T, std::mt19937& rng) {
    std::vector<EvalExample> ex((size_t)n);
    for (int i = 0; i < n; i++) {
        ex[i].index = i;
        ex[i].context.resize(1 + rng() % (T / 2));
        for (int& t : ex[i].context) t = (int)(rng() % vocab);
        for (auto& c : ex[i].completions) {
            c.resize(1 + rng() % (T / 2 - 1));
            for (int& t : c) t = (int)(rng() % vocab);
        }
    }
    return ex;
}

// Mean loss of each candidate of example e, one forward pass per candidate (B = 1), without dropout (as the
// evaluation runs).
static std::vector<float> brute_force_means(GPT& m, const EvalExample& e, int T) {
    std::vector<float> means;
    const float dropout = m.dropout;
    m.dropout = 0.f;
    for (int c = 0; c < kEvalCompletions; c++) {
        std::vector<int32_t> in(T, 0), tg(T, 0);
        const size_t L = e.context.size(), K = e.completions[c].size();
        for (size_t t = 0; t < L; t++) in[t] = e.context[t];
        for (size_t t = 0; t < K; t++) in[L + t] = e.completions[c][t], tg[L + t - 1] = e.completions[c][t];
        std::vector<float> losses;
        gpt_forward(m, in.data(), tg.data(), 1, T, false, &losses);
        float sum = 0;
        for (size_t t = 0; t < K; t++) sum += losses[L - 1 + t];
        means.push_back(sum / (float)K);
    }
    m.dropout = dropout;
    return means;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const int T = 16;
    std::mt19937 rng(20240522);
    if (argc == 5 && !strcmp(argv[1], "--write")) {
        if (rank == 0) {
            std::vector<EvalExample> ex = random_examples(10, atoi(argv[3]), atoi(argv[4]), rng);
            for (auto& e : ex) e.label = (int)(rng() % 4);
            write_eval_file(argv[2], ex);
            printf("wrote %zu examples to %s\n", ex.size(), argv[2]);
        }
        MPI_Finalize();
        return 0;
    }
    ModelSpec par;
    par.cfg = tiny_config();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) par.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) par.sp = true;
    }
    const std::string path = "/tmp/mm_test_hellaswag_" + std::to_string(world) + "_" + std::to_string(par.tp) + ".bin";
    int kept = 0, want = 0;
    if (rank == 0) {
        ModelSpec single = par;
        single.tp = 1;
        single.sp = false;
        ModelHarness ref(single, MPI_COMM_SELF);
        std::vector<EvalExample> all = random_examples(30, par.cfg.vocab, T, rng), ex;
        for (EvalExample e : all) {
            std::vector<float> mean = brute_force_means(ref.model, e, T);
            int best = 0;
            for (int c = 1; c < 4; c++)
                if (mean[c] < mean[best]) best = c;
            float gap = 1e30f;
            for (int c = 0; c < 4; c++)
                if (c != best) gap = std::min(gap, mean[c] - mean[best]);
            if (gap < 1e-3f) continue;
            e.index = (int)ex.size();
            e.label = e.index % 2 == 0 ? best : (best + 1) % 4;
            want += e.index % 2 == 0;
            ex.push_back(e);
        }
        kept = (int)ex.size();
        write_eval_file(path, ex);
        // The batched evaluation on the single-rank model agrees with the brute force, at several batch sizes.
        for (int per : {1, 2, 5}) {
            EvalScore s = hellaswag_evaluate(ref.model, ex, T, per);
            CHECK(s.correct == want && s.total == kept, "single rank, %d examples per forward: %d/%d, brute force %d/%d", per,
                  s.correct, s.total, want, kept);
        }
    }
    MPI_Bcast(&kept, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&want, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<EvalExample> ex;
    std::string err;
    CHECK(read_eval_file(path, ex, err), "%s", err.c_str());
    CHECK((int)ex.size() == kept && kept >= 15, "%zu examples read, %d kept of 30", ex.size(), kept);
    {
        ModelHarness h(par, MPI_COMM_WORLD);
        EvalScore s = hellaswag_evaluate(h.model, ex, T, 2);
        CHECK(s.correct == want && s.total == kept, "tp %d dp %d%s: %d/%d, brute force %d/%d", par.tp, world / par.tp,
              par.sp ? " sp" : "", s.correct, s.total, want, kept);
        if (rank == 0)
            printf("tp %d dp %d%s: accuracy %d/%d = brute force from per-token losses %d/%d\n", par.tp, world / par.tp,
                   par.sp ? " sp" : "", s.correct, s.total, want, kept);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) remove(path.c_str());
    int failures = g_failures, all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int rc = rank == 0 ? test_finish("test_hellaswag") : (g_failures ? 1 : 0);
    MPI_Finalize();
    return all ? 1 : rc;
}
