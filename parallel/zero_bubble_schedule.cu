// zero_bubble_schedule.cu — ZB-H1, ZB-H2 and ZB-V as units of ops, and the hook that hands them to
// pipeline_schedule.cu (see the header).
#include "zero_bubble_schedule.h"

#include <algorithm>

std::string zero_bubble_problem(PipeSchedule s, int m) {
    const int want = s == PipeSchedule::ZeroBubbleV ? 2 : 1;
    if (m == want) return "";
    return std::string("the ") + pipe_schedule_name(s) + " schedule runs " + (want == 2 ? "two model chunks" : "one model chunk") +
           " per stage, not " + std::to_string(m);
}

int zero_bubble_weight_lag(PipeSchedule s, int p, int rank) {
    (void)p;
    return s == PipeSchedule::ZeroBubbleH2 ? 2 * rank : rank;
}

int zero_bubble_warmup(PipeSchedule s, int p, int rank, int M) {
    if (s == PipeSchedule::ZeroBubbleH1) return std::min(p - rank - 1, M);
    if (s == PipeSchedule::ZeroBubbleH2) return std::min(2 * (p - rank - 1), M);  // the first stage: 2p − 1 in flight
    // ZB-V: chunk 0's first forwards, then r pairs, then the first forward of chunk 1 before its first B.
    return std::min(std::min(2 * (p - rank) - 1, M) + std::min(rank + 1, M) + std::min(rank, M - std::min(2 * (p - rank) - 1, M)),
                    2 * M);
}

// ZB-V's order (the header): counters per chunk, each op added while it has one left; each B queues its W, and
// a W runs once more than `lag` are queued.
static std::vector<std::vector<PipeOp>> zero_bubble_v_units(int p, int rank, int M) {
    std::vector<std::vector<PipeOp>> units;
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::vector<PipeOp> queued;  // W's due, oldest first
    const int lag = rank;
    auto F = [&](int c) {
        if (f[c] < M) units.push_back({{PipeOp::Forward, f[c]++, c}});
    };
    auto B = [&](int c) {
        if (b[c] >= f[c]) return;
        units.push_back({{PipeOp::Backward, b[c], c}});
        queued.push_back({PipeOp::WeightGrad, b[c]++, c});
        if ((int)queued.size() > lag) units.push_back({queued.front()}), queued.erase(queued.begin());
    };
    for (int k = 0; k < std::min(2 * (p - rank) - 1, M); k++) F(0);
    for (int k = 0; k < rank; k++) F(1), F(0);
    for (int k = 0; k < p - rank; k++) F(1), B(1);
    while (b[0] < M || b[1] < M) F(0), B(0), F(1), B(1);
    for (const PipeOp& w : queued) units.push_back({w});
    return units;
}

std::vector<std::vector<PipeOp>> zero_bubble_units(PipeSchedule s, int p, int rank, int M, int w) {
    if (s == PipeSchedule::ZeroBubbleV) return zero_bubble_v_units(p, rank, M);
    const int d = zero_bubble_weight_lag(s, p, rank);
    std::vector<std::vector<PipeOp>> units;
    std::vector<PipeOp> due;  // W's that lead the next unit (run while its exchange is in flight)
    int next_w = 0;           // the next micro-batch whose W is due (W's run in micro-batch order)
    auto unit = [&](std::vector<PipeOp> ops) {
        ops.insert(ops.begin(), due.begin(), due.end());
        due.clear();
        units.push_back(ops);
    };
    for (int k = 0; k < w; k++) unit({{PipeOp::Forward, k, 0}});  // warm-up
    for (int k = 0; k < M - w; k++) {                             // steady state: F, B, then a W d behind
        if (s == PipeSchedule::ZeroBubbleH2) {  // (F, B) in one unit: see the header
            unit({{PipeOp::Forward, w + k, 0}, {PipeOp::Backward, k, 0}});
        } else {
            unit({{PipeOp::Forward, w + k, 0}});
            unit({{PipeOp::Backward, k, 0}});
        }
        if (k - d >= next_w) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    }
    for (int k = std::max(M - w, 0); k < M; k++) {  // cool-down: each B, then the next W
        unit({{PipeOp::Backward, k, 0}});
        if (next_w <= k) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    }
    while (next_w < M) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    if (!due.empty()) units.push_back(due);  // the W's after the last B
    return units;
}

ZeroBubblePeak zero_bubble_peak(const std::vector<PipeOp>& ops, int m) {
    ZeroBubblePeak now, most;
    now.saved_per_chunk.assign((size_t)std::max(m, 1), 0);
    most.saved_per_chunk = now.saved_per_chunk;
    for (const PipeOp& op : ops) {
        int& chunk = now.saved_per_chunk[(size_t)op.chunk];
        if (op.kind == PipeOp::Forward) now.saved++, chunk++;
        if (op.kind == PipeOp::Backward) now.saved--, chunk--, now.pending++;
        if (op.kind == PipeOp::WeightGrad) now.pending--;
        now.held = now.saved + now.pending;
        if (now.held > most.held) most = now;
    }
    return most;
}

// The hook through which pipeline_schedule.cu hands these schedules over (pipeline_schedule.h). A constant
// initialized from function addresses: no code runs to set it, and the linker takes this file wherever
// pipeline_schedule.cu is linked, since that refers to it.
static std::string problem(PipeSchedule s, int, int, int m) { return zero_bubble_problem(s, m); }
static int warmup(PipeSchedule s, int p, int rank, int M, int) { return zero_bubble_warmup(s, p, rank, M); }
static std::vector<std::vector<PipeOp>> units(PipeSchedule s, int p, int rank, int M, int, int w) {
    return zero_bubble_units(s, p, rank, M, w);
}
static int virtual_stage(PipeSchedule s, int p, int rank, int chunk) {
    return pipe_virtual_stage(p, rank, chunk, pipe_v_shape(s));
}
static int rank_of(PipeSchedule s, int p, int v) { return pipe_rank_of(p, v, pipe_v_shape(s)); }

const PipeScheduleExtension pipe_schedule_extension = {problem, warmup, units, virtual_stage, rank_of};
