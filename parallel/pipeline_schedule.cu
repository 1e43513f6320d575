// pipeline_schedule.cu — AFAB, 1F1B and interleaved 1F1B as lists of ops (see pipeline_schedule.h).
#include "pipeline_schedule.h"

#include <algorithm>

// A schedule after the paper's three (schedule_kinds.h lists them first): handed over to pipe_schedule_extension.
static bool beyond_paper(PipeSchedule s) { return s > PipeSchedule::Interleaved; }

std::string pipe_schedule_problem(PipeSchedule s, int p, int M, int m) {
    if (p < 1 || M < 1 || m < 1)
        return "pipeline size " + std::to_string(p) + ", " + std::to_string(M) + " micro-batches and " +
               std::to_string(m) + " model chunks must all be at least 1";
    if (beyond_paper(s)) return pipe_schedule_extension.problem(s, p, M, m);
    if (s != PipeSchedule::Interleaved && m != 1)
        return std::string("the ") + pipe_schedule_name(s) + " schedule runs one model chunk per stage, not " +
               std::to_string(m);
    if (s == PipeSchedule::Interleaved) {
        if (m < 2)
            return "the interleaved schedule needs at least 2 model chunks per stage (got " + std::to_string(m) + ")";
        if (M % p != 0)
            return "the interleaved schedule takes micro-batches in groups of the pipeline size: " + std::to_string(M) +
                   " micro-batches are not a multiple of --pp " + std::to_string(p);
    }
    return "";
}

int pipe_warmup(PipeSchedule s, int p, int rank, int M, int m) {
    if (beyond_paper(s)) return pipe_schedule_extension.warmup(s, p, rank, M, m);
    switch (s) {
        case PipeSchedule::AFAB: return M;
        case PipeSchedule::OneFOneB: return std::min(p - rank - 1, M);
        default: {
            // Rank r must have run its chunk-0 forwards of the first p micro-batches and enough of the later
            // chunks that the last virtual stage's first backward can reach it: 2 per stage below the last,
            // plus p per extra chunk. With M == p there is nothing to alternate with: all forwards first.
            const int total = M * m;
            if (M == p) return total;
            return std::min((p - rank - 1) * 2 + (m - 1) * p, total);
        }
    }
}

// Interleaved order of the k-th forward (and backward) of a rank: micro-batches in groups of p, each group
// through every chunk in turn (backward: the chunks in reverse).
static PipeOp interleaved_op(PipeOp::Kind kind, int k, int p, int m) {
    const int group = k / (p * m), in_group = k % (p * m);
    int chunk = in_group / p;
    if (kind == PipeOp::Backward) chunk = m - 1 - chunk;
    return PipeOp{kind, group * p + in_group % p, chunk};
}

std::vector<std::vector<PipeOp>> pipe_units(PipeSchedule s, int p, int rank, int M, int m, int warmup) {
    std::vector<std::vector<PipeOp>> units;
    const int total = M * m;
    if (warmup < 0) warmup = pipe_warmup(s, p, rank, M, m);
    if (beyond_paper(s)) return pipe_schedule_extension.units(s, p, rank, M, m, warmup);
    auto op = [&](PipeOp::Kind kind, int k) {
        return s == PipeSchedule::Interleaved ? interleaved_op(kind, k, p, m) : PipeOp{kind, k, 0};
    };
    for (int k = 0; k < warmup; k++) units.push_back({op(PipeOp::Forward, k)});  // warm-up
    for (int k = 0; k < total - warmup; k++) {  // steady state: one forward, one backward
        if (s == PipeSchedule::Interleaved) units.push_back({op(PipeOp::Forward, warmup + k), op(PipeOp::Backward, k)});
        else units.push_back({op(PipeOp::Forward, warmup + k)}), units.push_back({op(PipeOp::Backward, k)});
    }
    for (int k = total - warmup; k < total; k++) units.push_back({op(PipeOp::Backward, k)});  // cool-down
    return units;
}

std::vector<PipeOp> pipe_schedule(PipeSchedule s, int p, int rank, int M, int m) {
    std::vector<PipeOp> ops;
    for (const std::vector<PipeOp>& unit : pipe_units(s, p, rank, M, m))
        ops.insert(ops.end(), unit.begin(), unit.end());
    return ops;
}

// Chunk c of rank r is virtual stage c·p + r, and virtual stage v is on rank v mod p (the header's terms).
static int virtual_stage(PipeSchedule s, int p, int rank, int chunk) {
    return beyond_paper(s) ? pipe_schedule_extension.virtual_stage(s, p, rank, chunk) : chunk * p + rank;
}
static int rank_of(PipeSchedule s, int p, int v) {
    return beyond_paper(s) ? pipe_schedule_extension.rank_of(s, p, v) : v % p;
}

bool pipe_op_receives(PipeSchedule s, const PipeOp& op, int p, int rank, int m, PipeMessage* msg) {
    const int v = virtual_stage(s, p, rank, op.chunk), P = p * m;
    if (op.kind != PipeOp::Forward && op.kind != PipeOp::Backward) return false;  // no other kind exchanges anything
    if (op.kind == PipeOp::Forward) {
        if (v == 0) return false;
        *msg = PipeMessage{false, op.microbatch, v - 1, rank_of(s, p, v - 1)};
    } else {
        if (v == P - 1) return false;
        *msg = PipeMessage{true, op.microbatch, v, rank_of(s, p, v + 1)};
    }
    return true;
}

bool pipe_op_sends(PipeSchedule s, const PipeOp& op, int p, int rank, int m, PipeMessage* msg) {
    const int v = virtual_stage(s, p, rank, op.chunk), P = p * m;
    if (op.kind != PipeOp::Forward && op.kind != PipeOp::Backward) return false;
    if (op.kind == PipeOp::Forward) {
        if (v == P - 1) return false;
        *msg = PipeMessage{false, op.microbatch, v, rank_of(s, p, v + 1)};
    } else {
        if (v == 0) return false;
        *msg = PipeMessage{true, op.microbatch, v - 1, rank_of(s, p, v - 1)};
    }
    return true;
}

int pipe_message_tag(const PipeMessage& msg, int p, int m) {
    return ((msg.microbatch * p * m + msg.boundary) * 2 + (msg.gradient ? 1 : 0)) % 32768;
}

int pipe_peak_in_flight(const std::vector<PipeOp>& ops) {
    int live = 0, peak = 0;
    for (const PipeOp& op : ops) {
        live += op.kind == PipeOp::Forward ? 1 : op.kind == PipeOp::Backward ? -1 : 0;  // another kind: neither
        peak = std::max(peak, live);
    }
    return peak;
}

std::vector<int> pipe_in_flight_at_peak(const std::vector<PipeOp>& ops, int m) {
    const int peak = pipe_peak_in_flight(ops);
    std::vector<int> per_chunk((size_t)std::max(m, 1), 0);
    int live = 0;
    for (const PipeOp& op : ops) {
        const int d = op.kind == PipeOp::Forward ? 1 : op.kind == PipeOp::Backward ? -1 : 0;
        live += d;
        per_chunk[(size_t)op.chunk] += d;
        if (live == peak) break;
    }
    return per_chunk;
}

double pipe_ideal_bubble(int p, int M, int m) { return (double)(p - 1) / ((double)m * M); }
