// test_pipeline_bubble.cu — the executor's own bubble, checked as logic (issue 47): no clock, no tolerance taken
// from a measurement, no retry. The verdict cannot depend on the machine's load.
//
//   mpirun -np P test_pipeline_bubble [--schedules a,b,..] [--micro list] [--post-validation] [--comm mpi|mpi-strict]
//                                     [--blocking-p2p | --weight-unlagged | --delay-weight S] [--show-record]
//
// For each schedule (afab, 1f1b, interleaved with 2 chunks, zb-h1, zb-h2, zb-v) and each M from P to 4P (those the
// schedule allows; --micro gives others), a tiny model trains a few steps at pp = P through the real executor
// (model/pipeline_step.cu) and its real exchanges (MPI, --comm mpi-strict by default: NCCL's rules), with every op's
// work skipped (--pipeline-op-times 0:0:0, model/pipeline_timeline.h). Each stage keeps its logical record
// (StageTimeline::keep_record): its ops in the order it ran them and, before each, what it posted and what it
// waited for, taken from the exchanges themselves (parallel/point_to_point.h's p2p_record). What is checked:
//  - every stage's record is the same in every step (it is logic: no time in it), and holds each op of the
//    schedule once;
//  - the records of all stages, replayed in virtual time with fixed op times (parallel/pipeline_simulation.h's
//    pipe_replay_record: a stage runs its ops in its recorded order, each once the stage is free and everything
//    the record says it waited for has been posted by the other side; messages take no time), give each stage an
//    idle share equal to the schedule's closed form (recompute/formulas.h) at those times, exactly but for the
//    rounding of the division (the times are small integers, so the idle times themselves are equal bit for bit).
//    Three time triples F:B:W: 2:3:1, 3:2:1, 1:1:1. Where formulas.h gives no closed form (ZB-V below M = 2P) the
//    reference is the schedule's own dependency simulation (pipe_simulate, which test_formulas checks against
//    every closed form);
//  - --post-validation: the steps post-validated (model/post_validation.h: no synchronization between steps); the
//    recorded step replayed 12 times back to back, each stage's steady idle per step against
//    pipeline_bubble_time_post_validated (or the schedule's simulation without synchronization where that gives
//    none). What a stage does between its steps (the gradient sync, the tied embedding's sum, the optimizer step)
//    is not in the record: this checks the step's ops and exchanges only.
// An executor that waits for something its op does not need, posts a send late, or runs its ops in another
// order than the schedule's replays to a longer step, and the test fails naming the layout, the times, the
// stage and the first op that started later than the schedule allows. The negative controls
// (test/model/pipeline_step.cmake), each expected to fail for that reason:
//  --blocking-p2p:    the exchanges of before (whole units, each waiting for its sends too; layers/test_hooks.h)
//                     stall ZB-H2;
//  --weight-unlagged: the executor runs each W right after its B (a W lag of 0): a ZB-H1 order broken on purpose;
//  --delay-weight S:  on stage S the executor runs one W a slot late (after the B that followed it).
// Wall-clock bubbles (the trainer's end line, bench/pipeline_bubble.sh) are measurements, never checked here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>
#include "model_fixture.h"
#include "../../model/post_validation.h"
#include "../../parallel/pipeline_simulation.h"
#include "../../parallel/zero_bubble_schedule.h"
#include "../../recompute/formulas.h"

namespace {

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

// ---- the records to rank 0 -------------------------------------------------------------------------------------
// A stage's steps as ints: steps, then per step: ops, per op (kind, micro-batch, chunk, events, per event (kind,
// peer, tag)), then the events after the last op.
void put_events(std::vector<int>& v, const std::vector<PipeExchangeEvent>& events) {
    v.push_back((int)events.size());
    for (const PipeExchangeEvent& e : events) v.push_back((int)e.kind), v.push_back(e.peer), v.push_back(e.tag);
}
std::vector<int> flatten(const std::vector<PipeStageRecord>& steps) {
    std::vector<int> v{(int)steps.size()};
    for (const PipeStageRecord& s : steps) {
        v.push_back((int)s.ops.size());
        for (const PipeRecordedOp& o : s.ops) {
            v.push_back((int)o.op.kind), v.push_back(o.op.microbatch), v.push_back(o.op.chunk);
            put_events(v, o.before);
        }
        put_events(v, s.after);
    }
    return v;
}
std::vector<PipeExchangeEvent> get_events(const int*& p) {
    std::vector<PipeExchangeEvent> events((size_t)*p++);
    for (PipeExchangeEvent& e : events) e.kind = (PipeExchangeEvent::Kind)p[0], e.peer = p[1], e.tag = p[2], p += 3;
    return events;
}
std::vector<PipeStageRecord> unflatten(const int* p) {
    std::vector<PipeStageRecord> steps((size_t)*p++);
    for (PipeStageRecord& s : steps) {
        s.ops.resize((size_t)*p++);
        for (PipeRecordedOp& o : s.ops) {
            o.op = PipeOp{(PipeOp::Kind)p[0], p[1], p[2]};
            p += 3;
            o.before = get_events(p);
        }
        s.after = get_events(p);
    }
    return steps;
}
// Every stage's recorded steps on rank 0 (records[stage][step]); empty elsewhere. Collective.
std::vector<std::vector<PipeStageRecord>> gather_records(const StageTimeline& t, int rank, int p) {
    const std::vector<int> mine = flatten(t.step_records());
    int n = (int)mine.size();
    std::vector<int> sizes((size_t)p), offsets((size_t)p, 0);
    MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
    for (int r = 1; r < p; r++) offsets[(size_t)r] = offsets[(size_t)r - 1] + sizes[(size_t)r - 1];
    std::vector<int> all(rank == 0 ? (size_t)(offsets.back() + sizes.back()) : 0);
    MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_INT, all.data(), sizes.data(), offsets.data(), MPI_INT, 0, MPI_COMM_WORLD));
    std::vector<std::vector<PipeStageRecord>> out;
    if (rank == 0)
        for (int r = 0; r < p; r++) out.push_back(unflatten(all.data() + offsets[(size_t)r]));
    return out;
}

// ---- the checks (rank 0) ---------------------------------------------------------------------------------------
std::string op_name(const PipeOp& op) {
    const char* kind = op.kind == PipeOp::Forward ? "F" : op.kind == PipeOp::Backward ? "B" : "W";
    return kind + std::to_string(op.microbatch) + "." + std::to_string(op.chunk);
}

// The first op that the replay starts later than the schedule's own simulation at the same times (the earliest in
// the schedule, over the stages): where the executor's record waits longer than the schedule needs. Each stage's
// times are taken from its step's first op (post-validated steps: a delay carried over from the steps before
// would otherwise make every op late).
std::string first_late_op(const PipeSimulation& replay, const PipeSimulation& schedule, bool post) {
    std::string where = "none (the ops start as the schedule's, the step ends later)";
    double earliest = INFINITY;
    for (size_t r = 0; r < replay.stages.size() && r < schedule.stages.size(); r++) {
        if (replay.stages[r].empty() || schedule.stages[r].empty()) continue;
        const double from_replay = post ? replay.stages[r][0].t0 : 0, from_schedule = post ? schedule.stages[r][0].t0 : 0;
        std::map<std::tuple<int, int, int>, double> want;
        for (const SimulatedOp& o : schedule.stages[r]) want[{o.op.kind, o.op.microbatch, o.op.chunk}] = o.t0 - from_schedule;
        for (const SimulatedOp& o : replay.stages[r]) {
            const double w = want[{o.op.kind, o.op.microbatch, o.op.chunk}], got = o.t0 - from_replay;
            if (got > w && w < earliest) {
                earliest = w;
                char text[160];
                snprintf(text, sizeof text, "stage %zu's %s starts at %g instead of %g%s", r, op_name(o.op).c_str(), got, w,
                         post ? " (from the stage's first op of a steady step)" : "");
                where = text;
            }
        }
    }
    return where;
}

// A stage's record in words (--show-record): "post recv 5<-1, wait recv 5<-1, F2.0; ...".
void show_record(int r, const PipeStageRecord& rec) {
    auto words = [](const std::vector<PipeExchangeEvent>& events) {
        std::string s;
        for (const PipeExchangeEvent& e : events) {
            const bool recv = e.kind == PipeExchangeEvent::PostReceive || e.kind == PipeExchangeEvent::WaitReceive;
            const bool post = e.kind == PipeExchangeEvent::PostReceive || e.kind == PipeExchangeEvent::PostSend;
            s += std::string(post ? "post " : "wait ") + (recv ? "recv " : "send ") + std::to_string(e.tag) + (recv ? "<-" : "->") +
                 std::to_string(e.peer) + ", ";
        }
        return s;
    };
    printf("  stage %d:", r);
    for (const PipeRecordedOp& o : rec.ops) printf(" %s%s;", words(o.before).c_str(), op_name(o.op).c_str());
    printf(" after: %s\n", words(rec.after).c_str());
}

struct Times {
    double f, b, w;
};
const Times kTimes[] = {{2, 3, 1}, {3, 2, 1}, {1, 1, 1}};

// One layout's records (records[stage][step]) against the formula; returns the number of failed comparisons.
int check_layout(const Named& sch, int p, int M, bool post, const std::vector<std::vector<PipeStageRecord>>& records, bool show) {
    int failed = 0;
    const std::string layout = std::string(sch.name) + " p " + std::to_string(p) + " M " + std::to_string(M) + (post ? " post-validated" : "");
    // The record is logic: the same in every step, on every stage; and each op of the schedule once.
    size_t steps = records[0].size();
    for (int r = 0; r < p; r++) {
        const std::vector<PipeStageRecord>& mine = records[(size_t)r];
        CHECK(!mine.empty() && mine.size() == steps, "%s: stage %d recorded %zu steps, stage 0 %zu", layout.c_str(), r, mine.size(), steps);
        if (mine.empty() || mine.size() != steps) return failed + 1;
        for (size_t k = 1; k < mine.size(); k++) {
            const bool same = mine[k] == mine[0];
            CHECK(same, "%s: stage %d's record of step %zu differs from its first step's", layout.c_str(), r, k);
            failed += !same;
        }
        std::vector<PipeOp> ran, want = pipe_schedule(sch.s, p, r, M, sch.chunks);
        for (const PipeRecordedOp& o : mine[0].ops) ran.push_back(o.op);
        auto order = [](const PipeOp& a, const PipeOp& b) {
            return std::make_tuple(a.kind, a.microbatch, a.chunk) < std::make_tuple(b.kind, b.microbatch, b.chunk);
        };
        std::sort(ran.begin(), ran.end(), order), std::sort(want.begin(), want.end(), order);
        const bool every = ran == want;
        CHECK(every, "%s: stage %d ran %zu ops, not the schedule's %zu, each once", layout.c_str(), r, ran.size(), want.size());
        failed += !every;
    }
    std::vector<std::vector<PipeStageRecord>> replayed;  // [step][stage]
    for (int k = 0; k < (post ? 12 : 1); k++) {
        replayed.emplace_back();
        for (int r = 0; r < p; r++) replayed.back().push_back(records[(size_t)r][0]);
    }
    std::string line;
    for (const Times& T : kTimes) {
        const bool zb = is_zero_bubble(sch.s);
        auto duration = [&](int, const PipeOp& op) {
            return op.kind == PipeOp::Forward ? T.f : op.kind == PipeOp::WeightGrad ? T.w : zb ? T.b : T.b + T.w;
        };
        const PipeSimulation replay = pipe_replay_record(replayed, duration, post);
        const PipeSimulation schedule = pipe_simulate(sch.s, p, M, sch.chunks, T.f, T.b, T.w, post);
        char times[64];
        snprintf(times, sizeof times, "%g:%g:%g", T.f, T.b, T.w);
        CHECK(!replay.deadlock, "%s at %s: the replay of the record stops: %s", layout.c_str(), times, replay.problem.c_str());
        if (replay.deadlock) return failed + 1;
        const double closed = post ? pipeline_bubble_time_post_validated(sch.b, p, M, T.f, T.b, T.w)
                                   : pipeline_bubble_time(sch.b, p, M, T.f, T.b, T.w);
        const char* source = std::isnan(closed) ? "the schedule's simulation: no closed form here" : "closed form";
        for (int r = 0; r < p; r++) {
            const double bubble = std::isnan(closed) ? schedule.idle[(size_t)r] : closed;
            const double want = bubble_idle_share(bubble, M, sch.chunks, T.f, T.b, T.w);
            const double got = bubble_idle_share(replay.idle[(size_t)r], M, sch.chunks, T.f, T.b, T.w);
            const bool equal = std::fabs(got - want) <= 1e-12;
            CHECK(equal, "%s at %s: stage %d's replayed idle share %.6f differs from the formula's %.6f (%s; idle %g against %g "
                  "per step); the first op later than the schedule allows: %s", layout.c_str(), times, r, got, want, source,
                  replay.idle[(size_t)r], bubble, first_late_op(replay, schedule, post).c_str());
            failed += !equal;
            if (r == 0) {
                char part[160];
                snprintf(part, sizeof part, "%s%s %.4f%s", line.empty() ? "" : ", ", times, got,
                         std::isnan(closed) ? " (simulation)" : "");
                line += part;
            }
        }
    }
    printf("%-25s %3zu ops on stage 0, the same record in %zu steps; replayed idle share (stage 0) %s: %s\n", layout.c_str(),
           records[0][0].ops.size(), steps, failed ? "DIFFERS from the formula" : "= the formula", line.c_str());
    for (int r = 0; r < p && show; r++) show_record(r, records[(size_t)r][0]);
    return failed;
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
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::string schedules = "afab,1f1b,interleaved,zb-h1,zb-h2,zb-v", micro;
    bool post = false, show = false;
    ModelSpec spec;
    spec.pp = world;
    spec.rules.strict = spec.rules.check_order = true;
    spec.rules.timeout_s = 60;
    std::string control;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--schedules") && i + 1 < argc) schedules = argv[++i];
        else if (!strcmp(argv[i], "--micro") && i + 1 < argc) micro = argv[++i];
        else if (!strcmp(argv[i], "--comm") && i + 1 < argc) spec.rules.strict = spec.rules.check_order = !strcmp(argv[++i], "mpi-strict");
        else if (!strcmp(argv[i], "--post-validation")) post = true;
        else if (!strcmp(argv[i], "--show-record")) show = true;
        else if (!strcmp(argv[i], "--blocking-p2p")) g_test_hooks.blocking_p2p = true, control = "the exchanges of before (whole units)";
        else if (!strcmp(argv[i], "--weight-unlagged")) g_test_hooks.weight_unlagged = true, control = "each W right after its B";
        else if (!strcmp(argv[i], "--delay-weight") && i + 1 < argc)
            g_test_hooks.delay_weight_stage = atoi(argv[++i]), control = "one W a slot late on stage " + std::string(argv[i]);
        else {
            if (rank == 0) fprintf(stderr, "test_pipeline_bubble: unknown argument %s\n", argv[i]);
            MPI_Finalize();
            return 1;
        }
    }
    const int p = world;
    if (p < 2) {
        if (rank == 0) fprintf(stderr, "test_pipeline_bubble: needs at least 2 ranks (one per pipeline stage)\n");
        MPI_Finalize();
        return 1;
    }
    const int S = 16;
    spec.dropout = 0;
    if (rank == 0)
        printf("test_pipeline_bubble: p %d, %s, op work skipped; each stage's logical record replayed at op times F:B:W "
               "2:3:1, 3:2:1, 1:1:1%s%s\n", p, spec.rules.strict ? "--comm mpi-strict" : "--comm mpi",
               post ? "; post-validated steps" : "", control.empty() ? "" : ("; negative control: " + control).c_str());
    int failed = 0, layouts = 0;
    for (const std::string& name : split(schedules)) {
        const Named* sch = nullptr;
        for (const Named& n : kAll)
            if (name == n.name) sch = &n;
        if (!sch) {
            if (rank == 0) fprintf(stderr, "test_pipeline_bubble: unknown schedule %s\n", name.c_str());
            MPI_Finalize();
            return 1;
        }
        std::vector<int> Ms;
        for (int M = p; M <= 4 * p; M++) Ms.push_back(M);
        if (!micro.empty()) {
            Ms.clear();
            for (const std::string& x : split(micro)) Ms.push_back(atoi(x.c_str()));
        }
        for (int M : Ms) {
            if (!pipe_schedule_problem(sch->s, p, M, sch->chunks).empty()) continue;
            spec.schedule = sch->s;
            spec.chunks = sch->chunks;
            spec.cfg = tiny_config(p * sch->chunks);
            ModelHarness h(spec, MPI_COMM_WORLD);
            // Every op's work skipped (a timed wait of 0): the messages and the exchanges stay as they are.
            h.model.pipe.op_times = PipeOpTimes{0, 0, 0, true};
            h.model.pipe.timeline.keep_record = true;
            OptimConfig oc;
            if (post) {
                PostValidation pv;
                for (int st = 1; st <= 3; st++) {
                    Batch b = make_batch(h.model.cfg, M, S, st, 1, 0);
                    post_validated_step(h.model, pv, b.inputs.data(), b.targets.data(), M, S, oc, st, 1e-3f, M);
                }
                post_validation_settle(h.model, pv);
                post_validation_free(pv);
            } else {
                for (int st = 1; st <= 2; st++) {
                    Batch b = make_batch(h.model.cfg, M, S, st, 1, 0);
                    train_step(h.model, b.inputs.data(), b.targets.data(), M, S, oc, st, 1e-3f, M);
                }
            }
            const std::vector<std::vector<PipeStageRecord>> records = gather_records(h.model.pipe.timeline, rank, p);
            if (rank == 0) failed += check_layout(*sch, p, M, post, records, show) > 0;
            layouts++;
        }
    }
    if (rank == 0) {
        CHECK(layouts > 0, "no layout to check: every schedule and M given was refused");
        printf("%d of %d layouts replay to their formula%s\n", layouts - failed, layouts,
               control.empty() ? "" : " (a negative control: expected to fail)");
    }
    int bad = rank == 0 ? test_finish("test_pipeline_bubble") : 0;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return bad;
}
