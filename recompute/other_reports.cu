// other_reports.cu — what --memory-report prints around the Table 2 comparison (see other_reports.h).
#include "other_reports.h"

#include <cstdio>
#include <cstring>

#include "flash_memory.h"  // formula_attention: the run's attention core
#include "table2.h"

void add_model_state(MemoryReport& r, const ModelStateMemory& measured, const ModelStateFormula& formula) {
    r.model_states = std::make_shared<const ModelStateReport>(ModelStateReport{measured, formula});
}

bool process_resident(double* hwm, double* rss) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return false;
    char line[256];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        long long kb = 0;
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) *hwm = kb * 1024.0, found |= 1;
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) *rss = kb * 1024.0, found |= 2;
    }
    fclose(f);
    return found == 3;
}

// Everything the rank's accounts hold, by kind, at the high-water mark of their sum (RankMemory): the total
// "on this rank" is that sum, measured by the allocators as the buffers came and went, never a formula. Each
// kind's own peak beside it (the kinds peak at different moments: the activations mid-forward, ZeRO-2's
// gathers at the optimizer step). On the CPU device the "device" is the host's memory: the process's
// resident memory is printed beside it.
static void print_rank_total(FILE* f, const MemoryReport& r) {
    const RankMemory& a = rank_memory();  // as the step left it (layers/rank_memory.h)
    const bool cuda = r.model_states && r.model_states->measured.device == Device::CUDA;
    const bool offloaded = a.kind_peak[(int)MemoryKind::OffloadHost] > 0;
    const char* note[kNumMemoryKinds] = {
        "saved for backward, and the step's outputs and gradients in flight",
        "the layers' \"tmp:\" work buffers",
        "weights, gradients, master, moments (the table above)",
        "ZeRO-3's gathered units; ZeRO-2's optimizer all-gather",
        "ZeRO-2/3's gradient buckets",
        "--optimizer-post-validation's copy of the states",
        cuda ? "pinned host memory, not the GPU's" : "host memory: on the CPU device the same RAM as every row above"};
    fprintf(f, "\nEverything this rank's accounts hold (measured by the allocators, at the high-water mark of their sum)\n");
    fprintf(f, "  %-16s %14s %14s %14s\n", "kind", "at the peak", "its own peak", "after the step");
    for (int k = 0; k < kNumMemoryKinds; k++)
        fprintf(f, "  %-16s %14lld %14lld %14lld   %s\n", memory_kind_name((MemoryKind)k), (long long)a.at_peak[k],
                (long long)a.kind_peak[k], (long long)a.live[k], note[k]);
    fprintf(f, "  %-16s %14lld %14s %14lld   on this rank at its peak (%s)\n", "total", (long long)a.total_at_peak(), "-",
            (long long)a.live_total, human_bytes((double)a.total_at_peak()).c_str());
    if (cuda && offloaded)
        fprintf(f, "  on the GPU: %s at that moment (the total less the pinned host pool); the GPU's own high-water mark,\n"
                   "  every kind but the host pool: %s\n",
                human_bytes((double)(a.total_at_peak() - a.at_peak[(int)MemoryKind::OffloadHost])).c_str(),
                human_bytes((double)a.peak_without_host).c_str());
    fprintf(f, "  not in these accounts: the %s, communication buffers, token ids, and the allocators' cached blocks\n",
            cuda ? "CUDA context, cuBLAS's and ctx_scratch's workspaces" : "program and libraries");
    double hwm = 0, rss = 0;
    if (!cuda && process_resident(&hwm, &rss)) {
        fprintf(f, "  process resident memory (/proc/self/status): peak %s (VmHWM), now %s (VmRSS): on the CPU device the\n"
                   "  \"device\" and the host are the same memory, and this is what the process really holds\n",
                human_bytes(hwm).c_str(), human_bytes(rss).c_str());
        if (offloaded)
            fprintf(f, "  note: offloading on the CPU device moves activations between two pools of the same RAM: the device's\n"
                       "  activation figures drop, the process's memory does not (its host pool is the \"offload host\" row)\n");
    }
}

// The model states: each kind measured next to bytes/parameter × parameters (recompute/model_state_memory.h),
// then the total with the activations.
static void print_model_state(FILE* f, const MemoryReport& r) {
    const ModelStateMemory& m = r.model_states->measured;
    const ModelStateFormula& F = r.model_states->formula;
    fprintf(f, "\nModel states on this rank (measured by their tagged account, next to bytes/parameter x parameters)\n");
    // Under CP the ranks that hold the same weights are the data- and the context-parallel ones (dp x cp).
    const char* group = r.sequence_ranks > 1 ? "data- and context-parallel" : "data-parallel";
    if (F.distributed)
        fprintf(f, "  %lld local parameters; %s over %d %s ranks: buffers padded to %lld (+%lld),\n"
                   "  shards of %lld; formula %s bytes/parameter x %lld\n", (long long)F.n,
                F.stage == 1 ? "distributed optimizer" : F.stage == 2 ? "ZeRO-2" : "ZeRO-3", F.d, group,
                (long long)F.padded, (long long)(F.padded - F.n), (long long)(F.padded / F.d), F.per_param_text,
                (long long)F.padded);
    else
        fprintf(f, "  %lld local parameters, every optimizer state whole on this rank (%d %s rank%s); formula %s\n"
                   "  bytes/parameter x %lld\n",
                (long long)F.n, F.d, group, F.d == 1 ? "" : "s", F.per_param_text, (long long)F.n);
    fprintf(f, "  %-16s %14s %14s %10s %12s\n", "state", "measured", "formula", "diff", "bytes/param");
    // What each kind is, and whether this rank holds only its shard (ZeRO-1: master and moments; ZeRO-2: and the
    // gradients; ZeRO-3: and the weights).
    const char* sh = "fp32, this rank's shard";
    const char* note[kNumStateKinds] = {
        F.bf16 ? (F.sharded[0] ? "bf16, this rank's shard" : "bf16 compute copy")
               : "none: the fp32 master weights are the compute weights",
        F.sharded[1] ? sh : "fp32",
        F.bf16 ? (F.sharded[2] ? sh : "fp32") : F.sharded[2] ? "fp32 (the weights), this rank's shard" : "fp32 (the weights)",
        F.sharded[3] ? sh : "fp32", F.sharded[4] ? sh : "fp32"};
    for (int k = 0; k < kNumStateKinds; k++)
        fprintf(f, "  %-16s %14lld %14lld %10lld %12.4g   %s\n", model_state_name(k), (long long)m.bytes[k], (long long)F.bytes[k],
                (long long)(m.bytes[k] - F.bytes[k]), (double)F.bytes[k] / (double)F.padded, note[k]);
    fprintf(f, "  %-16s %14lld %14lld %10lld %12.4g   (%s)\n", "total", (long long)m.total(), (long long)F.total,
            (long long)(m.total() - F.total), F.per_param, human_bytes((double)m.total()).c_str());
    fprintf(f, "  %-16s %14lld %14lld %10lld %12s   %s\n", "optimizer state", (long long)m.optimizer(F.bf16), (long long)F.optimizer,
            (long long)(m.optimizer(F.bf16) - F.optimizer), "-", F.bf16 ? "master + moments" : "moments");
    print_rank_total(f, r);
}

void print_memory_report(FILE* f, const MemoryReport& r) {
    const ModelFormulaInput& s = r.shape;  // at this rank's s/c tokens
    const int c = r.sequence_ranks;        // context parallelism: the whole sequence is s.s · c
    fprintf(f, "\nActivation memory saved for backward on this rank (measured by the allocator, at the schedule's peak)\n");
    if (r.pp > 1 || r.microbatches > 1)
        fprintf(f, "  pipeline stage %d of %d, schedule %s, %d micro-batches per step: %d layer-micro-batches in flight\n",
                r.pp_rank, r.pp, r.schedule.c_str(), r.microbatches, r.in_flight_layers);
    fprintf(f, "  s=%.0f b=%.0f h=%.0f a=%.0f L=%.0f v(padded)=%.0f  t=%d sp=%s recompute=%s attention=%s  activations %d bytes/element, masks 1 byte\n",
            s.s * c, s.b, s.h, s.a, s.L, s.v, s.t, s.sp ? "on" : "off", recompute_name(s.rc), attention_name(formula_attention(s)), s.d);
    // Context parallelism: the formula column is at s/c (recompute/flash_memory.h); say so where s is printed.
    // Nothing is added at c = 1, so a run without CP prints what it always printed.
    if (c > 1) {
        char split[96] = "";
        if (s.sp && s.t > 1)
            snprintf(split, sizeof split, "; SP splits them by t outside the TP regions (%g there)", s.s / s.t);
        fprintf(f, "  cp %d: this rank holds s/c = %g of %.0f tokens, chunks r and 2c-1-r of 2c = %d (ring attention)%s\n",
                c, s.s, s.s * c, 2 * c, split);
    }
    if (formula_attention(s) == Attention::Flash && s.rc == Recompute::Selective)
        fprintf(f, "  note: selective recompute has nothing left to drop under flash attention: the s x s tensors (probs,\n"
                   "        attn_mask, probs_drop) are never stored, the kernel rebuilds them tile by tile in the backward pass\n"
                   "        from the saved lse (4asb/t bytes, fp32), which is kept; the layer keeps what recompute=none keeps.\n");
    // The Table 2 comparison (recompute/table2.h): the paper's part of the report.
    print_layer_table(f, r);
    print_table2_comparison(f, r, table2_compare(r));
    // §4.3: the whole model on this rank, the terms outside the layers next to their formulas.
    fprintf(f, "  %-16s %14s %14s %10s\n", "outside layers", "measured", "formula", "diff");
    for (const FormulaTerm& t : r.model_terms) {
        double m = r.model_tensors_measured.count(t.name) ? r.model_tensors_measured.at(t.name) : 0.0;
        fprintf(f, "  %-16s %14.0f %14.0f %10.0f\n", t.name, m, t.bytes, m - t.bytes);
    }
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   this stage's %d layer-micro-batches in flight (%s measured)\n", "stage layers",
            r.stage_layers_measured, r.stage_layers_formula, r.stage_layers_measured - r.stage_layers_formula,
            r.in_flight_layers, human_bytes(r.stage_layers_measured).c_str());
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   whole model on this rank (%s measured)\n", "model", r.model_measured,
            r.model_formula, r.model_measured - r.model_formula, human_bytes(r.model_measured).c_str());
    fprintf(f, "  %-16s %14.0f %14s %10s   all layer-norm statistics and the loss's row max / exp-sum\n", "model extras",
            r.model_extras, "-", "-");
    if (r.peak_live_bytes)
        fprintf(f, "  allocator high-water mark over the previous step: %s live, %s reserved\n",
                human_bytes((double)r.peak_live_bytes).c_str(), human_bytes((double)r.peak_reserved_bytes).c_str());
    // The reports beyond the paper's Table 2 (new ones go here, each in a function of its own above).
    if (r.model_states) print_model_state(f, r);
    if (r.device_used_bytes >= 0)
        fprintf(f, "  device memory in use (cudaMemGetInfo): %s%s\n", human_bytes(r.device_used_bytes).c_str(),
                r.model_states ? " (the sum above plus the allocator's cached blocks, cuBLAS workspaces and the CUDA context)" : "");
}

std::string memory_report_json(const MemoryReport& r) {
    std::string j = "{";
    char b[256];
    auto num = [&](const char* k, double v) {
        snprintf(b, sizeof b, "\"%s\":%.0f,", k, v);
        j += b;
    };
    const ModelFormulaInput& s = r.shape;
    const int c = r.sequence_ranks;
    snprintf(b, sizeof b, "\"s\":%.0f,\"b\":%.0f,\"h\":%.0f,\"a\":%.0f,\"L\":%.0f,\"v\":%.0f,\"t\":%d,\"sp\":%s,\"recompute\":\"%s\",\"attention\":\"%s\",\"d\":%d,",
             s.s * c, s.b, s.h, s.a, s.L, s.v, s.t, s.sp ? "true" : "false", recompute_name(s.rc), attention_name(formula_attention(s)), s.d);
    j += b;
    if (c > 1) num("cp", c);  // only under context parallelism: the JSON of a run without it is unchanged
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
    if (r.model_states) {
        const ModelStateFormula& F = r.model_states->formula;
        num("model_state_measured", (double)r.model_states->measured.total());
        num("model_state_formula", (double)F.total);
        num("optimizer_state_measured", (double)r.model_states->measured.optimizer(F.bf16));
        num("optimizer_state_formula", (double)F.optimizer);
        num("model_state_padding", (double)(F.padded - F.n));
        j += F.distributed ? "\"distributed_optimizer\":true," : "\"distributed_optimizer\":false,";
        const RankMemory& a = rank_memory();
        num("rank_peak_bytes", (double)a.total_at_peak());
        num("rank_peak_without_host_bytes", (double)a.peak_without_host);  // every kind of the rank's account at its high-water mark
        j += "\"rank_at_peak\":{";
        for (int k = 0; k < kNumMemoryKinds; k++) {
            snprintf(b, sizeof b, "%s\"%s\":%lld", k ? "," : "", memory_kind_name((MemoryKind)k), (long long)a.at_peak[k]);
            j += b;
        }
        j += "},";
        double hwm = 0, rss = 0;
        if (r.model_states->measured.device == Device::CPU && process_resident(&hwm, &rss)) num("process_vmhwm_bytes", hwm), num("process_vmrss_bytes", rss);
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
