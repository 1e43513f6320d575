// memory_report.cu — measured vs formula activation bytes (see the header).
#include "memory_report.h"
#include "table2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

static bool is_extra(const std::string& name) {
    return name == "ln1_mean" || name == "ln1_rstd" || name == "ln2_mean" || name == "ln2_rstd";
}
static bool is_model_extra(const std::string& name) {
    return name == "lnf_mean" || name == "lnf_rstd" || name == "ce_rowmax" || name == "ce_sumexp";
}

MemoryReport build_memory_report(const std::vector<ActivationRecord>& live, const ModelFormulaInput& shape,
                                 const InFlightLayers& in_flight) {
    MemoryReport r;
    r.shape = shape;
    r.formula = layer_terms(shape.layer());
    r.per_layer_formula = layer_bytes(shape.layer());
    int L = (int)shape.L;
    std::vector<int> count = in_flight.per_layer.empty() ? std::vector<int>(L, 1) : in_flight.per_layer;
    count.resize(L, 0);
    // The terms outside the layers: the embedding's dropout mask for each micro-batch the first stage holds,
    // the head's tensors for each the last stage holds.
    ModelFormulaInput one = shape;
    one.p = 1;
    for (FormulaTerm t : model_extra_terms(one)) {
        t.bytes *= std::string(t.name) == "embed_drop_mask" ? in_flight.embedding : in_flight.head;
        if (t.bytes > 0) r.model_terms.push_back(t);
    }
    std::vector<double> per_layer(L, 0.0), per_layer_extra(L, 0.0);
    int first_held = -1;
    for (int l = 0; l < L && first_held < 0; l++)
        if (count[l] > 0) first_held = l;
    for (const ActivationRecord& a : live) {
        if (a.name.rfind("tmp:", 0) == 0 || a.name.rfind("w:", 0) == 0) continue;  // transients; W inputs: apart
        if (a.layer == kModelLevel) {
            r.model_tensors_measured[a.name] += a.bytes;
            if (is_model_extra(a.name)) r.model_extras += a.bytes;
            else r.model_measured += a.bytes;
            continue;
        }
        if (a.layer < 0 || a.layer >= L) continue;
        if (is_extra(a.name)) per_layer_extra[a.layer] += a.bytes;
        else per_layer[a.layer] += a.bytes;
        if (a.layer == first_held) r.tensors[a.name] += (double)a.bytes / count[a.layer];
    }
    // Per micro-batch: a layer's bytes over the micro-batches it holds (exact when each holds the same).
    r.first_layer = std::max(first_held, 0);
    if (first_held >= 0) {
        r.per_layer_measured = per_layer[first_held] / count[first_held];
        r.per_layer_extras = per_layer_extra[first_held] / count[first_held];
    }
    for (int l = 0; l < L; l++) {
        if (count[l] == 0) {
            if (per_layer[l] != 0) r.layers_identical = false;  // a layer this stage should not hold
            continue;
        }
        if (per_layer[l] != r.per_layer_measured * count[l] || per_layer_extra[l] != r.per_layer_extras * count[l])
            r.layers_identical = false;
        r.in_flight_layers += count[l];
        r.stage_layers_measured += per_layer[l];
        r.model_extras += per_layer_extra[l];
    }
    r.stage_layers_formula = r.in_flight_layers * r.per_layer_formula;
    r.model_measured += r.stage_layers_measured;
    r.model_formula = r.stage_layers_formula;
    for (const FormulaTerm& t : r.model_terms) r.model_formula += t.bytes;
    return r;
}

void add_model_state(MemoryReport& r, const ModelStateMemory& measured, const ModelStateFormula& formula) {
    r.have_model_state = true;
    r.model_state = measured;
    r.model_state_formula = formula;
}

static std::string human(double bytes) {
    char b[64];
    if (bytes >= 1e9) snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(b, sizeof b, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1e3) snprintf(b, sizeof b, "%.1f kB", bytes / 1e3);
    else snprintf(b, sizeof b, "%.0f B", bytes);
    return b;
}

// The model states: each kind measured next to bytes/parameter × parameters (recompute/model_state_memory.h),
// then the total with the activations.
static void print_model_state(FILE* f, const MemoryReport& r) {
    const ModelStateMemory& m = r.model_state;
    const ModelStateFormula& F = r.model_state_formula;
    fprintf(f, "\nModel states on this rank (measured by their tagged account, next to bytes/parameter x parameters)\n");
    // Under CP the ranks that hold the same weights are the data- and the context-parallel ones (dp x cp).
    const char* group = r.shape.c > 1 ? "data- and context-parallel" : "data-parallel";
    if (F.distributed)
        fprintf(f, "  %lld local parameters; %s over %d %s ranks: buffers padded to %lld (+%lld),\n"
                   "  shards of %lld; formula %s bytes/parameter x %lld\n", (long long)F.n, F.stage == 1 ? "distributed optimizer"
                : F.stage == 2 ? "ZeRO-2" : "ZeRO-3", F.d, group, (long long)F.padded, (long long)(F.padded - F.n),
                (long long)(F.padded / F.d), F.per_param_text, (long long)F.padded);
    else
        fprintf(f, "  %lld local parameters, every optimizer state whole on this rank (%d %s rank%s); formula %s\n"
                   "  bytes/parameter x %lld\n",
                (long long)F.n, F.d, group, F.d == 1 ? "" : "s", F.per_param_text, (long long)F.n);
    fprintf(f, "  %-16s %14s %14s %10s %12s\n", "state", "measured", "formula", "diff", "bytes/param");
    const char* sh = "fp32, this rank's shard", *note[kNumStateKinds] = {F.bf16 ? (F.sharded[0] ? "bf16, this rank's shard" : "bf16 compute copy")
        : "none: the fp32 master weights are the compute weights", F.sharded[1] ? sh : "fp32", F.bf16 ? (F.sharded[2] ? sh : "fp32")
        : F.sharded[2] ? "fp32 (the weights), this rank's shard" : "fp32 (the weights)", F.sharded[3] ? sh : "fp32", F.sharded[4] ? sh : "fp32"};
    for (int k = 0; k < kNumStateKinds; k++)
        fprintf(f, "  %-16s %14lld %14lld %10lld %12.4g   %s\n", model_state_name(k), (long long)m.bytes[k], (long long)F.bytes[k],
                (long long)(m.bytes[k] - F.bytes[k]), (double)F.bytes[k] / (double)F.padded, note[k]);
    fprintf(f, "  %-16s %14lld %14lld %10lld %12.4g   (%s)\n", "total", (long long)m.total(), (long long)F.total,
            (long long)(m.total() - F.total), F.per_param, human((double)m.total()).c_str());
    fprintf(f, "  %-16s %14lld %14lld %10lld %12s   %s\n", "optimizer state", (long long)m.optimizer(F.bf16), (long long)F.optimizer,
            (long long)(m.optimizer(F.bf16) - F.optimizer), "-", F.bf16 ? "master + moments" : "moments");
    const double acts = r.model_measured + r.model_extras;
    fprintf(f, "  model states + saved activations: %s + %s = %s on this rank\n", human((double)m.total()).c_str(),
            human(acts).c_str(), human((double)m.total() + acts).c_str());
}

void print_memory_report(FILE* f, const MemoryReport& r) {
    const ModelFormulaInput& s = r.shape;
    fprintf(f, "\nActivation memory saved for backward on this rank (measured by the allocator, at the schedule's peak)\n");
    if (r.pp > 1 || r.microbatches > 1)
        fprintf(f, "  pipeline stage %d of %d, schedule %s, %d micro-batches per step: %d layer-micro-batches in flight\n",
                r.pp_rank, r.pp, r.schedule.c_str(), r.microbatches, r.in_flight_layers);
    fprintf(f, "  s=%.0f b=%.0f h=%.0f a=%.0f L=%.0f v(padded)=%.0f  t=%d sp=%s recompute=%s attention=%s  activations %d bytes/element, masks 1 byte\n",
            s.s, s.b, s.h, s.a, s.L, s.v, s.t, s.sp ? "on" : "off", recompute_name(s.rc), attention_name(s.attention), s.d);
    // Context parallelism: the formula column is at s/c (recompute/memory_formulas.h); say so where s is printed.
    // Nothing is added at c = 1, so a run without CP prints what it always printed.
    if (s.c > 1) {
        char split[96] = "";
        if (s.sp && s.t > 1)
            snprintf(split, sizeof split, "; SP splits them by t outside the TP regions (%g there)", s.s / s.c / s.t);
        fprintf(f, "  cp %d: this rank holds s/c = %g of %.0f tokens, chunks r and 2c-1-r of 2c = %d (ring attention)%s\n",
                s.c, s.s / s.c, s.s, 2 * s.c, split);
    }
    if (s.attention == Attention::Flash && s.rc == Recompute::Selective)
        fprintf(f, "  note: selective recompute has nothing left to drop under flash attention: the s x s tensors (probs,\n"
                   "        attn_mask, probs_drop) are never stored, the kernel rebuilds them tile by tile in the backward pass\n"
                   "        from the saved lse (4asb/t bytes, fp32), which is kept; the layer keeps what recompute=none keeps.\n");
    char first[32];
    snprintf(first, sizeof first, "layer %d tensor", r.first_layer);
    fprintf(f, "  %-16s %14s %14s %10s\n", first, "measured", "formula", "diff");
    std::set<std::string> shown;
    for (const FormulaTerm& t : r.formula) {
        double m = r.tensors.count(t.name) ? r.tensors.at(t.name) : 0.0;
        fprintf(f, "  %-16s %14.0f %14.0f %10.0f\n", t.name, m, t.bytes, m - t.bytes);
        shown.insert(t.name);
    }
    for (auto& kv : r.tensors) {
        if (shown.count(kv.first) || is_extra(kv.first)) continue;
        fprintf(f, "  %-16s %14.0f %14s %10s   (not in the paper's list)\n", kv.first.c_str(), kv.second, "-", "-");
    }
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   per layer (%s)%s\n", "total", r.per_layer_measured, r.per_layer_formula,
            r.per_layer_measured - r.per_layer_formula, human(r.per_layer_measured).c_str(),
            r.layers_identical ? ", every layer the same" : ", LAYERS DIFFER");
    fprintf(f, "  %-16s %14.0f %14s %10s   layer-norm mean/rstd (fp32), ignored by the paper\n", "extras",
            r.per_layer_extras, "-", "-");
    if (s.rc == Recompute::Full)
        fprintf(f, "  note: full recompute stores each layer's input: the paper's Table 2 row is 2sbh; under SP each rank\n"
                   "        keeps only its sequence shard, 2sbh/t, which is what is measured and what the formula column shows.\n");
    print_table2_comparison(f, r, table2_compare(r));  // the paper's row for this run (recompute/table2.h)
    fprintf(f, "  %-16s %14s %14s %10s\n", "outside layers", "measured", "formula", "diff");
    for (const FormulaTerm& t : r.model_terms) {
        double m = r.model_tensors_measured.count(t.name) ? r.model_tensors_measured.at(t.name) : 0.0;
        fprintf(f, "  %-16s %14.0f %14.0f %10.0f\n", t.name, m, t.bytes, m - t.bytes);
    }
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   this stage's %d layer-micro-batches in flight (%s measured)\n", "stage layers",
            r.stage_layers_measured, r.stage_layers_formula, r.stage_layers_measured - r.stage_layers_formula,
            r.in_flight_layers, human(r.stage_layers_measured).c_str());
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   whole model on this rank (%s measured)\n", "model", r.model_measured,
            r.model_formula, r.model_measured - r.model_formula, human(r.model_measured).c_str());
    fprintf(f, "  %-16s %14.0f %14s %10s   all layer-norm statistics and the loss's row max / exp-sum\n", "model extras",
            r.model_extras, "-", "-");
    if (r.peak_live_bytes)
        fprintf(f, "  allocator high-water mark over the previous step: %s live, %s reserved\n",
                human((double)r.peak_live_bytes).c_str(), human((double)r.peak_reserved_bytes).c_str());
    if (r.have_model_state) print_model_state(f, r);
    if (r.device_used_bytes >= 0)
        fprintf(f, "  device memory in use (cudaMemGetInfo): %s%s\n", human(r.device_used_bytes).c_str(),
                r.have_model_state ? " (the sum above plus the allocator's cached blocks, cuBLAS workspaces and the CUDA context)" : "");
}

std::string memory_report_json(const MemoryReport& r) {
    std::string j = "{";
    char b[256];
    auto num = [&](const char* k, double v) {
        snprintf(b, sizeof b, "\"%s\":%.0f,", k, v);
        j += b;
    };
    const ModelFormulaInput& s = r.shape;
    snprintf(b, sizeof b, "\"s\":%.0f,\"b\":%.0f,\"h\":%.0f,\"a\":%.0f,\"L\":%.0f,\"v\":%.0f,\"t\":%d,\"sp\":%s,\"recompute\":\"%s\",\"attention\":\"%s\",\"d\":%d,",
             s.s, s.b, s.h, s.a, s.L, s.v, s.t, s.sp ? "true" : "false", recompute_name(s.rc), attention_name(s.attention), s.d);
    j += b;
    if (s.c > 1) num("cp", s.c);  // only under context parallelism: the JSON of a run without it is unchanged
    num("per_layer_measured", r.per_layer_measured);
    num("per_layer_formula", r.per_layer_formula);
    num("per_layer_extras", r.per_layer_extras);
    num("model_measured", r.model_measured);
    num("model_formula", r.model_formula);
    num("model_extras", r.model_extras);
    num("pp", r.pp);
    num("pp_rank", r.pp_rank);
    num("microbatches", r.microbatches);
    num("in_flight_layers", r.in_flight_layers);
    num("stage_layers_measured", r.stage_layers_measured);
    num("stage_layers_formula", r.stage_layers_formula);
    j += "\"schedule\":\"" + r.schedule + "\",";
    num("peak_live_bytes", (double)r.peak_live_bytes);
    num("peak_reserved_bytes", (double)r.peak_reserved_bytes);
    if (r.device_used_bytes >= 0) num("device_used_bytes", r.device_used_bytes);
    if (r.have_model_state) {
        const ModelStateFormula& F = r.model_state_formula;
        num("model_state_measured", (double)r.model_state.total());
        num("model_state_formula", (double)F.total);
        num("optimizer_state_measured", (double)r.model_state.optimizer(F.bf16));
        num("optimizer_state_formula", (double)F.optimizer);
        num("model_state_padding", (double)(F.padded - F.n));
        j += F.distributed ? "\"distributed_optimizer\":true," : "\"distributed_optimizer\":false,";
    }
    j += "\"layers_identical\":";
    j += r.layers_identical ? "true," : "false,";
    j += "\"tensors\":{";
    bool first = true;
    for (auto& kv : r.tensors) {
        snprintf(b, sizeof b, "%s\"%s\":%.0f", first ? "" : ",", kv.first.c_str(), kv.second);
        j += b;
        first = false;
    }
    for (auto& kv : r.model_tensors_measured) {
        snprintf(b, sizeof b, "%s\"%s\":%.0f", first ? "" : ",", kv.first.c_str(), kv.second);
        j += b;
        first = false;
    }
    j += "},\"formula_tensors\":{";
    first = true;
    for (const FormulaTerm& t : r.formula) {
        snprintf(b, sizeof b, "%s\"%s\":%.0f", first ? "" : ",", t.name, t.bytes);
        j += b;
        first = false;
    }
    for (const FormulaTerm& t : r.model_terms) {
        snprintf(b, sizeof b, "%s\"%s\":%.0f", first ? "" : ",", t.name, t.bytes);
        j += b;
        first = false;
    }
    j += "}}";
    return j;
}

// Point to point on MPI_COMM_WORLD, tags 0..2: the lengths, then the two strings. Nothing else is in flight
// on the world communicator at the end of a step.
std::vector<std::pair<std::string, std::string>> gather_stage_reports(const std::string& text, const std::string& json, int pp,
                                                                      int ranks_per_stage, MPI_Comm world) {
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    std::vector<std::pair<std::string, std::string>> out;
    for (int s = 0; s < pp; s++) {
        const int owner = s * ranks_per_stage;
        if (rank != 0 && rank != owner) continue;
        std::string t = text, j = json;
        if (owner != 0) {
            int n[2] = {(int)t.size(), (int)j.size()};
            if (rank == owner) {
                MPI_CHECK(MPI_Send(n, 2, MPI_INT, 0, 0, world));
                MPI_CHECK(MPI_Send(t.data(), n[0], MPI_CHAR, 0, 1, world));
                MPI_CHECK(MPI_Send(j.data(), n[1], MPI_CHAR, 0, 2, world));
                continue;
            }
            MPI_CHECK(MPI_Recv(n, 2, MPI_INT, owner, 0, world, MPI_STATUS_IGNORE));
            t.assign((size_t)n[0], ' ');
            j.assign((size_t)n[1], ' ');
            MPI_CHECK(MPI_Recv(&t[0], n[0], MPI_CHAR, owner, 1, world, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Recv(&j[0], n[1], MPI_CHAR, owner, 2, world, MPI_STATUS_IGNORE));
        }
        if (rank == 0) out.push_back({t, j});
    }
    return out;
}
