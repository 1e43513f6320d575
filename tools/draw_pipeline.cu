// draw_pipeline.cu — a pipeline's schedule as a picture: one row per stage, each forward (F), backward (B)
// and weight-gradient (W) op a box coloured by its kind and labelled with its micro-batch, idle time blank.
//
//   build/draw_pipeline TRACE.json [--step N] --out pipeline.png
//       a step the trainer recorded (--trace, layers/trace.h): the ops' measured times, in ms. Each stage is
//       drawn from its first rank (tp 0, cp 0, dp 0: world rank stage · ranks_per_stage); the other ranks of a
//       stage run the same ops. --step: which recorded step (default: the first).
//   build/draw_pipeline --ideal --pp P --micro M --schedule 1f1b|afab|interleaved|zb-h1|zb-h2|zb-v [--chunks m]
//                       [--tf X --tb Y --tw Z] [--post-validation] --out ideal.png
//       the schedule itself (parallel/pipeline_schedule.h's pipe_schedule for every stage), timed by the
//       dependency simulation of parallel/pipeline_simulation.h: each stage runs its ops in order, each as soon
//       as the stage is free and its input is there (F j on virtual stage v after F j on v − 1, B j on v after
//       B j on v + 1; W only after its stage's earlier ops); communication is free; an op takes tf, tb or tw
//       (default 1 each; a backward without its W, under 1F1B, AFAB and interleaved, takes tb + tw).
//       --post-validation: steps without a synchronization between them (model/post_validation.h), drawn as one
//       steady step with the next step's ops that overlap it (labelled j').
//
// Both print each stage's idle share: the time it runs no op, over the step's time (from the first op's
// start on any stage to the last op's end on any stage; post-validated, the stage's own period), the measured
// counterpart of the bubble (p − 1)/(m·M) / (1 + (p − 1)/(m·M)) when every op takes the same time. ZB-V's rows
// are its V (stage r holds chunks r and 2p − 1 − r: labels j.c). A recorded step also shows, on each stage, its
// optimizer step (O) and any rollback of a post-validated step (R, model/post_validation.h), and the next step's
// ops that ran before this one ended (j': the post-validation overlap).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "chart.h"
#include "../parallel/pipeline_schedule.h"
#include "../parallel/pipeline_simulation.h"
#include "../parallel/zero_bubble_schedule.h"
#include "../recompute/formulas.h"

namespace {

struct Op {
    char kind;  // 'F', 'B', 'W'; 'O' the optimizer step, 'R' a rollback (recorded steps)
    int microbatch, chunk;
    double t0, t1;
    bool next = false;  // an op of the next step (post-validation overlap)
};

// The schedules by their names (pipe_schedule_name). A schedule added to parallel/pipeline_schedule.h needs its
// line here.
const std::pair<const char*, PipeSchedule> kSchedules[] = {
    {"afab", PipeSchedule::AFAB},
    {"1f1b", PipeSchedule::OneFOneB},
    {"interleaved", PipeSchedule::Interleaved},
    {"zb-h1", PipeSchedule::ZeroBubbleH1},
    {"zb-h2", PipeSchedule::ZeroBubbleH2},
    {"zb-v", PipeSchedule::ZeroBubbleV},
};

// An op's letter. The one place that knows the kinds: a new kind (the zero-bubble schedules' weight gradient)
// is one more case here.
char op_letter(PipeOp::Kind k) {
    switch (k) {
        case PipeOp::Forward: return 'F';
        case PipeOp::Backward: return 'B';
        case PipeOp::WeightGrad: return 'W';
    }
    return '?';
}
// palette: blue, orange, green; the optimizer (O) and a rollback (R) the next two
int kind_color(char kind) { return kind == 'F' ? 0 : kind == 'B' ? 1 : kind == 'W' ? 2 : kind == 'O' ? 3 : 4; }

[[noreturn]] void die(const std::string& msg) {
    fprintf(stderr, "error: %s (see --help)\n", msg.c_str());
    exit(2);
}

// ---- the ideal schedule ------------------------------------------------------------------------------------
// Every stage's ops from pipe_schedule, timed by parallel/pipeline_simulation.h. Post-validated: a steady step,
// and the next step's ops that begin before it ends.
std::vector<std::vector<Op>> simulate(PipeSchedule s, int p, int M, int m, double tf, double tb, double tw, bool post) {
    const PipeSimulation sim = pipe_simulate(s, p, M, m, tf, tb, tw, post);
    if (sim.deadlock) die("the schedule cannot proceed: every stage waits for an input no stage produces");
    std::vector<std::vector<Op>> out((size_t)p);
    double t_end = -INFINITY;
    for (int r = 0; r < p; r++)
        for (const SimulatedOp& o : sim.stages[(size_t)r]) {
            out[(size_t)r].push_back(Op{op_letter(o.op.kind), o.op.microbatch, o.op.chunk, o.t0, o.t1});
            t_end = std::max(t_end, o.t1);
        }
    for (int r = 0; r < p && post; r++)
        for (const SimulatedOp& o : sim.next[(size_t)r])
            if (o.t0 < t_end) out[(size_t)r].push_back(Op{op_letter(o.op.kind), o.op.microbatch, o.op.chunk, o.t0, std::min(o.t1, t_end), true});
    return out;
}

// ---- a recorded step ------------------------------------------------------------------------------------------
struct Recorded {
    std::vector<std::vector<Op>> stages;  // the ops of the drawn rank of each stage, times in ms from the step's start
    std::string schedule;
    int pp = 1, micro = 0, chunks = 1, step = 0;
};

Recorded read_trace(const std::string& path, int want_step) {
    std::ifstream f(path);
    if (!f) die("cannot open " + path);
    nlohmann::json doc;
    try {
        f >> doc;
    } catch (const std::exception& e) {
        die(path + " is not JSON: " + e.what());
    }
    if (!doc.contains("traceEvents") || !doc.contains("otherData")) die(path + " is not a trainer's --trace file (no traceEvents / otherData)");
    const auto& other = doc["otherData"];
    Recorded rec;
    rec.pp = other.value("pp", 1);
    rec.micro = other.value("micro_batches", 0);
    rec.chunks = other.value("chunks", 1);
    rec.schedule = other.value("schedule", std::string("?"));
    const int per_stage = other.value("ranks_per_stage", 1);
    const int first = other["steps"][0].get<int>(), last = other["steps"][1].get<int>();
    rec.step = want_step ? want_step : first;
    if (rec.step < first || rec.step > last)
        die("--step " + std::to_string(rec.step) + ": the file records steps " + std::to_string(first) + " to " + std::to_string(last));
    // Each rank's step marks ("step N" instants), to tell its steps apart.
    std::map<int, std::vector<std::pair<double, int>>> marks;
    for (const auto& e : doc["traceEvents"])
        if (e.value("ph", "") == "i" && e.value("cat", "") == "step") marks[e["pid"].get<int>()].push_back({e["ts"].get<double>(), e["args"]["step"].get<int>()});
    auto step_of = [&](int pid, double ts) {  // the last mark at or before ts (1 µs of rounding allowed)
        double at = -INFINITY;
        int s = 0;
        for (const auto& m : marks[pid])
            if (m.first <= ts + 1.0 && m.first > at) at = m.first, s = m.second;
        return s;
    };
    rec.stages.assign((size_t)rec.pp, {});
    double t_min = INFINITY, t_max = -INFINITY;
    std::vector<std::pair<int, Op>> later;  // the next step's ops (pid's stage, op), kept if they overlap this one
    for (const auto& e : doc["traceEvents"]) {
        const std::string cat = e.value("cat", "");
        if (e.value("ph", "") != "X" || (cat != "compute" && cat != "optimizer")) continue;
        const std::string name = e.value("name", "");
        char kind = 0;
        int j = 0, c = 0;
        if (cat == "optimizer") kind = name.rfind("rollback", 0) == 0 ? 'R' : 'O';
        else if (sscanf(name.c_str(), "%c%d.%d", &kind, &j, &c) != 3 || !strchr("FBW", kind)) continue;
        const int pid = e["pid"].get<int>();
        if (pid % per_stage != 0 || pid / per_stage >= rec.pp) continue;  // the first rank of each stage
        const double ts = e["ts"].get<double>(), te = ts + e["dur"].get<double>();
        const int s = step_of(pid, ts);
        if (s == rec.step + 1 && cat == "compute") later.push_back({pid / per_stage, Op{kind, j, c, ts, te, true}});
        if (s != rec.step) continue;
        rec.stages[(size_t)(pid / per_stage)].push_back(Op{kind, j, c, ts, te});
        if (cat == "compute") t_min = std::min(t_min, ts), t_max = std::max(t_max, te);
    }
    for (auto& [stage, op] : later)  // the post-validation overlap: the next step's ops before this one's end
        if (op.t0 < t_max) op.t1 = std::min(op.t1, t_max), rec.stages[(size_t)stage].push_back(op);
    size_t n = 0;
    for (const auto& s : rec.stages) n += s.size();
    if (n == 0)
        die(path + " holds no schedule ops for step " + std::to_string(rec.step) +
            " (events of cat \"compute\" named like F3.0: the pipeline executor records them)");
    for (auto& s : rec.stages)
        for (Op& o : s) o.t0 = (o.t0 - t_min) / 1000, o.t1 = (o.t1 - t_min) / 1000;  // µs -> ms from the start
    return rec;
}

// ---- the picture and the idle shares ---------------------------------------------------------------------------
// The formula's idle share (recompute/formulas.h: 1F1B, ZB-H1, ZB-H2 with one chunk) at the mean op times of
// the whole pipeline, next to what the picture shows: the times measured on each stage, and their mean.
void report_formula(const std::vector<std::vector<Op>>& stages, int chunks, const std::string& schedule, int M,
                    const std::string& unit) {
    BubbleSchedule bs;
    if (chunks != 1 || !parse_bubble_schedule(schedule.c_str(), &bs)) return;
    double sum[3] = {0, 0, 0};
    int n[3] = {0, 0, 0};
    for (size_t r = 0; r < stages.size(); r++) {
        double st[3] = {0, 0, 0};
        int sn[3] = {0, 0, 0};
        for (const Op& o : stages[r]) {
            if (o.next || !strchr("FBW", o.kind)) continue;
            const int k = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : 2;
            st[k] += o.t1 - o.t0, sn[k]++;
            sum[k] += o.t1 - o.t0, n[k]++;
        }
        printf("stage %zu: T_F %.3f, T_B %.3f, T_W %.3f %s (means over its ops)\n", r, sn[0] ? st[0] / sn[0] : 0.0,
               sn[1] ? st[1] / sn[1] : 0.0, sn[2] ? st[2] / sn[2] : 0.0, unit.c_str());
    }
    const double tf = n[0] ? sum[0] / n[0] : 0, tb = n[1] ? sum[1] / n[1] : 0, tw = n[2] ? sum[2] / n[2] : 0;
    const int p = (int)stages.size();
    printf("formula (%s, p %d, M %d) at the pipeline's mean T_F %.3f, T_B %.3f, T_W %.3f %s: bubble %.3f %s per stage, "
           "idle share %.3f\n", schedule.c_str(), p, M, tf, tb, tw, unit.c_str(), pipeline_bubble_time(bs, p, M, tf, tb, tw),
           unit.c_str(), pipeline_idle_share(bs, p, M, tf, tb, tw));
}

void report_and_draw(const std::vector<std::vector<Op>>& stages, int chunks, const std::string& title, const std::string& subtitle,
                     const std::string& unit, const std::string& out) {
    double t0 = INFINITY, t1 = -INFINITY;  // the step: its own ops (not the next step's, nor the optimizer's)
    for (const auto& s : stages)
        for (const Op& o : s)
            if (!o.next && strchr("FBW", o.kind)) t0 = std::min(t0, o.t0), t1 = std::max(t1, o.t1);
    const double step = t1 - t0;
    TimelineChart chart;
    chart.title = title;
    chart.subtitle = subtitle;
    chart.x_label = "time (" + unit + ")";
    chart.legend = {"F forward", "B backward"};
    bool has_w = false, has_o = false, has_r = false, has_next = false;
    for (size_t r = 0; r < stages.size(); r++) {
        chart.rows.push_back("stage " + std::to_string(r));
        double busy = 0;
        size_t ops = 0;
        for (const Op& o : stages[r]) {
            const bool op = strchr("FBW", o.kind) != nullptr;
            if (op && !o.next) busy += o.t1 - o.t0, ops++;
            has_w = has_w || o.kind == 'W', has_o = has_o || o.kind == 'O', has_r = has_r || o.kind == 'R';
            has_next = has_next || o.next;
            const std::string label = !op ? std::string(1, o.kind)
                                          : std::to_string(o.microbatch) + (chunks > 1 ? "." + std::to_string(o.chunk) : "") +
                                                (o.next ? "'" : "");
            chart.boxes.push_back(TimelineBox{(int)r, o.t0, o.t1, kind_color(o.kind), label});
        }
        const double idle = step - busy;
        printf("stage %zu: %zu ops, busy %.3f %s, idle %.3f %s, idle share %.3f\n", r, ops, busy, unit.c_str(), idle,
               unit.c_str(), step > 0 ? idle / step : 0.0);
    }
    if (has_w || has_o || has_r) chart.legend.push_back("W weight gradient");
    if (has_o || has_r) chart.legend.push_back("O optimizer step");
    if (has_r) chart.legend.push_back("R rollback (post-validation)");
    if (has_next) chart.subtitle += "; j': next step";
    printf("step time %.3f %s (first op's start to last op's end)\n", step, unit.c_str());
    std::string err;
    if (!write_timeline_png(chart, out, &err)) {
        fprintf(stderr, "error: %s\n", err.c_str());
        exit(1);
    }
    printf("wrote %s\n", out.c_str());
}

void usage() {
    printf(
        "usage: draw_pipeline TRACE.json [--step N] --out FILE.png\n"
        "       draw_pipeline --ideal --pp P --micro M --schedule 1f1b|afab|interleaved|zb-h1|zb-h2|zb-v [--chunks m]\n"
        "                     [--tf X --tb Y --tw Z] [--post-validation] --out FILE.png\n"
        "One row per pipeline stage, each op a box (F blue, B orange, W green) labelled with its micro-batch; the\n"
        "trainer's --trace file (a recorded step, each stage's first rank), or the ideal schedule with ops of\n"
        "times tf, tb, tw (default 1) and free communication. Prints each stage's idle share of the step.\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string trace, out, schedule;
    bool ideal = false, post = false;
    int pp = 0, micro = 0, chunks = 0, step = 0;
    double tf = 1, tb = 1, tw = 1;
    auto number = [&](int& i, const char* flag) {
        if (i + 1 >= argc) die(std::string(flag) + " needs a value");
        char* end = nullptr;
        const double v = strtod(argv[++i], &end);
        if (!end || *end || !(v > 0)) die(std::string(flag) + " expects a positive number, got '" + argv[i] + "'");
        return v;
    };
    auto count = [&](int& i, const char* flag) {
        const double v = number(i, flag);
        if (v != std::floor(v) || v > 4096) die(std::string(flag) + " expects a whole number from 1 to 4096, got '" + argv[i] + "'");
        return (int)v;
    };
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            usage();
            return 0;
        }
        if (a == "--ideal") ideal = true;
        else if (a == "--post-validation") post = true;
        else if (a == "--out" && i + 1 < argc) out = argv[++i];
        else if (a == "--schedule" && i + 1 < argc) schedule = argv[++i];
        else if (a == "--pp") pp = count(i, "--pp");
        else if (a == "--micro") micro = count(i, "--micro");
        else if (a == "--chunks") chunks = count(i, "--chunks");
        else if (a == "--step") step = count(i, "--step");
        else if (a == "--tf") tf = number(i, "--tf");
        else if (a == "--tb") tb = number(i, "--tb");
        else if (a == "--tw") tw = number(i, "--tw");
        else if (a[0] == '-') die("unknown flag or missing value: " + a);
        else trace = a;
    }
    if (out.empty()) die("--out FILE.png is needed");
    if (!ideal) {
        if (trace.empty()) die("give a --trace file to draw, or --ideal");
        const Recorded rec = read_trace(trace, step);
        char sub[200];
        snprintf(sub, sizeof sub, "%s, p %d, M %d%s; measured, stage s drawn from its first rank", rec.schedule.c_str(), rec.pp, rec.micro,
                 rec.chunks > 1 ? (", m " + std::to_string(rec.chunks)).c_str() : "");
        report_and_draw(rec.stages, rec.chunks, "Pipeline schedule, step " + std::to_string(rec.step) + " as recorded", sub, "ms", out);
        report_formula(rec.stages, rec.chunks, rec.schedule, rec.micro, "ms");
        return 0;
    }
    if (!trace.empty()) die("--ideal draws the schedule itself: leave out the trace file " + trace);
    if (pp < 1 || micro < 1 || schedule.empty()) die("--ideal needs --pp P, --micro M and --schedule");
    const PipeSchedule* s = nullptr;
    std::string names;
    for (const auto& k : kSchedules) {
        if (schedule == k.first) s = &k.second;
        names += std::string(names.empty() ? "" : "|") + k.first;
    }
    if (!s) die("--schedule " + schedule + " is not one of parallel/pipeline_schedule.h's: " + names);
    if (chunks == 0) chunks = *s == PipeSchedule::Interleaved || *s == PipeSchedule::ZeroBubbleV ? 2 : 1;
    const std::string problem = pipe_schedule_problem(*s, pp, micro, chunks);
    if (!problem.empty()) die(problem);
    // The bubble rate (idle over busy time): the paper's (p-1)/(m*M) for the 1F1B family, recompute/formulas.h's
    // at these times for the zero-bubble ones (there B and W are apart; 1F1B's backward takes tb + tw).
    BubbleSchedule bs;
    const bool zb = is_zero_bubble(*s);
    parse_bubble_schedule(schedule.c_str(), &bs);
    const PipeSimulation sim = pipe_simulate(*s, pp, micro, chunks, tf, tb, tw, post);
    const double rate = sim.idle[0] / sim.busy;  // the simulation's (the closed forms', where formulas.h gives one)
    char sub[240];
    snprintf(sub, sizeof sub, "p %d, M %d%s%s; tf %g, tb %g, tw %g; communication free; bubble rate %s = %.3f%s", pp, micro,
             chunks > 1 ? (", m " + std::to_string(chunks)).c_str() : "", *s == PipeSchedule::ZeroBubbleV ?
             " (V: stage r holds chunks r and 2p-1-r)" : "", tf, tb, tw, zb ? "(formulas)" : "(p-1)/(m*M)", rate,
             post ? "; post-validated" : "");
    const std::vector<std::vector<Op>> stages = simulate(*s, pp, micro, chunks, tf, tb, tw, post);
    report_and_draw(stages, chunks, std::string("Pipeline schedule ") + schedule + " (ideal)", sub, "units", out);
    report_formula(stages, chunks, schedule, micro, "units");
    if (post) {  // the steady period of steps without a synchronization between them, and its formula
        const double closed = pipeline_bubble_time_post_validated(bs, pp, micro, tf, tb, tw);
        printf("post-validated: steady period %.3f units, idle %.3f units per stage per step (formula without the end "
               "triangle: %s)\n", sim.step, sim.idle[0], std::isnan(closed) ? "none here" : std::to_string(closed).c_str());
    }
    return 0;
}
