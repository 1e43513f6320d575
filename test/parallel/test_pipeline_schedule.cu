// test_pipeline_schedule.cu — parallel/pipeline_schedule.cu, every rank simulated: for p in 1..4, m in
// {1, 2, 3}, M in {1, p−1, p, 2p+1} (multiples of p when interleaved): every (micro-batch, chunk) forward
// and backward runs once on its rank, each backward after its forward, backwards of a chunk in micro-batch
// order; the sends and receives the ops imply match across ranks and complete (no deadlock); the warm-up
// counts and the first stage's peak in-flight count are those of pipeline_schedule.h.
#include <map>
#include <set>
#include <tuple>
#include "../test_util.h"
#include "../../parallel/pipeline_schedule.h"

// Run all ranks' op lists as the trainer runs them: a forward of virtual stage v > 0 first receives the
// activation from stage v−1 (blocking), a backward of v < P−1 first receives the gradient from v+1; sends
// do not block (Isend). Returns "" when every op ran, else what is stuck.
static std::string simulate(const std::vector<std::vector<PipeOp>>& ops, int p, int M, int m) {
    const int P = p * m;
    std::set<std::tuple<int, int, int>> sent;  // (kind, micro-batch, receiving virtual stage)
    std::vector<size_t> pc(p, 0);
    std::vector<std::set<std::pair<int, int>>> done_fwd(p);
    size_t left = 0;
    for (auto& o : ops) left += o.size();
    while (left > 0) {
        bool progress = false;
        for (int r = 0; r < p; r++) {
            if (pc[r] == ops[r].size()) continue;
            const PipeOp& op = ops[r][pc[r]];
            const int v = op.chunk * p + r;
            if (op.kind == PipeOp::Forward) {
                if (v > 0 && !sent.count({0, op.microbatch, v})) continue;  // waits for the activation
                if (v + 1 < P) sent.insert({0, op.microbatch, v + 1});
                done_fwd[r].insert({op.microbatch, op.chunk});
            } else {
                if (!done_fwd[r].count({op.microbatch, op.chunk}))
                    return "rank " + std::to_string(r) + " runs a backward before its forward";
                if (v + 1 < P && !sent.count({1, op.microbatch, v})) continue;  // waits for the gradient
                if (v > 0) sent.insert({1, op.microbatch, v - 1});
            }
            pc[r]++, left--, progress = true;
        }
        if (!progress) {
            std::string s = "deadlock:";
            for (int r = 0; r < p; r++)
                if (pc[r] < ops[r].size())
                    s += " rank " + std::to_string(r) + " waits at op " + std::to_string(pc[r]) + " (" +
                         (ops[r][pc[r]].kind == PipeOp::Forward ? "F" : "B") + std::to_string(ops[r][pc[r]].microbatch) +
                         "." + std::to_string(ops[r][pc[r]].chunk) + ")";
            return s;
        }
    }
    (void)M;
    return "";
}

static void check_layout(PipeSchedule s, int p, int M, int m) {
    char what[96];
    snprintf(what, sizeof what, "%s p=%d M=%d m=%d", pipe_schedule_name(s), p, M, m);
    std::vector<std::vector<PipeOp>> ops(p);
    for (int r = 0; r < p; r++) ops[r] = pipe_schedule(s, p, r, M, m);
    for (int r = 0; r < p; r++) {
        // Each (micro-batch, chunk) forward and backward exactly once.
        std::map<std::tuple<int, int, int>, int> count;
        for (const PipeOp& op : ops[r]) count[{op.kind, op.microbatch, op.chunk}]++;
        bool once = (int)ops[r].size() == 2 * M * m && (int)count.size() == 2 * M * m;
        for (auto& [k, n] : count)
            once &= n == 1 && std::get<1>(k) >= 0 && std::get<1>(k) < M && std::get<2>(k) >= 0 && std::get<2>(k) < m;
        CHECK(once, "%s rank %d: every forward and backward must run once", what, r);
        // Backwards of each chunk in micro-batch order (FIFO): the single-rank accumulation order.
        std::vector<int> last(m, -1);
        bool fifo = true;
        for (const PipeOp& op : ops[r])
            if (op.kind == PipeOp::Backward) fifo &= op.microbatch == last[op.chunk] + 1, last[op.chunk] = op.microbatch;
        CHECK(fifo, "%s rank %d: backwards not in micro-batch order", what, r);
        // Warm-up: forwards before the first backward.
        int warm = 0;
        while (warm < (int)ops[r].size() && ops[r][warm].kind == PipeOp::Forward) warm++;
        int want = s == PipeSchedule::AFAB ? M : s == PipeSchedule::OneFOneB ? std::min(p - r - 1, M) : -1;
        if (s == PipeSchedule::Interleaved)
            want = M == p ? M * m : std::min((p - r - 1) * 2 + (m - 1) * p, M * m);
        // A warm-up that ends with the steady state's first forward: 1F1B's steady state starts with F.
        const int counted = pipe_warmup(s, p, r, M, m);
        CHECK(counted == want, "%s rank %d: warm-up %d, expected %d", what, r, counted, want);
        CHECK(warm == (counted < M * m ? counted + 1 : counted), "%s rank %d: %d forwards before the first backward",
              what, r, warm);
    }
    std::string stuck = simulate(ops, p, M, m);
    CHECK(stuck.empty(), "%s: %s", what, stuck.c_str());
    // The first stage's peak: 1F1B holds min(p, M) micro-batches, AFAB M, interleaved (p−1)·2 + (m−1)·p + 1
    // (micro-batch, chunk) pairs — L·(1 + (p−1)/(p·m)) layers at L/(p·m) layers per chunk.
    const int peak = pipe_peak_in_flight(ops[0]);
    int want_peak = s == PipeSchedule::AFAB ? M : std::min(p, M);
    if (s == PipeSchedule::Interleaved) want_peak = M == p ? M * m : std::min((p - 1) * 2 + (m - 1) * p + 1, M * m);
    CHECK(peak == want_peak, "%s: first stage peak %d in flight, expected %d", what, peak, want_peak);
    if (s == PipeSchedule::Interleaved && M > p) {
        // In layers, with L = p·m·k layers (k per chunk): L·(1 + (p−1)/(p·m)).
        const int k = 3, L = p * m * k;
        CHECK(peak * k == L + (p - 1) * k, "%s: %d layer-micro-batches, expected L(1 + (p-1)/(pm)) = %d", what, peak * k,
              L + (p - 1) * k);
    }
}

int main() {
    int layouts = 0;
    for (int p = 1; p <= 4; p++)
        for (int M : {1, p - 1, p, 2 * p + 1}) {
            if (M < 1) continue;
            check_layout(PipeSchedule::AFAB, p, M, 1);
            check_layout(PipeSchedule::OneFOneB, p, M, 1);
            layouts += 2;
        }
    for (int p = 1; p <= 4; p++)
        for (int m : {2, 3})
            for (int M : {p, 2 * p, 3 * p}) {
                check_layout(PipeSchedule::Interleaved, p, M, m);
                layouts++;
            }
    // The paper's example: p = 2, m = 2, L = 4, M = 4 holds 5 layer-micro-batches on the first stage.
    CHECK(pipe_peak_in_flight(pipe_schedule(PipeSchedule::Interleaved, 2, 0, 4, 2)) == 5, "p=2 m=2 M=4: 5 in flight");
    // Refusals, naming the numbers.
    CHECK(pipe_schedule_problem(PipeSchedule::Interleaved, 2, 3, 2).find("3 micro-batches are not a multiple of --pp 2") !=
              std::string::npos, "%s", pipe_schedule_problem(PipeSchedule::Interleaved, 2, 3, 2).c_str());
    CHECK(!pipe_schedule_problem(PipeSchedule::AFAB, 2, 4, 2).empty(), "AFAB with chunks accepted");
    CHECK(pipe_schedule_problem(PipeSchedule::OneFOneB, 4, 1, 1).empty(), "1F1B with M < p refused");
    CHECK(pipe_ideal_bubble(2, 8, 1) == 1.0 / 8 && pipe_ideal_bubble(4, 8, 2) == 3.0 / 16, "ideal bubble");
    printf("%d layouts simulated\n", layouts);
    return test_finish("test_pipeline_schedule");
}
