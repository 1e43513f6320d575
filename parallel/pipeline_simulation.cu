// pipeline_simulation.cu — a schedule timed by its dependencies (see the header).
#include "pipeline_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include "zero_bubble_schedule.h"

using Duration = std::function<double(int, int, const PipeOp&)>;  // (step, stage, op)
static PipeSimulation simulate(PipeSchedule s, int p, int M, int m, const Duration& duration, bool post_validation,
                               const MessageLatency& latency, int steps, const std::function<double(int, int)>& between = nullptr);

PipeSimulation pipe_simulate(PipeSchedule s, int p, int M, int m, double tf, double tb, double tw, bool post_validation,
                             double latency) {
    const double t_of[3] = {tf, is_zero_bubble(s) ? tb : tb + tw, tw};
    return simulate(s, p, M, m, [&](int, int, const PipeOp& op) { return t_of[op.kind]; }, post_validation, latency,
                    post_validation ? 12 : 1);
}

PipeSimulation pipe_replay(PipeSchedule s, int p, int M, int m, const std::function<double(int, const PipeOp&)>& duration,
                           const MessageLatency& latency) {
    return simulate(s, p, M, m, [&](int, int r, const PipeOp& op) { return duration(r, op); }, false, latency, 1);
}

PipeSimulation pipe_replay_steps(PipeSchedule s, int p, int M, int m, int steps, const Duration& duration, const MessageLatency& latency,
                                 const std::function<double(int, int)>& between) {
    return simulate(s, p, M, m, duration, true, latency, steps, between);
}

static PipeSimulation simulate(PipeSchedule s, int p, int M, int m, const Duration& duration, bool post_validation,
                               const MessageLatency& latency, int steps, const std::function<double(int, int)>& between) {
    PipeSimulation out;
    const bool v_shape = pipe_v_shape(s);
    const int P = p * m;
    std::vector<std::vector<PipeOp>> ops((size_t)p);
    size_t total = 0;
    for (int r = 0; r < p; r++) total += (ops[(size_t)r] = pipe_schedule(s, p, r, M, m)).size();
    std::vector<double> busy((size_t)p, 0.0);  // (of the last step: in a simulation every step is the same)
    for (int r = 0; r < p; r++)
        for (const PipeOp& op : ops[(size_t)r]) busy[(size_t)r] += duration(steps - 1, r, op);
    out.busy = busy[0];
    // Post-validated steps repeat: the steady period is measured over the last ones (the first few fill up).
    const int from = post_validation ? std::min(6, steps / 2) : 0;
    std::vector<double> free_at((size_t)p, 0.0);
    std::vector<std::vector<double>> first((size_t)steps, std::vector<double>((size_t)p, 0.0)), last = first;
    for (int k = 0; k < steps; k++) {
        // end[(kind, v, j)]: when that op ended in this step
        std::map<std::tuple<int, int, int>, double> end;
        std::vector<size_t> next((size_t)p, 0);
        std::vector<std::vector<SimulatedOp>> done((size_t)p);
        size_t placed = 0;
        while (placed < total) {
            const size_t before = placed;
            for (int r = 0; r < p; r++) {
                while (next[(size_t)r] < ops[(size_t)r].size()) {
                    const PipeOp& op = ops[(size_t)r][next[(size_t)r]];
                    const int v = pipe_virtual_stage(p, r, op.chunk, v_shape);
                    double input = 0;
                    if (op.kind != PipeOp::WeightGrad && (op.kind == PipeOp::Forward ? v > 0 : v < P - 1)) {
                        const int from_v = op.kind == PipeOp::Forward ? v - 1 : v + 1;
                        auto it = end.find({op.kind, from_v, op.microbatch});
                        if (it == end.end()) break;  // wait for another stage
                        // (how long the stage has waited when the message leaves: whether it still spins)
                        input = it->second + (pipe_rank_of(p, from_v, v_shape) == r ? 0 : latency(it->second - free_at[(size_t)r]));
                    }
                    const double t0 = std::max(free_at[(size_t)r], input), t1 = t0 + duration(k, r, op);
                    end[{op.kind, v, op.microbatch}] = t1;
                    done[(size_t)r].push_back(SimulatedOp{op, t0, t1});
                    free_at[(size_t)r] = t1;
                    next[(size_t)r]++;
                    placed++;
                }
            }
            if (placed == before) {
                out.deadlock = true;
                return out;
            }
        }
        for (int r = 0; r < p; r++) {
            first[(size_t)k][(size_t)r] = done[(size_t)r].front().t0;
            last[(size_t)k][(size_t)r] = done[(size_t)r].back().t1;
            if (between) free_at[(size_t)r] += between(k, r);
        }
        if (k == std::max(steps - 2, 0)) out.stages = done;
        if (post_validation && k == steps - 1) out.next = done;
        if (!post_validation) break;
    }
    out.first = first;
    out.idle.assign((size_t)p, 0.0);
    if (!post_validation) {
        double lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < p; r++) lo = std::min(lo, first[0][(size_t)r]), hi = std::max(hi, last[0][(size_t)r]);
        out.step = hi - lo;
        for (int r = 0; r < p; r++) out.idle[(size_t)r] = out.step - busy[(size_t)r];
        return out;
    }
    // Steady state: every stage's period is the same once the steps have settled; take stage 0's and each one's.
    double period = 0;
    for (int r = 0; r < p && steps > 1; r++) {
        const double mine = (first[(size_t)steps - 1][(size_t)r] - first[(size_t)from][(size_t)r]) / std::max(steps - 1 - from, 1);
        out.idle[(size_t)r] = mine - busy[(size_t)r];
        period = std::max(period, mine);
    }
    out.step = period;
    return out;
}
