// beyond_paper.cu — the comparison the paper left open, at its scale (see the header).
#include "tools/beyond_paper.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include "parallel/offload_schedule.h"
#include "recompute/formulas.h"
#include "recompute/memory_techniques.h"
#include "tools/chart.h"

namespace {

const double GiB = 1024.0 * 1024.0 * 1024.0;

// ---- the techniques and their combinations ----------------------------------------------------------------------
// The activations' layout: the paper's tensor-parallel baseline, its full-recompute baseline (Table 5), SP alone
// and the paper's SP + selective recompute.
struct Activations {
    const char* label;
    bool sp;
    Recompute rc;
};
const Activations kActivations[] = {{"TP", false, Recompute::None},
                                    {"full", false, Recompute::Full},
                                    {"SP+sel", true, Recompute::Selective},
                                    {"SP", true, Recompute::None}};
constexpr int kNumActivations = 4;
// Offloading: none; each chunk's first k layers, every micro-batch (Megatron's --cpu-offloading-num-layers; k
// the fewest that make the combination fit, else every layer); the first-stage policy (the micro-batches the
// stage holds beyond the last stage's count, every layer).
enum class Offload { None, Layers, FirstStage };

struct Combination {
    int act = 0, zero = 0;
    Offload offload = Offload::None;
    int k = 0;  // Offload::Layers: the layers per chunk moved
};

// What one GPU of the first stage holds and what its step moves, under one combination.
struct Outcome {
    Combination c;
    std::string name;
    double weights = 0, gradients = 0, optimizer = 0, activations = 0, gathered = 0, offloaded = 0;  // bytes
    double device() const { return weights + gradients + optimizer + activations + gathered; }
    bool fits = false;
    int offload_layers = 0;                  // k (Offload::Layers)
    double recompute_flops = 0;              // beyond the model FLOPs, share of them
    double recompute_s = 0;                  // their time at the paper's measured rate
    double dp_bytes = 0, dp_extra_s = 0;     // DP bytes per GPU per step; time beyond the all-reduce's
    double host_bytes = 0, host_s = 0;       // each way per step; its time at the host link
    double host_exposed_s = 0;               // the part no layer's forward hides (per moved layer)
    double cost_s() const { return recompute_s + dp_extra_s + host_exposed_s; }
};

std::string combination_name(const Combination& c) {
    std::string s = kActivations[c.act].label;
    if (c.zero > 0) s += " + ZeRO-" + std::to_string(c.zero);
    if (c.offload == Offload::Layers) s += " + off k=" + std::to_string(c.k);
    if (c.offload == Offload::FirstStage) s += " + off 1st";
    return s;
}

Outcome evaluate(const BeyondModel& m, const Combination& c, double gpu_bytes) {
    Outcome o;
    o.c = c;
    o.name = combination_name(c);
    const Activations& act = kActivations[c.act];
    ModelFormulaInput in = m.shape;
    in.sp = act.sp, in.rc = act.rc, in.d = 2;
    const int p = in.p, chunks = in.m, Lc = (int)(in.L / (p * chunks));
    // The model states by kind (formulas.h's table; the ZeRO paper's accounting but fp32 gradients).
    const StageParams sp = stage_params(in.L, in.h, m.vocab, in.s, in.t, p, 0);
    const double params = sp.total();
    const int d = m.dp;
    const ZeroStateKinds k = zero_state_kinds(d > 1 ? c.zero : 0, true);
    auto per = [&](int i) { return k.bytes[i] * params / (k.sharded[i] ? d : 1); };
    o.weights = per(0), o.gradients = per(1), o.optimizer = per(2) + per(3) + per(4);
    // ZeRO's step: units of one layer and of the edges (the first stage embeds; at p = 1 it also ends in the head).
    ZeroStepInput z;
    z.stage = c.zero, z.d = d, z.weight_bytes = 2, z.micro_batches = m.M;
    if (c.zero == 1) {
        z.units.edges = params;
    } else {
        z.units.layer = sp.layer_params / sp.layers, z.units.layers = (int)sp.layers, z.units.layers_per_chunk = Lc;
        z.units.edges = sp.word_embedding + sp.position_embedding + sp.final_ln;
        z.units.edges_forward = true, z.units.edges_backward = p == 1;
    }
    const ZeroStepFormula zf = zero_step_formula(z);
    if (c.zero >= 2) o.gradients += zf.bucket_peak;
    if (c.zero == 3) o.gathered = zf.gathered_peak;
    const double all_reduce = zero_step_formula({0, d, 2, m.M, 1, z.units}).all_reduce;  // the plain DP path's
    o.dp_bytes = c.zero == 0 ? all_reduce : zf.total();
    o.dp_extra_s = std::max(0.0, transfer_seconds(o.dp_bytes - all_reduce, kDataParallelBytesPerSecond));
    // Activations at the first stage's peak: its layers (less what offloading moved), outside the layers, and
    // the one layer a recompute rebuilds.
    const double layer = layer_bytes(in.layer());
    double device_layers = m.in_flight * Lc;
    if (c.offload != Offload::None) {
        const std::vector<PipeOp> ops = offload_stage_ops(m.schedule, p, 0, m.M, chunks);
        std::vector<std::vector<bool>> plan;
        if (c.offload == Offload::FirstStage)
            plan = offload_in_flight_plan(ops, m.M, chunks, offload_last_stage_keep(m.schedule, p, m.M, chunks));
        o.offload_layers = c.offload == Offload::Layers ? c.k : Lc;
        const OffloadScheduleCounts oc = offload_schedule_counts(ops, false, chunks, Lc, [&](int j, int ch, int i) {
            return c.offload == Offload::Layers ? i < c.k : plan[(size_t)j][(size_t)ch];
        });
        device_layers = 0;
        for (const auto& row : oc.device)
            for (int x : row) device_layers += x;
        const double moved = offload_layer_bytes(in.layer());
        o.offloaded = oc.host_peak * moved;
        o.host_bytes = oc.moved * moved;
        o.host_s = transfer_seconds(o.host_bytes, kHostLinkBytesPerSecond);
        // A layer's copy out hides behind the next layer's forward (its copy back behind a backward, twice as
        // long): at the paper's measured rate per GPU.
        const double gpu_s_per_flop = m.iter_seconds * (in.t * p * d) / hardware_flops_selective(m.global_batch, in.L, in.s, in.h, in.v);
        const double forward_s = layer_train_flops(in.layer()) / 3 * gpu_s_per_flop;
        o.host_exposed_s = oc.moved * std::max(0.0, transfer_seconds(moved, kHostLinkBytesPerSecond) - forward_s);
    }
    o.activations = device_layers * layer + first_stage_extra_bytes(in, m.embed_in_flight) + recompute_transient_bytes(in.layer());
    o.fits = o.device() <= gpu_bytes;
    // Recompute: the FLOPs beyond the model's, at the paper's measured rate (its SP + selective iteration).
    const double model = model_flops(m.global_batch, in.L, in.s, in.h, in.v);
    const double hw = hardware_flops(act.rc, m.global_batch, in.L, in.s, in.h, in.v);
    o.recompute_flops = hw / model - 1;
    o.recompute_s = (hw - model) * m.iter_seconds / hardware_flops_selective(m.global_batch, in.L, in.s, in.h, in.v);
    return o;
}

// Offloading k layers of each chunk: the fewest that make the combination fit, else all of them.
Outcome evaluate_fewest(const BeyondModel& m, Combination c, double gpu_bytes) {
    if (c.offload != Offload::Layers) return evaluate(m, c, gpu_bytes);
    const int Lc = (int)(m.shape.L / (m.shape.p * m.shape.m));
    for (c.k = 1; c.k < Lc; c.k++) {
        const Outcome o = evaluate(m, c, gpu_bytes);
        if (o.fits) return o;
    }
    return evaluate(m, c, gpu_bytes);  // k = Lc
}

// The single techniques: each on the TP baseline (or the paper's layouts themselves).
std::vector<Combination> single_techniques() {
    return {{0, 0, Offload::None},      {1, 0, Offload::None}, {2, 0, Offload::None}, {0, 1, Offload::None},
            {0, 2, Offload::None},      {0, 3, Offload::None}, {0, 0, Offload::Layers}, {0, 0, Offload::FirstStage}};
}
std::vector<Combination> every_combination() {
    std::vector<Combination> all;
    for (int a = 0; a < kNumActivations; a++)
        for (int z = 0; z < 4; z++)
            for (Offload o : {Offload::None, Offload::Layers, Offload::FirstStage}) all.push_back({a, z, o, 0});
    return all;
}

std::string single_label(const Outcome& o) {
    const Combination& c = o.c;
    if (c.offload == Offload::Layers) return "offload k=" + std::to_string(c.k);
    if (c.offload == Offload::FirstStage) return "offload 1st";
    if (c.zero > 0) return "ZeRO-" + std::to_string(c.zero);
    return c.act == 0 ? "none (TP)" : c.act == 1 ? "full recompute" : "SP + selective";
}

}  // namespace

void print_beyond_paper(const std::vector<BeyondModel>& models, double gpu_bytes) {
    printf("\nBeyond the paper: ZeRO sharding and activation offloading next to SP + selective recompute (not in the\n"
           "  paper, which names both as complementary). One GPU of the first pipeline stage, bf16 mixed precision (model\n"
           "  states 2 + 4 + 12 bytes per parameter, fp32 gradients: 18 | 6 + 12/d | 2 + 16/d | 18/d), GiB. ZeRO shards\n"
           "  over the d data-parallel GPUs (d = 1 in Table 3's runs: it then shards nothing); ZeRO-2/3 add their\n"
           "  gradient buckets, ZeRO-3 its gathered weights (a layer, the next one, the embeddings). 'offload k': each\n"
           "  model chunk's first k layers, every micro-batch, k the fewest that fit (else all); 'offload 1st': every\n"
           "  layer of the micro-batches the stage holds beyond the last stage's count (the paper's future work).\n"
           "  'SP': sequence parallelism without recompute. Costs per step: recompute FLOPs beyond the\n"
           "  model's, at the paper's measured SP + selective rate; DP bytes beyond the all-reduce at %.0f GB/s per\n"
           "  GPU; host-link bytes (each way) at %.0f GB/s, 'exposed' = what the next layer's forward does not hide.\n"
           "  recompute/memory_techniques.h; docs/paper.md \"Beyond the paper\".\n",
           kDataParallelBytesPerSecond / 1e9, kHostLinkBytesPerSecond / 1e9);
    for (const BeyondModel& m : models) {
        printf("\n%s: t %d, p %d, m %d, d %d, %d micro-batch%s per step; SP + selective step %.2f s (the paper's)\n", m.name.c_str(),
               m.shape.t, m.shape.p, m.shape.m, m.dp, m.M, m.M == 1 ? "" : "es", m.iter_seconds);
        printf("  %-16s %7s %7s %7s %7s %7s %8s %7s %-4s | %9s %7s %9s %9s %8s %8s\n", "technique", "weights", "grads", "optim",
               "activ", "gather", "GPU", "host", "fits", "recompute", "time s", "DP GB", "DP+ s", "host GB", "exposed");
        for (const Combination& c : single_techniques()) {
            const Outcome o = evaluate_fewest(m, c, gpu_bytes);
            printf("  %-16s %7.1f %7.1f %7.1f %7.1f %7.1f %8.1f %7.1f %-4s | %8.1f%% %7.3f %9.2f %9.3f %8.1f %8.3f\n",
                   single_label(o).c_str(), o.weights / GiB, o.gradients / GiB, o.optimizer / GiB, o.activations / GiB,
                   o.gathered / GiB, o.device() / GiB, o.offloaded / GiB, o.fits ? "yes" : "no", 100 * o.recompute_flops,
                   o.recompute_s, o.dp_bytes / 1e9, o.dp_extra_s, o.host_bytes / 1e9, o.host_exposed_s);
        }
        std::vector<Outcome> fit;
        for (const Combination& c : every_combination()) {
            const Outcome o = evaluate_fewest(m, c, gpu_bytes);
            if (o.fits && (m.dp > 1 || c.zero == 0)) fit.push_back(o);  // at d = 1 every ZeRO stage is "none"
        }
        std::stable_sort(fit.begin(), fit.end(), [](const Outcome& a, const Outcome& b) { return a.cost_s() < b.cost_s(); });
        printf("  %zu combination%s fit in %.0f GiB%s", fit.size(), fit.size() == 1 ? "" : "s", gpu_bytes / GiB,
               fit.empty() ? "\n" : ", cheapest first (GiB, cost = recompute + DP beyond the all-reduce + exposed host link, s per step):\n");
        std::string line = "   ";
        for (const Outcome& o : fit) {
            char item[96];
            snprintf(item, sizeof item, " %s (%.1f, %.3f);", o.name.c_str(), o.device() / GiB, o.cost_s());
            if (line.size() + strlen(item) > 116) printf("%s\n", line.c_str()), line = "   ";
            line += item;
        }
        if (!fit.empty()) printf("%s\n", line.c_str());
        if (fit.empty()) continue;
        // The verdict: the cheapest, and how far the cheapest of another kind is behind it (without selective
        // recompute when the cheapest has it, else with it).
        const Outcome& best = fit[0];
        const bool best_selective = best.c.act == 2;
        const Outcome* other = nullptr;
        for (const Outcome& o : fit)
            if ((o.c.act == 2) != best_selective) {
                other = &o;
                break;
            }
        printf("  conclusion: %s is the cheapest that fits, %.3f s per step (%.1f%% of it)", best.name.c_str(), best.cost_s(),
               100 * best.cost_s() / m.iter_seconds);
        if (other)
            printf("; the cheapest %s, %s, costs %.3f s (%.1fx)", best_selective ? "without selective recompute" : "with it",
                   other->name.c_str(), other->cost_s(), best.cost_s() > 0 ? other->cost_s() / best.cost_s() : INFINITY);
        printf("\n");
    }
}

bool write_beyond_paper_chart(const std::vector<BeyondModel>& models, double gpu_bytes, const std::string& path,
                              std::string* error) {
    BarChart c;
    c.title = "Memory per GPU of the first pipeline stage, by technique (paper-scale models, bf16, GiB)";
    c.subtitle = "stacked by kind; 'offloaded' lies in host memory, above the GPU's share; the dashed line is the GPU's 80 GiB";
    c.y_label = "GiB";
    c.series = {"weights", "gradients", "optimizer", "activations", "gathered", "offloaded (host)"};
    c.values.assign(c.series.size(), {});
    c.stacked = true;
    c.value_format = "";
    c.width = 2600, c.height = 900;
    c.y_max = NAN;  // automatic: above the tallest stack
    c.reference_lines = {gpu_bytes / GiB};
    c.reference_labels = {"80 GiB"};
    const char* shorts[] = {"none", "full", "SP+sel", "Z1", "Z2", "Z3", "off k", "off 1st"};  // single_techniques()
    for (const BeyondModel& m : models) {
        c.groups.push_back(m.name + ":");  // an empty slot that names the model
        for (auto& v : c.values) v.push_back(NAN);
        int i = 0;
        for (const Combination& comb : single_techniques()) {
            const Outcome o = evaluate_fewest(m, comb, gpu_bytes);
            c.groups.push_back(shorts[i++]);
            const double kinds[] = {o.weights, o.gradients, o.optimizer, o.activations, o.gathered, o.offloaded};
            for (size_t s = 0; s < c.series.size(); s++) c.values[s].push_back(kinds[s] / GiB);
        }
    }
    return write_bar_chart_png(c, path, error);
}
