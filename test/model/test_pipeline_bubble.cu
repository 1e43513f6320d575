// test_pipeline_bubble.cu — the executor's own bubble, apart from the machine's noise (issue 44): with every
// op's work replaced by a timed wait of a fixed length (--pipeline-op-times, model/pipeline_timeline.h), the
// executor, its exchanges (MPI, --comm mpi-strict by default) and the step's end run for real, and each stage's
// measured idle share must equal the schedule's formula (recompute/formulas.h) at the op times measured in the
// run.
//
//   mpirun -np P test_pipeline_bubble [--times F:B:W] [--steps N] [--schedules a,b,..] [--micro list]
//                                     [--comm mpi|mpi-strict] [--expect-stall]
//
// For each schedule (afab, 1f1b, interleaved with 2 chunks, zb-h1, zb-h2, zb-v) and M in {P, 2P, 4P} (the list
// --micro gives), N + 1 training steps run on a tiny model; the first is left out (its allocations). Each measured
// step of each stage (its idle share, 1 − busy / the step's window, model/pipeline_timeline.h) is compared with the
// formula's model at that step's own op times: a replay of the schedule, communication free
// (parallel/pipeline_simulation.h; at equal op times the closed forms of recompute/formulas.h, test_formulas). The
// closed form at the run's mean op times is printed beside it (where formulas.h gives one: not ZB-V below M = 2P).
// The step nearest its model must be within the tolerance; up to five attempts (the machine's noise hits some
// steps and some attempts, a stall of the executor every step of every attempt).
//
// The tolerance, from quantities measured in this run:
//  - the exchange latency L, two numbers: a stage that waits for a message spins for its first kCommSpinUs
//    (0.5 ms, parallel/comm.h), then sleeps 20 us between polls, and one that has gone to sleep sees its message
//    much later (here 100-200 us against 2-20 us spinning: ZB-H1 at p 4, M 8 waits asleep about ten times on its
//    critical path, which a single L, half of a round trip with one leg asleep and one spinning, put at about half
//    of that: the previous gap of about +0.009 of the step, "one T_W", in every attempt). Each one is half the
//    round trip of one boundary tensor between neighbouring stages through the executor's exchanges, answered at
//    once (spinning) or held as long as a stage waits for one (asleep; synchronous sends, as the strict rules;
//    the median of 20 round trips per pair, the worst pair; again before each schedule and M, the least of up to
//    three where one is above twice the first: a burst of load loosens it for that check only), or, where larger,
//    the 75th percentile of the run's own waits for messages of that kind (the producer's end to the consumer's
//    start: the executor's path around a message, which the round trips measure only in part; a critical path
//    adds up many, most a few us, a few a descheduled rank's ms: a median would miss the spread, a mean the
//    outliers would set);
//  - the timer's resolution e: how far a timed wait of 1 ms overshoots (the median of 40 waits on each rank, all
//    ranks waiting at once, the worst rank);
//  - the executor's gap o between two ops that wait for nothing (the first stage's forwards under AFAB).
// Every message on the critical path can arrive L + e late (L asleep where the replay has the stage waiting for it
// longer than kCommSpinUs, else L spinning) and every op start o after the last, so the allowed
// difference is what that does to the schedule itself: the replay with those delays, less the replay without (as
// a share of the step), plus 2e over the step for the window's two ends. A stall of the executor (an op that
// waits for something it does not need) costs whole op times, far above that: --expect-stall runs ZB-H2 with the
// exchanges of before (each waiting for its sends too, layers/test_hooks.h's blocking_p2p), and passes only when
// the first stage is then beyond the tolerance in every step. --post-validation: post-validated steps, each
// stage's period between its steps against the steps replayed without a synchronization between them, each
// stage's own work between its steps (the gradient sync, the tied embedding's sum, the optimizer step and its
// snapshot, the next step's set-up) taken as measured and printed: the formula leaves it out.
#include <sys/resource.h>
#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>
#include "model_fixture.h"
#include "../../model/post_validation.h"
#include "../../layers/trace.h"
#include "../../parallel/pipeline_simulation.h"
#include "../../parallel/point_to_point.h"
#include "../../recompute/formulas.h"

namespace {

double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, (size_t)(q * (double)(v.size() - 1) + 0.5))];
}

// L: what an exchange adds to a message that is waited for, through the executor's own exchanges (exchange_post /
// receive_wait: the same posting, the same waits), as two numbers, for the executor's wait spins for its first
// kCommSpinUs and then sleeps between polls (parallel/comm.h): a stage that has gone to sleep sees its
// message later (here about 100-200 us against 2-20: a ZB-H1 step at p 4 waits asleep some ten times on its
// critical path). Per neighbouring pair, 20 round trips of each kind, the median of half of (round trip − the
// time the two ends held the message), the worst pair:
//  - spinning: each end answers at once, so each waits for the other's message while it still spins;
//  - asleep:   each end holds the message `hold_ms` (a timed wait, longer than the spinning) before it sends it on,
//              so each waits for it asleep, as a stage does while its neighbour computes an op.
// The ranks outside the pair wait asleep meanwhile (a spinning barrier would take the pair's cores).
struct Latency {
    double spinning = 0, asleep = 0;  // us
};
void sleeping_barrier(MPI_Comm comm) {
    MPI_Request q;
    MPI_CHECK(MPI_Ibarrier(comm, &q));
    for (int done = 0; !done;) {
        MPI_CHECK(MPI_Test(&q, &done, MPI_STATUS_IGNORE));
        const timespec pause{0, 200000};
        if (!done) nanosleep(&pause, nullptr);
    }
}
Latency measure_latency(Comm& pp, const Ctx& ctx, size_t bytes, double hold_ms) {
    Tensor buf = tensor_alloc(Device::CPU, DType::U8, (int64_t)std::max(bytes, sizeof(double)));
    Tensor got = tensor_alloc(Device::CPU, DType::U8, buf.n);
    Latency worst;
    for (int a = 0; a + 1 < pp.size; a++) {
        std::vector<double> half[2];  // spinning, asleep
        sleeping_barrier(pp.mpi);
        if (pp.rank == a || pp.rank == a + 1) {
            const int peer = pp.rank == a ? a + 1 : a;
            for (int k = 0; k < 40; k++) {
                const bool asleep = k % 2 == 1;
                if (pp.rank == a) {
                    const double t0 = trace_now_us();
                    timed_wait(ctx, asleep ? hold_ms : 0);
                    const double mine = trace_now_us() - t0;
                    send_later(pp, ctx, buf, peer, 0, "ping");
                    const std::vector<int64_t> id = exchange_post(pp, ctx, {{got, peer, 0, "pong"}}, "latency");
                    receive_wait(pp, ctx, id[0]);
                    double held = 0;
                    memcpy(&held, got.data, sizeof held);
                    half[asleep].push_back((trace_now_us() - t0 - mine - held) / 2);
                } else {
                    const std::vector<int64_t> id = exchange_post(pp, ctx, {{got, peer, 0, "ping"}}, "latency");
                    receive_wait(pp, ctx, id[0]);
                    const double held0 = trace_now_us();
                    timed_wait(ctx, asleep ? hold_ms : 0);
                    const double held = trace_now_us() - held0;
                    memcpy(buf.data, &held, sizeof held);
                    send_later(pp, ctx, buf, peer, 0, "pong"), exchange_post(pp, ctx, {}, "latency");
                }
                sends_wait(pp, ctx);
            }
        }
        sleeping_barrier(pp.mpi);
        double l[2] = {percentile(half[0], 0.5), percentile(half[1], 0.5)};
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, l, 2, MPI_DOUBLE, MPI_MAX, pp.mpi));
        worst.spinning = std::max(worst.spinning, l[0]), worst.asleep = std::max(worst.asleep, l[1]);
    }
    tensor_free(buf), tensor_free(got);
    return worst;
}

Latency larger(const Latency& a, const Latency& b) { return {std::max(a.spinning, b.spinning), std::max(a.asleep, b.asleep)}; }

// e: the median overshoot of a 1 ms timed wait, every rank waiting at once; the worst rank.
double measure_resolution_us(Comm& pp, const Ctx& ctx) {
    std::vector<double> over;
    MPI_CHECK(MPI_Barrier(pp.mpi));
    for (int k = 0; k < 40; k++) {
        const double t0 = trace_now_us();
        timed_wait(ctx, 1.0);
        over.push_back(trace_now_us() - t0 - 1000.0);
    }
    double e = percentile(over, 0.5);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_DOUBLE, MPI_MAX, pp.mpi));
    return std::max(e, 0.0);
}

struct Named {
    const char* name;
    PipeSchedule s;
    BubbleSchedule b;
    int chunks;
};
const Named kAll[] = {{"afab", PipeSchedule::AFAB, BubbleSchedule::AFAB, 1},
                      {"1f1b", PipeSchedule::OneFOneB, BubbleSchedule::OneFOneB, 1},
                      {"interleaved", PipeSchedule::Interleaved, BubbleSchedule::Interleaved, 2},
                      {"zb-h1", PipeSchedule::ZeroBubbleH1, BubbleSchedule::ZeroBubbleH1, 1},
                      {"zb-h2", PipeSchedule::ZeroBubbleH2, BubbleSchedule::ZeroBubbleH2, 1},
                      {"zb-v", PipeSchedule::ZeroBubbleV, BubbleSchedule::ZeroBubbleV, 2}};

// The exchange latency in the run itself: for every message a stage waited for (its producer ended after the
// stage's previous op), from the producer's end to the consumer's start, over the last `steps` steps of every
// stage (one node: one clock); the 75th percentile of those it waited for at most spin_us (spinning) and of the
// others (asleep), so that a stall of a few waits does not move them. Collective.
Latency waited_latency(const Named& sch, int p, int M, int steps, const StageTimeline& t, double spin_us) {
    const auto& mine = t.step_spans();
    const size_t n_ops = mine.back().size();
    std::vector<double> t01((size_t)steps * n_ops * 2), all(t01.size() * (size_t)p);
    for (int i = 0; i < steps; i++)
        for (size_t k = 0; k < n_ops; k++) {
            const OpSpan& o = mine[mine.size() - (size_t)steps + (size_t)i][k];
            t01[((size_t)i * n_ops + k) * 2] = o.t0, t01[((size_t)i * n_ops + k) * 2 + 1] = o.t1;
        }
    MPI_CHECK(MPI_Allgather(t01.data(), (int)t01.size(), MPI_DOUBLE, all.data(), (int)t01.size(), MPI_DOUBLE, MPI_COMM_WORLD));
    const bool v = pipe_v_shape(sch.s);
    std::vector<double> lat[2];  // spinning, asleep
    std::vector<std::vector<PipeOp>> ops((size_t)p);
    for (int r = 0; r < p; r++) ops[(size_t)r] = pipe_schedule(sch.s, p, r, M, sch.chunks);
    for (int i = 0; i < steps; i++) {
        std::map<std::tuple<int, int, int, int>, std::pair<double, double>> at;  // (rank, kind, j, chunk): t0, t1
        for (int r = 0; r < p; r++)
            for (size_t k = 0; k < n_ops; k++) {
                const PipeOp& op = ops[(size_t)r][k];
                const size_t b = (((size_t)r * steps + (size_t)i) * n_ops + k) * 2;
                at[{r, op.kind, op.microbatch, op.chunk}] = {all[b], all[b + 1]};
            }
        for (int r = 0; r < p; r++)
            for (size_t k = 1; k < n_ops; k++) {
                const PipeOp& op = ops[(size_t)r][k];
                if (op.kind == PipeOp::WeightGrad) continue;
                const int from = pipe_virtual_stage(p, r, op.chunk, v) + (op.kind == PipeOp::Forward ? -1 : 1);
                if (from < 0 || from >= p * sch.chunks || pipe_rank_of(p, from, v) == r) continue;  // no message
                const int pr = pipe_rank_of(p, from, v);
                int pc = 0;
                while (pipe_virtual_stage(p, pr, pc, v) != from) pc++;
                const double produced = at[{pr, op.kind, op.microbatch, pc}].second;
                const PipeOp& prev = ops[(size_t)r][k - 1];
                const double waited = produced - at[{r, prev.kind, prev.microbatch, prev.chunk}].second;
                if (waited > 0) lat[waited > spin_us].push_back(at[{r, op.kind, op.microbatch, op.chunk}].first - produced);
            }
    }
    return Latency{percentile(lat[0], 0.75), percentile(lat[1], 0.75)};
}

// Each measured step against the formulas' model at that step's own op times: a replay (the schedule's order and
// dependencies, each op as long as it measured, communication free: parallel/pipeline_simulation.h), whose idle
// share at equal op times is the closed form's (test_formulas). The tolerance: the same replay with every
// message L + e late (L spinning or asleep, by how long the replay's stage waits for it: MessageLatency), less the
// replay, plus 2e over the step (its two ends). For each stage: the difference of
// the step nearest its model (the least disturbed), and the smallest difference (an executor's stall: every step
// above the tolerance).
struct Check {
    std::vector<double> nearest, least, model_share;
    std::vector<double> between_ms;  // post-validated: each stage's mean time between its steps (outside the ops)
    double tolerance = 0, closed_share = 0;
};
Check check_steps(const Named& sch, int p, int M, int steps, const StageTimeline& t, const PipelineIdle& idle, const Latency& L,
                  double spin_us, double e, double o, bool post = false) {
    const MessageLatency late_by((L.spinning + e) / 1e3, (L.asleep + e) / 1e3, spin_us / 1e3);  // (ms)
    const auto& mine = t.step_spans();
    const size_t n_ops = mine.back().size();
    if (post) steps++;  // post-validated: the periods between these steps (one fewer) are what is compared
    std::vector<double> dur((size_t)steps * n_ops), all((size_t)steps * n_ops * (size_t)p);
    for (int i = 0; i < steps; i++)
        for (size_t k = 0; k < n_ops; k++) {
            const OpSpan& o = mine[mine.size() - (size_t)steps + (size_t)i][k];
            dur[(size_t)i * n_ops + k] = (o.t1 - o.t0) / 1e3;
        }
    MPI_CHECK(MPI_Allgather(dur.data(), (int)dur.size(), MPI_DOUBLE, all.data(), (int)dur.size(), MPI_DOUBLE, MPI_COMM_WORLD));
    Check c;
    c.nearest.assign((size_t)p, INFINITY), c.least.assign((size_t)p, INFINITY), c.model_share.assign((size_t)p, 0);
    double worst_tol = 0;
    if (post) {  // the steps replayed together, none waiting for the others' end; each period against the replay's
        std::vector<std::vector<std::map<std::tuple<int, int, int>, double>>> took((size_t)steps, std::vector<std::map<std::tuple<int, int, int>, double>>((size_t)p));
        for (int i = 0; i < steps; i++)
            for (int r = 0; r < p; r++) {
                const std::vector<PipeOp> ops = pipe_schedule(sch.s, p, r, M, sch.chunks);
                for (size_t k = 0; k < ops.size(); k++)
                    took[(size_t)i][(size_t)r][{ops[k].kind, ops[k].microbatch, ops[k].chunk}] = all[((size_t)r * steps + (size_t)i) * n_ops + k];
            }
        auto d = [&](int i, int r, const PipeOp& op) { return took[(size_t)i][(size_t)r][{op.kind, op.microbatch, op.chunk}]; };
        auto d_late = [&](int i, int r, const PipeOp& op) { return d(i, r, op) + o / 1e3; };
        // Between a stage's steps, what it does outside the schedule's ops (the gradient sync, the tied embedding's
        // sum, the optimizer step, the snapshot, the next step's set-up), as measured: its last op's end to its next
        // step's ready (model/pipeline_timeline.h). The replay puts it there too; the formula has none.
        const auto& sums = t.steps();
        std::vector<double> rl((size_t)steps * 2), rl_all(rl.size() * (size_t)p);
        for (int i = 0; i < steps; i++) {
            const StepSpans& st = sums[sums.size() - (size_t)steps + (size_t)i];
            rl[(size_t)i * 2] = st.ready, rl[(size_t)i * 2 + 1] = st.last;
        }
        MPI_CHECK(MPI_Allgather(rl.data(), (int)rl.size(), MPI_DOUBLE, rl_all.data(), (int)rl.size(), MPI_DOUBLE, MPI_COMM_WORLD));
        auto between = [&](int i, int r) {
            if (i + 1 >= steps) return 0.0;
            const double* x = rl_all.data() + (size_t)r * rl.size();
            return std::max(0.0, (x[(size_t)(i + 1) * 2] - x[(size_t)i * 2 + 1]) / 1e3);
        };
        c.between_ms.assign((size_t)p, 0.0);
        for (int r = 0; r < p; r++)
            for (int i = 0; i + 1 < steps; i++) c.between_ms[(size_t)r] += between(i, r) / (steps - 1);
        const PipeSimulation ideal = pipe_replay_steps(sch.s, p, M, sch.chunks, steps, d, 0, between);
        const PipeSimulation late = pipe_replay_steps(sch.s, p, M, sch.chunks, steps, d_late, late_by, between);
        for (int i = 0; i + 1 < steps; i++)
            for (int r = 0; r < p; r++) {
                double busy = 0;
                for (const auto& kv : took[(size_t)i][(size_t)r]) busy += kv.second;
                const double period = ideal.first[(size_t)i + 1][(size_t)r] - ideal.first[(size_t)i][(size_t)r];
                const double late_period = late.first[(size_t)i + 1][(size_t)r] - late.first[(size_t)i][(size_t)r];
                const double want = 1 - busy / period, tol = (1 - busy / late_period) - want + 2 * e / 1e3 / period;
                const double diff = idle.stages[(size_t)r].share[(size_t)i] - want;
                worst_tol = std::max(worst_tol, tol);
                if (std::fabs(diff) < std::fabs(c.nearest[(size_t)r])) c.nearest[(size_t)r] = diff, c.model_share[(size_t)r] = want;
                c.least[(size_t)r] = std::min(c.least[(size_t)r], diff);
            }
        c.tolerance = worst_tol;
        return c;
    }
    for (int i = 0; i < steps; i++) {
        std::vector<std::map<std::tuple<int, int, int>, double>> took((size_t)p);
        for (int r = 0; r < p; r++) {
            const std::vector<PipeOp> ops = pipe_schedule(sch.s, p, r, M, sch.chunks);
            for (size_t k = 0; k < ops.size(); k++)
                took[(size_t)r][{ops[k].kind, ops[k].microbatch, ops[k].chunk}] = all[((size_t)r * steps + (size_t)i) * n_ops + k];
        }
        auto d = [&](int r, const PipeOp& op) { return took[(size_t)r][{op.kind, op.microbatch, op.chunk}]; };
        auto d_late = [&](int r, const PipeOp& op) { return d(r, op) + o / 1e3; };  // each op o later than the last
        const PipeSimulation ideal = pipe_replay(sch.s, p, M, sch.chunks, d), late = pipe_replay(sch.s, p, M, sch.chunks, d_late, late_by);
        for (int r = 0; r < p; r++) {
            const double want = ideal.idle_share(r), tol = late.idle_share(r) - want + 2 * e / 1e3 / ideal.step;
            const double diff = idle.stages[(size_t)r].share[(size_t)i] - want;
            worst_tol = std::max(worst_tol, tol);
            if (std::fabs(diff) < std::fabs(c.nearest[(size_t)r])) c.nearest[(size_t)r] = diff, c.model_share[(size_t)r] = want;
            c.least[(size_t)r] = std::min(c.least[(size_t)r], diff);
        }
    }
    c.tolerance = worst_tol;
    const double bubble = pipeline_bubble_time(sch.b, p, M, idle.mean_op_ms[0], idle.mean_op_ms[1], idle.mean_op_ms[2]);
    c.closed_share = std::isnan(bubble) ? NAN : bubble_idle_share(bubble, M, sch.chunks, idle.mean_op_ms[0], idle.mean_op_ms[1],
                                                                  idle.mean_op_ms[2]);
    return c;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string x; std::getline(in, x, ',');) out.push_back(x);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    // Where it may (root), the test raises its own priority (nice -20): the machine's other work then rarely
    // decides when a waiting stage wakes up. Elsewhere it runs as it is, and the measured latency says so.
    const bool raised = setpriority(PRIO_PROCESS, 0, -20) == 0;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::string times = "2:3:1", schedules = "afab,1f1b,interleaved,zb-h1,zb-h2,zb-v", micro;
    int steps = 5;
    bool expect_stall = false, post = false;
    ModelSpec spec;
    spec.pp = world;
    spec.rules.strict = spec.rules.check_order = true;
    spec.rules.timeout_s = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--times")) times = argv[++i];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--schedules")) schedules = argv[++i];
        else if (!strcmp(argv[i], "--micro")) micro = argv[++i];
        else if (!strcmp(argv[i], "--comm")) spec.rules.strict = spec.rules.check_order = !strcmp(argv[++i], "mpi-strict");
        else if (!strcmp(argv[i], "--expect-stall")) expect_stall = true;
        else if (!strcmp(argv[i], "--post-validation")) post = true;
    }
    const int p = world;
    PipeOpTimes op_times;
    const std::string bad = parse_pipe_op_times(times, &op_times);
    if (!bad.empty() || p < 2 || steps < 1) {
        if (rank == 0) printf("test_pipeline_bubble: %s\n", bad.empty() ? "needs at least 2 ranks and 1 step" : bad.c_str());
        MPI_Finalize();
        return 1;
    }
    if (expect_stall) schedules = "zb-h2", g_test_hooks.blocking_p2p = true;
    std::vector<int> Ms = {p, 2 * p, 4 * p};
    if (!micro.empty()) {
        Ms.clear();
        for (const std::string& x : split(micro)) Ms.push_back(atoi(x.c_str()));
    }
    const int S = 16;
    spec.dropout = 0;
    // How long the latency's peer holds a message: as long as a stage waits for one (an op or two), at least 3 ms.
    const double hold_ms = std::max(3.0, 1.5 * std::max(op_times.f_ms, op_times.b_ms + op_times.w_ms));

    // The two measured quantities, on a grid of the same shape (the boundary tensor: S·b·C floats, b = 1).
    Latency L, L_start;
    double e = 0;
    const double spin = kCommSpinUs;  // a wait that has lasted longer is asleep (parallel/comm.h)
    {
        spec.cfg = tiny_config(2 * p);
        ModelHarness h(spec, MPI_COMM_WORLD);
        L_start = L = measure_latency(h.grid.pp_comm, h.ctx, (size_t)S * h.model.cfg.channels * sizeof(float), hold_ms);
        e = measure_resolution_us(h.grid.pp_comm, h.ctx);
    }
    // o: what the executor takes between two ops that wait for nothing (posting the exchange, the op's bookkeeping):
    // the median gap between the first stage's forwards under AFAB (no input to wait for), M = 8.
    double o = 0;
    {
        const bool blocking = g_test_hooks.blocking_p2p;
        g_test_hooks.blocking_p2p = false;
        spec.schedule = PipeSchedule::AFAB, spec.chunks = 1, spec.cfg = tiny_config(p);
        ModelHarness h(spec, MPI_COMM_WORLD);
        h.model.pipe.op_times = op_times;
        h.model.pipe.timeline.keep_spans = true;
        OptimConfig oc;
        for (int st = 1; st <= 3; st++) {
            Batch b = make_batch(h.model.cfg, 8, S, st, 1, 0);
            train_step(h.model, b.inputs.data(), b.targets.data(), 8, S, oc, st, 1e-3f, 8);
        }
        std::vector<double> gaps;
        for (size_t i = 1; i < h.model.pipe.timeline.step_spans().size(); i++) {
            const std::vector<OpSpan>& ops = h.model.pipe.timeline.step_spans()[i];
            for (size_t k = 1; k < ops.size() && ops[k].op.kind == PipeOp::Forward; k++) gaps.push_back(ops[k].t0 - ops[k - 1].t1);
        }
        o = rank == 0 ? percentile(gaps, 0.5) : 0;
        MPI_CHECK(MPI_Bcast(&o, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        g_test_hooks.blocking_p2p = blocking;
    }
    if (rank == 0)
        printf("test_pipeline_bubble: p %d, op times F:B:W = %s ms, %d measured steps, %s; measured: exchange latency L = %.1f us "
               "spinning / %.1f us asleep (a wait asleep after s = %.0f us), timer resolution e = %.1f us, the executor's gap "
               "between ops o = %.1f us%s%s\n", p, times.c_str(), steps, spec.rules.strict ? "--comm mpi-strict" : "--comm mpi",
               L.spinning, L.asleep, spin, e, o, raised ? "; priority raised (nice -20)" : "",
               expect_stall ? "; negative control: the exchanges of before (whole units)" : "");

    int stalls = 0, compared = 0;
    for (const std::string& name : split(schedules)) {
        const Named* sch = nullptr;
        for (const Named& n : kAll)
            if (name == n.name) sch = &n;
        if (!sch) {
            if (rank == 0) printf("test_pipeline_bubble: unknown schedule %s\n", name.c_str());
            MPI_Finalize();
            return 1;
        }
        for (int M : Ms) {
            if (!pipe_schedule_problem(sch->s, p, M, sch->chunks).empty()) continue;
            spec.schedule = sch->s;
            spec.chunks = sch->chunks;
            spec.cfg = tiny_config(p * sch->chunks);
            // Up to five attempts: the machine's noise (a rank descheduled, other work on the cores) hits some steps
            // and some attempts; a stall of the executor hits every step of every attempt.
            const int attempts = expect_stall ? 1 : 5;
            for (int attempt = 1; attempt <= attempts; attempt++) {
                ModelHarness h(spec, MPI_COMM_WORLD);
                h.model.pipe.op_times = op_times;
                h.model.pipe.timeline.keep_spans = true;
                // L again now: the machine's load moves it from minute to minute. Above twice the first measure, up to
                // two more and the least: a burst of load during these 20 round trips alone would loosen the tolerance
                // enough to hide a stall (seen: 631 and 789 us against 80, a tolerance of 0.09-0.10).
                const size_t bytes = (size_t)S * h.model.cfg.channels * sizeof(float);
                L = measure_latency(h.grid.pp_comm, h.ctx, bytes, hold_ms);
                for (int again = 0; again < 2 && (L.spinning > 2 * L_start.spinning || L.asleep > 2 * L_start.asleep); again++) {
                    const Latency more = measure_latency(h.grid.pp_comm, h.ctx, bytes, hold_ms);
                    L.spinning = std::min(L.spinning, more.spinning), L.asleep = std::min(L.asleep, more.asleep);
                }
                OptimConfig oc;
                if (post) {  // steps that overlap: each stage's idle over its own period (model/pipeline_timeline.h)
                    PostValidation pv;
                    for (int st = 1; st <= steps + 2; st++) {
                        Batch b = make_batch(h.model.cfg, M, S, st, 1, 0);
                        post_validated_step(h.model, pv, b.inputs.data(), b.targets.data(), M, S, oc, st, 1e-3f, M);
                    }
                    post_validation_settle(h.model, pv);
                    post_validation_free(pv);
                    const PipelineIdle idle = pipeline_idle(h.model.pipe.timeline, h.grid.pp_comm, true, 1);
                    const double* T = idle.mean_op_ms;
                    double bubble = pipeline_bubble_time_post_validated(sch->b, p, M, T[0], T[1], T[2]);
                    const bool closed = !std::isnan(bubble);
                    const double sync = bubble_idle_share(pipeline_bubble_time(sch->b, p, M, T[0], T[1], T[2]), M, sch->chunks,
                                                          T[0], T[1], T[2]);
                    if (!closed) bubble = pipe_simulate(sch->s, p, M, sch->chunks, T[0], T[1], T[2], true).idle[0];
                    const double want = bubble_idle_share(bubble, M, sch->chunks, T[0], T[1], T[2]);
                    const Latency Lw = waited_latency(*sch, p, M, steps, h.model.pipe.timeline, spin);
                    const Check c = check_steps(*sch, p, M, steps, h.model.pipe.timeline, idle, larger(L, Lw), spin, e, o, true);
                    if (rank == 0)
                        printf("%-11s M %2d%s, post-validated: T_F %.3f T_B %.3f T_W %.3f ms; formula without the end triangle "
                               "(%s) %.4f (synchronized: %.4f); L %.0f/%.0f us (round trips) / %.0f/%.0f us (the run's waits), "
                               "spinning/asleep, tolerance %.4f\n", sch->name, M,
                               attempt > 1 ? (" (attempt " + std::to_string(attempt) + ")").c_str() : "", T[0], T[1], T[2],
                               closed ? "closed form" : "simulation", want, sync, L.spinning, L.asleep, Lw.spinning, Lw.asleep,
                               c.tolerance);
                    int outside = 0;
                    for (const StageIdle& si : idle.stages) {
                        const double diff = c.nearest[(size_t)si.stage];
                        const bool ok = std::fabs(diff) <= c.tolerance;
                        outside += !ok;
                        if (rank == 0)
                            printf("    stage %d: measured %.4f [%.4f-%.4f over the periods], model %.4f (with %.2f ms between "
                                   "steps); nearest period %+.4f %s\n", si.stage, percentile(si.share, 0.5), si.min_share,
                                   si.max_share, c.model_share[(size_t)si.stage], c.between_ms[(size_t)si.stage], diff,
                                   ok ? "(within)" : "OUTSIDE the tolerance");
                    }
                    compared++;
                    if (outside == 0 || attempt == attempts) {
                        if (rank == 0) CHECK(outside == 0, "%s M %d post-validated: %d stage(s) outside", sch->name, M, outside);
                        break;
                    }
                    continue;
                }
                for (int st = 1; st <= steps + 1; st++) {
                    Batch b = make_batch(h.model.cfg, M, S, st, 1, 0);
                    train_step(h.model, b.inputs.data(), b.targets.data(), M, S, oc, st, 1e-3f, M);
                }
                const PipelineIdle idle = pipeline_idle(h.model.pipe.timeline, h.grid.pp_comm, false, 1);
                const Latency Lw = waited_latency(*sch, p, M, steps, h.model.pipe.timeline, spin);
                const Check c = check_steps(*sch, p, M, steps, h.model.pipe.timeline, idle, larger(L, Lw), spin, e, o);
                if (rank == 0)
                    printf("%-11s M %2d%s: T_F %.3f T_B %.3f T_W %.3f ms (means); closed form's idle share at them %s; "
                           "L %.0f/%.0f us (round trips) / %.0f/%.0f us (the run's waits), spinning/asleep, tolerance %.4f\n",
                           sch->name, M,
                           attempt > 1 ? (" (attempt " + std::to_string(attempt) + ")").c_str() : "",
                           idle.mean_op_ms[0], idle.mean_op_ms[1], idle.mean_op_ms[2],
                           std::isnan(c.closed_share) ? "(none: ZB-V below M = 2p)" : std::to_string(c.closed_share).c_str(),
                           L.spinning, L.asleep, Lw.spinning, Lw.asleep, c.tolerance);
                int outside = 0;
                for (int r = 0; r < p; r++) {
                    const bool ok = std::fabs(c.nearest[(size_t)r]) <= c.tolerance;
                    if (expect_stall && r == 0 && c.least[(size_t)r] > c.tolerance) stalls++;
                    outside += !ok;
                    if (rank == 0)
                        printf("    stage %d: measured %.4f [%.4f-%.4f over the steps], model %.4f; nearest step %+.4f %s\n", r,
                               percentile(idle.stages[(size_t)r].share, 0.5), idle.stages[(size_t)r].min_share,
                               idle.stages[(size_t)r].max_share, c.model_share[(size_t)r], c.nearest[(size_t)r],
                               ok ? "(within)" : "OUTSIDE the tolerance");
                }
                compared++;
                if (expect_stall || outside == 0 || attempt == attempts) {
                    if (!expect_stall && rank == 0)
                        CHECK(outside == 0, "%s M %d: %d stage(s) outside the tolerance in %d attempts", sch->name, M, outside, attempts);
                    break;
                }
            }
        }
    }
    if (expect_stall && rank == 0) {
        CHECK(stalls == compared && compared > 0, "the exchanges of before (whole units) should stall ZB-H2's first stage in "
              "every step beyond the tolerance; it did in %d of %d layouts", stalls, compared);
        printf("negative control: with the whole-unit exchanges ZB-H2's first stage idled beyond its formula and the "
               "tolerance in every step, in %d of %d layouts\n", stalls, compared);
    }
    int failed = rank == 0 ? test_finish("test_pipeline_bubble") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
