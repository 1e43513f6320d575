// calculator_print.cu — the paper-scale calculator's output (tools/memory_calculator.h): the tables as text,
// the same numbers as JSON, Figure 7 as a chart, and the runs the beyond-the-paper table takes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "layers/tensor.h"  // mm_fatal
#include "tools/chart.h"
#include "tools/memory_calculator.h"

// ---- text output ---------------------------------------------------------------------------------------
static std::string fmt(const char* f, double v) {
    if (!std::isfinite(v)) return "-";
    char buf[64];
    snprintf(buf, sizeof buf, f, v);
    return buf;
}
// A count or a bytes-per-element figure as it is: 18, 7.5, 6.375 (never rounded to a whole number).
static std::string fmt_num(double v) { return fmt("%.6g", v); }

// The context-parallelism table (not in the paper): docs/paper.md "Context parallelism: where it takes over
// from sequence parallelism" quotes it.
static void print_cp_table(const std::vector<Result>& all, const Options& o) {
    bool any = false;
    for (const Result& r : all) any = any || !r.cp_rows.empty();
    if (!any) return;
    printf("\nContext parallelism (not in the paper): c GPUs split each sequence, attention included (ring\n"
           "  attention, flash only). A GPU holds s/c tokens: its activations are the flash formulas at s/c\n"
           "  (first stage at the schedule's peak, recompute none, layers + outside, GiB; states unchanged by c).\n"
           "  Bytes one GPU sends per layer and micro-batch (MiB): ring K/V forward 2(c-1)(s/c)b(h/t)d, backward the\n"
           "  same + dK, dV in fp32 over c hops 2c(s/c)b(h/t)4 (point to point, overlapped with attention); the\n"
           "  TP + SP forward collectives 4(t-1)/t (s/c)bhd (on the critical path). d = %d.\n", o.d);
    printf("  %-8s %7s %3s %6s %7s %10s %13s | %9s %9s %11s\n", "model", "s", "c", "GPUs", "s/c", "TP + flash",
           "TP+SP+flash", "K/V fwd", "K/V bwd", "TP + SP fwd");
    for (const Result& r : all)
        for (const CPRow& row : r.cp_rows)
            printf("  %-8s %7.0f %3d %6.0f %7s %10.1f %13.1f | %9.1f %9.1f %11.1f\n", r.spec.name.c_str(), row.s, row.c,
                   row.gpus, fmt_num(row.tokens).c_str(), row.acts_tp / GiB, row.acts_tp_sp / GiB, row.kv_fwd / MiB,
                   row.kv_bwd / MiB, row.tp_fwd / MiB);
}

// The zero-bubble table (not in the paper): docs/paper.md "Beyond the paper: zero-bubble schedules" quotes it.
static void print_zb_table(const std::vector<Result>& all, const Options& o) {
    bool any = false;
    for (const Result& r : all) any = any || !r.zb_rows.empty();
    if (!any) return;
    const double* T = o.pipe_times;
    printf("\nZero-bubble pipeline schedules (not in the paper; Qi et al. 2024, arXiv 2401.10241): each backward split\n"
           "  into B (input gradient, sent on) and W (weight gradients, deferred); one chunk per stage; the step ends\n"
           "  together on every stage (gradient norm, clip), so ZB-H2 keeps two triangles of idle time.\n"
           "  T_F : T_B : T_W = %s : %s : %s (--pipe-times). bubble = idle time per stage per step, in those units;\n"
           "  rate = bubble / (M(T_F + T_B + T_W)); idle = bubble / step. For M >= 2p - 1 (q = p - 1):\n"
           "    1f1b q(T_F + T_B + T_W), zb-h1 q max(T_F + T_B - T_W, T_F, T_B), zb-h2 q max(T_F + T_B - 2T_W, T_F, T_B - T_F);\n"
           "    zb-v (two chunks per stage in a V, each op half a stage's: t = T/2, M >= 2p, t_W <= t_F, t_B)\n"
           "    q max(2t_B - t_W, t_F + t_B - t_W, 2t_F - 3t_W); its first stage holds 2p half-stage chunks: 1f1b's p\n"
           "  First stage, %s, GiB: 'layers' = the n micro-batches in flight x L/p layers; 'W inputs'\n"
           "  = one micro-batch's copies of the 4 linears' inputs and output gradients, e sbh(4 + 12/t) per layer,\n"
           "  held from its B to its W; 'peak' = the larger of n micro-batches' layers (after a forward) and n - 1\n"
           "  micro-batches' plus the W inputs (after a B); + the masks of n micro-batches outside the layers, the\n"
           "  rebuilt core and the model states (no distributed optimizer).\n",
           fmt_num(T[0]).c_str(), fmt_num(T[1]).c_str(), fmt_num(T[2]).c_str(), kLayouts[kZBLayout].label);
    printf("  %-8s %-6s %5s %8s %7s %7s %7s | %9s %7s %8s %7s | %7s %7s %6s %7s %s\n", "model", "sched.", "p", "M",
           "bubble", "rate", "idle", "in flight", "layers", "W inputs", "peak", "outside", "rebuilt", "states", "total", "verdict");
    for (const Result& r : all)
        for (const ZBRow& row : r.zb_rows)
            printf("  %-8s %-6s %5d %8d %7s %6.2f%% %6.2f%% | %9d %7.2f %8.2f %7.2f | %7.2f %7.2f %6.1f %7.1f %s\n",
                   r.spec.name.c_str(), bubble_schedule_name(row.schedule), r.spec.p, r.pipe.microbatches,
                   fmt_num(row.bubble).c_str(), 100 * row.rate, 100 * row.idle_share, row.mem.in_flight,
                   row.mem.layers_at_peak / GiB, row.mem.w_inputs / GiB, row.mem.peak / GiB, row.extras / GiB,
                   row.transient / GiB, row.state / GiB, row.total / GiB, row.fits ? "fits" : "does not fit");
}

void print_text(const std::vector<Result>& all, const Options& o) {
    // The per-layer tables (Table 2, Figure 7) leave out a run whose layers are those of the model before it
    // (530B-dp8 is 530B's layout with more data parallelism).
    std::vector<Result> rs;
    for (const Result& r : all)
        if (!r.spec.same_layers_as_previous) rs.push_back(r);
    printf("Activation memory and FLOPs, Korthikanti et al. 2022 (formulas: recompute/formulas.h).\n");
    printf("Bytes per activation element d = %d (masks 1 byte, logits fp32); GiB = 2^30 bytes.\n\n", o.d);

    printf("Models (Table 3 unless changed by flags; 530B-dp8: the paper's 530B run at data-parallel 8)\n");
    printf("  %-8s %5s %6s %4s %6s %6s %3s %3s %3s %2s %3s %5s %3s %5s %10s\n", "model", "heads", "hidden", "L", "seq",
           "vocab", "t", "cp", "p", "m", "dp", "GPUs", "b", "B", "params");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        printf("  %-8s %5.0f %6.0f %4.0f %6.0f %6.0f %3d %3d %3d %2d %3d %5.0f %3.0f %5.0f %9.1fB\n", m.name.c_str(),
               m.a, m.h, m.L, m.s, m.v, m.t, m.c, m.p, m.m, m.dp, m.gpus(), m.b, m.B, r.params / 1e9);
    }

    printf("\nTable 2 — activation memory of one transformer layer on one GPU (MiB; t as above, d = 2 as printed)\n");
    printf("  %-50s %-27s", "configuration", "formula");
    for (const Result& r : rs) printf(" %9s", r.spec.name.c_str());
    printf("\n");
    for (int i = 0; i < kTable2Rows; i++) {
        printf("  %-50s %-27s", table2_row_name((Table2Row)i), table2_row_formula((Table2Row)i));
        for (const Result& r : rs) printf(" %9.1f", r.table2[i] / MiB);
        printf("\n");
    }
    printf("  %-50s %-27s", "full recompute + SP (what our trainer stores)", "2sbh/t");
    for (const Result& r : rs) printf(" %9.1f", r.table2[(int)Table2Row::FullRecompute] / r.spec.t / MiB);
    printf("\n");
    // Flash attention (not in the paper): the three s x s tensors behind 5as/h are never stored; one fp32
    // log-sum-exp per query per head (4asb/t bytes, sbh * 4a/(ht)) is kept instead.
    printf("  with flash attention (not in the paper): 5as/h -> 4a/h, the fp32 lse; selective = without it\n");
    for (int i = 0; i < kTable2Rows; i++) {
        printf("    %-48s %-27s", table2_row_name((Table2Row)i), table2_flash_formula((Table2Row)i));
        for (const Result& r : rs) printf(" %9.1f", r.table2_flash[i] / MiB);
        printf("\n");
    }
    if (o.d != 2) {
        printf("  with d = %d (per-tensor sums, sbh(16d + 2)/... + as^2b(2d + 1)/...; flash: 4asb/t, not d, for the\n"
               "  as^2b term):\n", o.d);
        for (int i = 0; i < kNumLayouts; i++) {
            printf("  %-78s", kLayouts[i].label);
            for (const Result& r : rs) printf(" %9.1f", r.layer[i] / MiB);
            printf("\n");
        }
    }

    printf("\nFigure 7 — activation memory per layer as %% of the tensor-parallel baseline (Table 2%s)\n",
           o.d == 2 ? "" : ", with d as given");
    printf("  %-8s %7s %9s %15s %20s %15s\n", "model", "5as/h", "TP + SP", "TP + selective", "TP + SP + selective",
           "full recompute");
    for (const Result& r : rs)
        printf("  %-8s %7.1f %8.1f%% %14.1f%% %19.1f%% %14.1f%%\n", r.spec.name.c_str(), r.five_as_h, r.fig7[0],
               r.fig7[1], r.fig7[2], r.fig7[3]);
    printf("  Selective recompute removes the attention core, 5as/h of 34 + 5as/h (§5; the same share without\n"
           "  parallelism or under TP + SP; plain TP keeps 10sbh unsplit, so there the share is smaller):\n");
    for (const Result& r : rs)
        printf("  %-8s saves %5.1f%% (under plain TP: %4.1f%%)\n", r.spec.name.c_str(), 100 * r.saving_sel,
               100 * r.saving_sel_tp);
    printf("  With flash attention (not in the paper), as %% of the same baseline, the paper's tensor-parallel\n"
           "  layer with unfused attention, sbh(10 + 24/t + 5as/(ht)) = 100%%. Flash keeps the fp32 lse (4a/h)\n"
           "  where selective recompute keeps nothing, so each flash bar sits just above its selective bar;\n"
           "  flash + selective is the same bar (nothing left to drop); full recompute is unchanged:\n");
    printf("  %-8s %7s %11s %15s %16s %20s\n", "model", "4a/h", "TP + flash", "TP + selective", "TP + SP + flash",
           "TP + SP + selective");
    for (const Result& r : rs)
        printf("  %-8s %7.5f %10.2f%% %14.2f%% %15.2f%% %19.2f%%\n", r.spec.name.c_str(), r.four_a_h, r.fig7_flash[0],
               r.fig7[1], r.fig7_flash[1], r.fig7[2]);

    printf("\nMemory of one GPU of the first pipeline stage (GiB = 2^30 bytes; verdict against %s GiB)\n"
           "  Activations at the peak of rank 0's pipeline schedule (parallel/pipeline_schedule.h, as the\n"
           "  trainer runs it): 'layers' = the (micro-batch, chunk) pairs in flight x L/(p*m) layers x one\n"
           "  layer's bytes; 'outside' = the embedding-dropout masks of the micro-batches whose first chunk is in\n"
           "  flight (+ final LN input, LM-head input, fp32 logits when p = 1); 'rebuilt' = one layer's tensors\n"
           "  recomputed during its backward (not in the paper's totals). 'states' = weights, gradients and AdamW\n"
           "  state of the parameters this GPU holds, without and with the distributed optimizer.\n"
           "  %s\n",
           fmt_num(o.gpu_mem_gib).c_str(),
           o.attention == Attention::Flash
               ? "Attention: flash in every layout (--attention flash): no s x s tensors, the fp32 lse instead;\n"
                 "  selective keeps what none keeps, and full recompute rebuilds a layer without them."
               : "Attention: the paper's unfused core in the first six layouts; the '+ flash' rows use flash attention\n"
                 "  (the same with selective, which has nothing left to drop).");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        const PipelineCounts& pc = r.pipe;
        const StageParams& sp = r.stage_params;
        printf("  %s: t = %d, p = %d, m = %d, dp = %d, micro-batch %s, M = %d per step, schedule %s\n",
               m.name.c_str(), m.t, m.p, m.m, m.dp, fmt_num(m.b).c_str(), pc.microbatches,
               pipe_schedule_name(m.schedule));
        if (m.c > 1)
            printf("    context parallel, cp = %d (%s GPUs): activations at s/c = %s of %s tokens per GPU; every CP\n"
                   "    rank holds the stage's weights, so the states change only where the distributed optimizer\n"
                   "    shards them, over dp x cp\n",
                   m.c, fmt_num(m.gpus()).c_str(), fmt_num(m.s / m.c).c_str(), fmt_num(m.s).c_str());
        printf("    rank 0: %d warm-up forwards; peak %d (micro-batch, chunk) pairs in flight x %s layers each = %s "
               "layers' worth\n",
               pc.warmup, pc.in_flight, fmt_num(pc.chunk_layers).c_str(), fmt_num(pc.in_flight_layers).c_str());
        const char* paper_form = m.schedule == PipeSchedule::AFAB ? "AFAB: M L/p"
                                 : m.m > 1                        ? "§4.3: L(1 + (p-1)/(pm))"
                                                                  : "§4.3: L, whatever p";
        printf("            (%s = %s%s); embedding-dropout masks held: %d; ideal bubble (p-1)/(mM) = %.1f%%\n",
               paper_form, fmt_num(pc.paper_layers).c_str(),
               m.schedule != PipeSchedule::AFAB && pc.microbatches < m.p ? ", stated for M >= p" : "",
               pc.embed_in_flight, 100 * pc.bubble);
        printf("    parameters on this GPU: %.3fB = %s layers %.3fB + word embedding %.3fB + positions %.3fB%s\n",
               sp.total() / 1e9, fmt_num(sp.layers).c_str(), sp.layer_params / 1e9, sp.word_embedding / 1e9,
               sp.position_embedding / 1e9, sp.final_ln > 0 ? " + final LN" : "");
        if (std::isfinite(r.bytes_per_param_dist) && m.c > 1)
            printf("    bytes per parameter: %s; with the distributed optimizer over dp x cp = %d x %d: %s\n",
                   fmt_num(r.bytes_per_param).c_str(), m.dp, m.c, fmt_num(r.bytes_per_param_dist).c_str());
        else if (std::isfinite(r.bytes_per_param_dist))
            printf("    bytes per parameter: %s; with the distributed optimizer over dp = %d: %s%s\n",
                   fmt_num(r.bytes_per_param).c_str(), m.dp, fmt_num(r.bytes_per_param_dist).c_str(),
                   m.dp == 1 ? " (nothing to shard at dp = 1)" : "");
        else
            printf("    bytes per parameter: %s (--bytes-per-param; the distributed optimizer not modelled)\n",
                   fmt_num(r.bytes_per_param).c_str());
        printf("    %-24s %7s %7s %7s %7s | %7s %7s %-12s | %s\n", "configuration", "layers", "outside", "acts",
               "rebuilt", "states", "total", "verdict", "distributed optimizer: states, total, verdict");
        std::string only_dist;
        // Under --attention flash the paper's six layouts are flash already: the '+ flash' rows would repeat them.
        const int rows = o.attention == Attention::Flash ? kNumPaperLayouts : kNumLayouts;
        for (int i = 0; i < rows; i++) {
            const StageMemory& sm = r.stage[i];
            printf("    %-24s %7.1f %7.2f %7.1f %7.2f | %7.1f %7.1f %-12s | %7s %7s %s\n", kLayouts[i].label,
                   sm.layers / GiB, sm.extras / GiB, (sm.layers + sm.extras) / GiB, sm.transient / GiB,
                   sm.state / GiB, sm.total / GiB, sm.fits ? "fits" : "does not fit",
                   fmt("%.1f", sm.state_dist / GiB).c_str(), fmt("%.1f", sm.total_dist / GiB).c_str(),
                   !std::isfinite(sm.total_dist) ? "-" : sm.fits_dist ? "fits" : "does not fit");
            if (sm.fits_dist && !sm.fits) only_dist += std::string(only_dist.empty() ? "" : ", ") + kLayouts[i].label;
        }
        if (!only_dist.empty()) printf("    fits only with the distributed optimizer: %s\n", only_dist.c_str());
    }

    print_cp_table(all, o);
    print_zb_table(all, o);

    printf("\nFLOPs per iteration (Appendix A) and Table 5 (peak %.0f TFLOP/s per GPU)\n", o.peak / 1e12);
    printf("  %-8s %10s %10s %10s %7s %7s\n", "model", "Eq.7 model", "Eq.8 sel.", "full rec.", "+sel", "+full");
    for (const Result& r : all)
        printf("  %-8s %10.3e %10.3e %10.3e %6.1f%% %6.1f%%\n", r.spec.name.c_str(), r.flops_model, r.flops_sel,
               r.flops_full, 100 * (r.flops_sel / r.flops_model - 1), 100 * (r.flops_full / r.flops_model - 1));
    printf("\n  %-8s %5s | %8s %6s %6s | %8s %6s %6s | %6s | %s\n", "model", "GPUs", "SP+sel s", "MFU", "HFU",
           "full s", "MFU", "HFU", "gain", "paper (MFU, HFU, gain)");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        std::string paper = m.paper ? fmt("%.1f%%, ", m.paper->table5_mfu) + fmt("%.1f%%, ", m.paper->table5_hfu) +
                                          fmt("%.1f%%", m.paper->table5_gain)
                            : !m.paper_quote.empty() ? m.paper_quote
                                                     : std::string("-");
        printf("  %-8s %5.0f | %8s %6s %6s | %8s %6s %6s | %6s | %s\n", m.name.c_str(), m.gpus(),
               fmt("%.2f", m.iter_selective).c_str(), fmt("%.1f%%", r.mfu_sel).c_str(),
               fmt("%.1f%%", r.hfu_sel).c_str(), fmt("%.2f", m.iter_full).c_str(), fmt("%.1f%%", r.mfu_full).c_str(),
               fmt("%.1f%%", r.hfu_full).c_str(), fmt("%.1f%%", r.gain).c_str(), paper.c_str());
    }
    printf("  MFU = Eq. 7 / time / (peak x GPUs); HFU = Eq. 8 (selective) or Eq. 7 + one more forward (full).\n");
}

// ---- JSON output ---------------------------------------------------------------------------------------
// A minimal writer: keys and values in order, commas and indentation handled here.
namespace {
struct Json {
    std::string out;
    std::vector<bool> first{true};
    int depth = 0;
    void sep() {
        if (!first.back()) out += ",";
        first.back() = false;
        if (!out.empty()) out += "\n" + std::string(2 * depth, ' ');
    }
    bool pending_value = false;  // a key was written: the value that follows needs no separator
    void key(const char* k) {
        sep();
        out += "\"" + std::string(k) + "\": ";
        pending_value = true;
    }
    void value_prefix() {
        if (pending_value) {
            pending_value = false;
        } else {
            sep();
        }
    }
    void open(char c) {
        value_prefix();
        out += c;
        first.push_back(true);
        depth++;
    }
    void close(char c) {
        bool empty = first.back();
        first.pop_back();
        depth--;
        if (!empty) out += "\n" + std::string(2 * depth, ' ');
        out += c;
    }
    void num(double v) {
        value_prefix();
        if (!std::isfinite(v)) {
            out += "null";
            return;
        }
        char buf[64];
        snprintf(buf, sizeof buf, "%.10g", v);
        out += buf;
    }
    void str(const std::string& s) {
        value_prefix();
        out += "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += "\"";
    }
    void boolean(bool b) {
        value_prefix();
        out += b ? "true" : "false";
    }
    void kv(const char* k, double v) { key(k), num(v); }
    void kv(const char* k, const std::string& v) { key(k), str(v); }
    void kv(const char* k, const char* v) { key(k), str(v); }
    void kvb(const char* k, bool v) { key(k), boolean(v); }
};
}  // namespace

void print_json(const std::vector<Result>& rs, const Options& o) {
    Json j;
    j.open('{');
    j.kv("paper", "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models");
    j.kv("bytes_per_activation", o.d);
    j.kv("attention", attention_name(o.attention));  // of the per-GPU totals' first six layouts
    j.kv("cp", o.cp);                                 // context-parallel size of the per-GPU totals
    j.kv("param_dtype", o.bf16_states ? "bf16" : "fp32");
    j.kv("bytes_per_param_override", o.bytes_per_param);
    j.kv("gpu_memory_gib", o.gpu_mem_gib);
    j.kv("peak_flops_per_gpu", o.peak);
    j.key("models");
    j.open('[');
    for (const Result& r : rs) {
        const ModelSpec& m = r.spec;
        j.open('{');
        j.kv("name", m.name);
        j.kv("paper_config", m.paper ? "Table 3" : !m.paper_quote.empty() ? "530B at data-parallel 8 (abstract)" : "custom");
        j.key("config");
        j.open('{');
        j.kv("heads", m.a), j.kv("hidden", m.h), j.kv("layers", m.L), j.kv("seq", m.s), j.kv("vocab", m.v);
        j.kv("tp", m.t), j.kv("cp", m.c), j.kv("pp", m.p), j.kv("interleave", m.m), j.kv("dp", m.dp);
        j.kv("gpus", m.gpus());
        j.kv("micro_batch", m.b), j.kv("global_batch", m.B), j.kv("params", r.params);
        j.close('}');
        j.key("table2_bytes_per_layer");
        j.open('[');
        for (int i = 0; i < kTable2Rows; i++) {
            j.open('{');
            j.kv("configuration", table2_row_name((Table2Row)i));
            j.kv("formula", table2_row_formula((Table2Row)i));
            j.kv("bytes", r.table2[i]);
            j.kv("flash_formula", table2_flash_formula((Table2Row)i));
            j.kv("flash_bytes", r.table2_flash[i]);
            j.close('}');
        }
        j.close(']');
        j.key("layer_bytes");
        j.open('{');
        for (int i = 0; i < kNumLayouts; i++) j.kv(kLayouts[i].key, r.layer[i]);
        j.close('}');
        j.key("figure7_percent_of_tp");
        j.open('{');
        j.kv("five_as_over_h", r.five_as_h);
        for (int i = 0; i < 4; i++) j.kv(kLayouts[kFig7Layouts[i]].key, r.fig7[i]);
        j.kv("four_a_over_h", r.four_a_h);
        j.kv(kLayouts[kTPFlash].key, r.fig7_flash[0]), j.kv(kLayouts[kTPSPFlash].key, r.fig7_flash[1]);
        j.close('}');
        j.kv("selective_saving_percent", 100 * r.saving_sel);
        j.kv("selective_saving_percent_plain_tp", 100 * r.saving_sel_tp);
        j.key("pipeline_first_stage");
        j.open('{');
        j.kv("schedule", pipe_schedule_name(m.schedule));
        j.kv("microbatches", r.pipe.microbatches), j.kv("warmup_forwards", r.pipe.warmup);
        j.kv("in_flight_chunks", r.pipe.in_flight), j.kv("layers_per_chunk", r.pipe.chunk_layers);
        j.kv("in_flight_layers", r.pipe.in_flight_layers), j.kv("paper_in_flight_layers", r.pipe.paper_layers);
        j.kv("embedding_masks_in_flight", r.pipe.embed_in_flight), j.kv("ideal_bubble", r.pipe.bubble);
        j.close('}');
        j.key("first_stage_params_per_gpu");
        j.open('{');
        j.kv("layers", r.stage_params.layers), j.kv("layer_params", r.stage_params.layer_params);
        j.kv("word_embedding", r.stage_params.word_embedding);
        j.kv("position_embedding", r.stage_params.position_embedding), j.kv("final_ln", r.stage_params.final_ln);
        j.kv("total", r.stage_params.total());
        j.close('}');
        j.kv("bytes_per_param", r.bytes_per_param);
        j.kv("bytes_per_param_distributed_optimizer", r.bytes_per_param_dist);
        j.key("first_stage_memory_bytes");
        j.open('{');
        j.kv("interleave_factor", r.interleave);
        for (int i = 0; i < kNumLayouts; i++) {
            const StageMemory& sm = r.stage[i];
            j.key(kLayouts[i].key);
            j.open('{');
            j.kv("layers", sm.layers), j.kv("outside_layers", sm.extras);
            j.kv("activations", sm.layers + sm.extras), j.kv("rebuilt_layer", sm.transient);
            j.kv("model_states", sm.state), j.kv("total", sm.total), j.kvb("fits", sm.fits);
            j.kv("model_states_distributed_optimizer", sm.state_dist);
            j.kv("total_distributed_optimizer", sm.total_dist);
            if (std::isfinite(sm.total_dist)) j.kvb("fits_distributed_optimizer", sm.fits_dist);
            else j.key("fits_distributed_optimizer"), j.num(NAN);
            j.close('}');
        }
        j.close('}');
        if (!r.zb_rows.empty()) {
            j.key("zero_bubble");
            j.open('{');
            j.key("times_f_b_w");
            j.open('[');
            for (double t : o.pipe_times) j.num(t);
            j.close(']');
            j.kv("layout", kLayouts[kZBLayout].key);
            j.key("schedules");
            j.open('[');
            for (const ZBRow& row : r.zb_rows) {
                j.open('{');
                j.kv("schedule", bubble_schedule_name(row.schedule));
                j.kv("bubble", row.bubble), j.kv("bubble_rate", row.rate), j.kv("idle_share", row.idle_share);
                j.kv("first_stage_in_flight", row.mem.in_flight), j.kv("layers_bytes", row.mem.layers_at_peak);
                j.kv("w_input_bytes", row.mem.w_inputs), j.kv("after_b_bytes", row.mem.after_b);
                j.kv("peak_bytes", row.mem.peak), j.kv("outside_layers_bytes", row.extras);
                j.kv("rebuilt_layer_bytes", row.transient), j.kv("model_states_bytes", row.state);
                j.kv("total_bytes", row.total), j.kvb("fits", row.fits);
                j.close('}');
            }
            j.close(']');
            j.close('}');
        }
        if (!r.cp_rows.empty()) {
            j.key("context_parallel");
            j.open('[');
            for (const CPRow& row : r.cp_rows) {
                j.open('{');
                j.kv("seq", row.s), j.kv("cp", row.c), j.kv("gpus", row.gpus), j.kv("tokens_per_gpu", row.tokens);
                j.kv("activations_tp_flash", row.acts_tp), j.kv("activations_tp_sp_flash", row.acts_tp_sp);
                j.kv("kv_forward_bytes_per_layer", row.kv_fwd), j.kv("kv_backward_bytes_per_layer", row.kv_bwd);
                j.kv("tp_sp_forward_bytes_per_layer", row.tp_fwd);
                j.close('}');
            }
            j.close(']');
        }
        j.key("flops_per_iteration");
        j.open('{');
        j.kv("model_eq7", r.flops_model), j.kv("hardware_selective_eq8", r.flops_sel);
        j.kv("hardware_full_recompute", r.flops_full);
        j.close('}');
        j.key("utilization");
        j.open('{');
        j.kv("iter_seconds_selective_sp", m.iter_selective), j.kv("iter_seconds_full", m.iter_full);
        j.kv("mfu_selective_sp_percent", r.mfu_sel), j.kv("hfu_selective_sp_percent", r.hfu_sel);
        j.kv("mfu_full_percent", r.mfu_full), j.kv("hfu_full_percent", r.hfu_full);
        j.kv("throughput_gain_percent", r.gain);
        if (m.paper) {
            j.kv("paper_mfu_percent", m.paper->table5_mfu), j.kv("paper_hfu_percent", m.paper->table5_hfu);
            j.kv("paper_gain_percent", m.paper->table5_gain);
        } else if (!m.paper_quote.empty()) {
            j.kv("paper_quote", m.paper_quote);
        }
        j.close('}');
        j.close('}');
    }
    j.close(']');
    j.close('}');
    printf("%s\n", j.out.c_str());
}

// ---- Figure 7 chart ------------------------------------------------------------------------------------
void write_chart(const std::vector<Result>& rs, const Options& o) {
    BarChart c;
    c.title = "Figure 7: activation memory per transformer layer";
    char sub[160];
    const ModelSpec& m0 = rs[0].spec;
    snprintf(sub, sizeof sub, "as %% of the tensor-parallel baseline; Table 2 formulas, t = %d, s = %.0f, d = %d", m0.t,
             m0.s, o.d);
    c.subtitle = sub;
    c.y_label = "% of TP baseline";
    c.x_label = "model (Table 3)";
    for (const Result& r : rs)
        if (!r.spec.same_layers_as_previous) c.groups.push_back(r.spec.name);
    for (int i = 0; i < 4; i++) {
        c.series.push_back(kFig7Names[i]);
        std::vector<double> row;
        for (const Result& r : rs)
            if (!r.spec.same_layers_as_previous) row.push_back(r.fig7[i]);
        c.values.push_back(row);
    }
    c.y_max = 110;
    c.reference_lines = {100};
    c.reference_labels = {"TP baseline = 100%"};
    std::string err;
    if (!write_bar_chart_png(c, o.chart, &err)) mm_fatal("--chart: %s", err.c_str());
    if (!o.json) printf("\nFigure 7 chart written to %s\n", o.chart.c_str());
}

// The runs with a measured step (Table 5, the 530B run at dp 8) as tools/beyond_paper.h takes them.
std::vector<BeyondModel> beyond_models(const std::vector<Result>& rs) {
    std::vector<BeyondModel> out;
    for (const Result& r : rs) {
        const ModelSpec& m = r.spec;
        if (!std::isfinite(m.iter_selective) || m.c != 1) continue;  // costs need the measured step
        BeyondModel b;
        b.name = m.name;
        b.shape = model_input(m, kLayouts[0], 2, Attention::Unfused, 1);
        b.vocab = m.v, b.dp = m.dp, b.M = r.pipe.microbatches, b.global_batch = m.B, b.schedule = m.schedule;
        b.in_flight = r.pipe.in_flight, b.embed_in_flight = r.pipe.embed_in_flight, b.iter_seconds = m.iter_selective;
        out.push_back(b);
    }
    return out;
}
