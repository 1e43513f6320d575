// pipeline_simulation.cu — a schedule timed by its dependencies (see the header).
#include "pipeline_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include "zero_bubble_schedule.h"

using Duration = std::function<double(int, int, const PipeOp&)>;  // (step, stage, op)
// Each stage's idle time from when it started and ended its steps, and the step: synchronized (post_validation
// false), one step from the first op's start on any stage to the last op's end on any; post-validated, each
// stage's steady period over the steps from `from` on (the first ones fill up), less its busy time.
static void settle_idle(PipeSimulation& out, const std::vector<std::vector<double>>& first,
                        const std::vector<std::vector<double>>& last, const std::vector<double>& busy, int p, int steps,
                        int from, bool post_validation) {
    out.first = first;
    out.idle.assign((size_t)p, 0.0);
    if (!post_validation) {
        double lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < p; r++) lo = std::min(lo, first[0][(size_t)r]), hi = std::max(hi, last[0][(size_t)r]);
        out.step = hi - lo;
        for (int r = 0; r < p; r++) out.idle[(size_t)r] = out.step - busy[(size_t)r];
        return;
    }
    double period = 0;
    for (int r = 0; r < p && steps > 1; r++) {
        const double mine = (first[(size_t)steps - 1][(size_t)r] - first[(size_t)from][(size_t)r]) / std::max(steps - 1 - from, 1);
        out.idle[(size_t)r] = mine - busy[(size_t)r];
        period = std::max(period, mine);
    }
    out.step = period;
}

static PipeSimulation simulate(PipeSchedule s, int p, int M, int m, const Duration& duration, bool post_validation,
                               double latency, int steps);

PipeSimulation pipe_simulate(PipeSchedule s, int p, int M, int m, double tf, double tb, double tw, bool post_validation,
                             double latency) {
    const double t_of[3] = {tf, is_zero_bubble(s) ? tb : tb + tw, tw};
    return simulate(s, p, M, m, [&](int, int, const PipeOp& op) { return t_of[op.kind]; }, post_validation, latency,
                    post_validation ? 12 : 1);
}

static PipeSimulation simulate(PipeSchedule s, int p, int M, int m, const Duration& duration, bool post_validation,
                               double latency, int steps) {
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
                        input = it->second + (pipe_rank_of(p, from_v, v_shape) == r ? 0 : latency);
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
        }
        if (k == std::max(steps - 2, 0)) out.stages = done;
        if (post_validation && k == steps - 1) out.next = done;
        if (!post_validation) break;
    }
    settle_idle(out, first, last, busy, p, steps, from, post_validation);
    return out;
}

// ---- a recorded step, replayed ----------------------------------------------------------------------------------
bool PipeStageRecord::operator==(const PipeStageRecord& o) const {
    auto same = [](const std::vector<PipeExchangeEvent>& a, const std::vector<PipeExchangeEvent>& b) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); i++)
            if (a[i].kind != b[i].kind || a[i].peer != b[i].peer || a[i].tag != b[i].tag) return false;
        return true;
    };
    if (ops.size() != o.ops.size() || !same(after, o.after)) return false;
    for (size_t i = 0; i < ops.size(); i++)
        if (!(ops[i].op == o.ops[i].op) || !same(ops[i].before, o.ops[i].before)) return false;
    return true;
}

namespace {
// One instruction of a stage's replayed program: an exchange event, or an op (op_index >= 0) of step `step`.
struct Instruction {
    int step = 0;
    int op_index = -1;
    PipeExchangeEvent event{PipeExchangeEvent::PostReceive, -1, 0};
};
// A message's name in the replay: (from, to, tag, step, n-th of that name); also (side, from, to, tag, step) below.
using MessageKey = std::tuple<int, int, int, int, int>;
const char* kind_words(PipeExchangeEvent::Kind k) {
    return k == PipeExchangeEvent::WaitReceive ? "the receive of" : "the send of";
}
}  // namespace

PipeSimulation pipe_replay_record(const std::vector<std::vector<PipeStageRecord>>& records,
                                  const std::function<double(int, const PipeOp&)>& duration, bool post_validation) {
    PipeSimulation out;
    const int steps = (int)records.size(), p = steps > 0 ? (int)records[0].size() : 0;
    if (steps == 0 || p == 0 || (!post_validation && steps != 1)) {
        out.deadlock = true;
        out.problem = "pipe_replay_record: give one step (synchronized) or several (post-validation), each with every stage";
        return out;
    }
    // Each stage's program: its steps' events and ops in order.
    std::vector<std::vector<Instruction>> prog((size_t)p);
    for (int k = 0; k < steps; k++)
        for (int r = 0; r < p; r++) {
            const PipeStageRecord& rec = records[(size_t)k][(size_t)r];
            for (size_t i = 0; i < rec.ops.size(); i++) {
                for (const PipeExchangeEvent& e : rec.ops[i].before) prog[(size_t)r].push_back(Instruction{k, -1, e});
                prog[(size_t)r].push_back(Instruction{k, (int)i, {}});
            }
            for (const PipeExchangeEvent& e : rec.after) prog[(size_t)r].push_back(Instruction{k, -1, e});
        }
    std::map<MessageKey, double> sent, receive_posted;       // when each message's send / receive was posted
    // How many events of one kind (0 send posted, 1 receive posted, 2 receive waited for, 3 send waited for) a name
    // has had so far in a step: the next one is its n-th message. (side, from, to, tag, step)
    std::map<MessageKey, int> count;
    auto nth = [&](int side, int from, int to, int tag, int step) { return count[MessageKey{side, from, to, tag, step}]; };
    auto bump = [&](int side, int from, int to, int tag, int step) { count[MessageKey{side, from, to, tag, step}]++; };
    std::vector<size_t> pc((size_t)p, 0);
    std::vector<double> t((size_t)p, 0.0);
    std::vector<std::vector<double>> first((size_t)steps, std::vector<double>((size_t)p, INFINITY)), last = first;
    std::vector<std::vector<std::vector<SimulatedOp>>> done((size_t)steps, std::vector<std::vector<SimulatedOp>>((size_t)p));
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++) {
            for (; pc[(size_t)r] < prog[(size_t)r].size(); pc[(size_t)r]++) {
                const Instruction& in = prog[(size_t)r][pc[(size_t)r]];
                const PipeExchangeEvent& e = in.event;
                double& now = t[(size_t)r];
                if (in.op_index >= 0) {
                    const PipeOp& op = records[(size_t)in.step][(size_t)r].ops[(size_t)in.op_index].op;
                    const double t0 = now;
                    now += duration(r, op);
                    done[(size_t)in.step][(size_t)r].push_back(SimulatedOp{op, t0, now});
                    first[(size_t)in.step][(size_t)r] = std::min(first[(size_t)in.step][(size_t)r], t0);
                    last[(size_t)in.step][(size_t)r] = now;
                } else if (e.kind == PipeExchangeEvent::PostSend) {
                    sent[MessageKey{r, e.peer, e.tag, in.step, nth(0, r, e.peer, e.tag, in.step)}] = now;
                    bump(0, r, e.peer, e.tag, in.step);
                } else if (e.kind == PipeExchangeEvent::PostReceive) {
                    receive_posted[MessageKey{e.peer, r, e.tag, in.step, nth(1, e.peer, r, e.tag, in.step)}] = now;
                    bump(1, e.peer, r, e.tag, in.step);
                } else {
                    // A wait ends once both sides are posted (the message itself takes no time).
                    const bool receive = e.kind == PipeExchangeEvent::WaitReceive;
                    const int from = receive ? e.peer : r, to = receive ? r : e.peer, side = receive ? 2 : 3;
                    const MessageKey key{from, to, e.tag, in.step, nth(side, from, to, e.tag, in.step)};
                    auto s = sent.find(key), q = receive_posted.find(key);
                    if (s == sent.end() || q == receive_posted.end()) break;  // not yet: another stage first
                    now = std::max(now, std::max(s->second, q->second));
                    bump(side, from, to, e.tag, in.step);
                }
                progress = true;
            }
        }
    }
    for (int r = 0; r < p; r++) {
        if (pc[(size_t)r] == prog[(size_t)r].size()) continue;
        const Instruction& in = prog[(size_t)r][pc[(size_t)r]];
        out.deadlock = true;
        out.problem += (out.problem.empty() ? "" : "; ") + std::string("stage ") + std::to_string(r) + " waits in step " +
                       std::to_string(in.step) + " for " + kind_words(in.event.kind) + " tag " + std::to_string(in.event.tag) +
                       (in.event.kind == PipeExchangeEvent::WaitReceive ? " from" : " to") + " stage " + std::to_string(in.event.peer) +
                       ", which the other side never posts";
    }
    if (out.deadlock) return out;
    std::vector<double> busy((size_t)p, 0.0);  // of the last step
    for (int r = 0; r < p; r++)
        for (const PipeRecordedOp& o : records.back()[(size_t)r].ops) busy[(size_t)r] += duration(r, o.op);
    out.busy = busy[0];
    out.stages = done[(size_t)std::max(steps - 2, 0)];
    if (post_validation) out.next = done.back();
    settle_idle(out, first, last, busy, p, steps, std::min(6, steps / 2), post_validation);  // (as simulate)
    return out;
}
