// calculator_results.cu — the paper-scale calculator's numbers for one model (tools/memory_calculator.h): the
// layouts of Table 2 and Figure 7, the first pipeline stage counted from the trainer's own schedule, the per-GPU
// totals, FLOPs and MFU, and the context-parallelism and zero-bubble rows. Every formula is recompute/'s.
#include <algorithm>
#include <cmath>
#include <vector>

#include "layers/model_shape.h"  // padded_vocab_for
#include "tools/memory_calculator.h"

PipelineCounts first_stage_counts(const ModelSpec& m) {
    PipelineCounts c;
    c.microbatches = (int)m.microbatches();
    c.warmup = pipe_warmup(m.schedule, m.p, 0, c.microbatches, m.m);
    const std::vector<PipeOp> ops = pipe_schedule(m.schedule, m.p, 0, c.microbatches, m.m);
    c.in_flight = pipe_peak_in_flight(ops);
    // Walk the ops again: at every moment the stage holds its peak, how many of the pairs are chunk 0's
    // (each keeps an embedding-dropout mask)? Interleaved, more than p can be (2p for 175B's m = 3).
    int live = 0, live0 = 0;
    for (const PipeOp& op : ops) {
        const int step = op.kind == PipeOp::Forward ? 1 : -1;
        live += step;
        if (op.chunk == 0) live0 += step;
        if (live == c.in_flight) c.embed_in_flight = std::max(c.embed_in_flight, live0);
    }
    c.chunk_layers = m.L / ((double)m.p * m.m);
    c.in_flight_layers = c.in_flight * c.chunk_layers;
    c.paper_layers = m.schedule == PipeSchedule::AFAB ? c.microbatches * m.L / m.p : m.L * interleave_factor(m.p, m.m);
    c.bubble = pipe_ideal_bubble(m.p, c.microbatches, m.m);
    return c;
}

// c: the context-parallel size; 1 for the paper's per-layer tables (Table 2, Figure 7), m.c for the totals.
ModelFormulaInput model_input(const ModelSpec& m, const Layout& lay, int d, Attention attention, int c) {
    ModelFormulaInput in;
    // The logits are as wide as the trainer's padded vocabulary (layers/model_shape.h; 51200 is already padded).
    in.s = m.s, in.b = m.b, in.h = m.h, in.a = m.a, in.L = m.L, in.v = padded_vocab_for((int)m.v);
    in.t = m.t, in.p = m.p, in.m = m.m, in.sp = lay.sp, in.rc = lay.rc, in.d = d;
    in.s = m.s / c;  // the rank's tokens under context parallelism
    in.core = attention_core_memory(attention);
    return in;
}
// The attention of a layout in the per-GPU totals: a flash layout is flash; the paper's take --attention.
static Attention stage_attention(const Layout& lay, const Options& o) {
    return lay.attention == Attention::Flash ? Attention::Flash : o.attention;
}

Result compute(const ModelSpec& m, const Options& o) {
    Result r;
    r.spec = m;
    r.five_as_h = 5 * m.a * m.s / m.h;
    r.four_a_h = 4 * m.a / m.h;
    for (int i = 0; i < kTable2Rows; i++) {
        r.table2[i] = table2_bytes((Table2Row)i, m.s, m.b, m.h, m.a, m.t);
        r.table2_flash[i] = table2_flash_bytes((Table2Row)i, m.s, m.b, m.h, m.a, m.t);
    }
    // Table 2 and Figure 7: each layout with its own attention (the paper's unfused, or flash), whatever
    // --attention says, so that the paper's columns stay the paper's.
    for (int i = 0; i < kNumLayouts; i++)
        r.layer[i] = layer_bytes(model_input(m, kLayouts[i], o.d, kLayouts[i].attention, 1).layer());
    for (int i = 0; i < 4; i++) r.fig7[i] = 100.0 * r.layer[kFig7Layouts[i]] / r.layer[0];
    r.fig7_flash[0] = 100.0 * r.layer[kTPFlash] / r.layer[0];
    r.fig7_flash[1] = 100.0 * r.layer[kTPSPFlash] / r.layer[0];
    r.saving_sel = selective_saving_fraction(m.s, m.h, m.a, m.t, true);
    r.saving_sel_tp = selective_saving_fraction(m.s, m.h, m.a, m.t, false);
    r.params = gpt_param_count(m.L, m.h, m.v, m.s);
    r.interleave = interleave_factor(m.p, m.m);
    r.pipe = first_stage_counts(m);
    r.stage_params = stage_params(m.L, m.h, m.v, m.s, m.t, m.p, 0);
    const bool fixed = std::isfinite(o.bytes_per_param);
    r.bytes_per_param = fixed ? o.bytes_per_param : model_state_bytes_per_param(o.bf16_states, m.dp, false);
    // The distributed optimizer shards over every rank that holds the same weights: dp x cp, as the trainer
    // shards it (CP ranks see different tokens of the same sequences and average their gradients).
    r.bytes_per_param_dist = fixed ? NAN : model_state_bytes_per_param(o.bf16_states, m.dp * m.c, true);
    const double state = r.stage_params.total() * r.bytes_per_param;
    const double state_dist = r.stage_params.total() * r.bytes_per_param_dist;
    for (int i = 0; i < kNumLayouts; i++) {
        ModelFormulaInput in = model_input(m, kLayouts[i], o.d, stage_attention(kLayouts[i], o), m.c);
        StageMemory& sm = r.stage[i];
        sm.layers = stage_layer_bytes_in_flight(in, r.pipe.in_flight);
        sm.extras = first_stage_extra_bytes(in, r.pipe.embed_in_flight);
        sm.transient = recompute_transient_bytes(in.layer());
        const double acts = sm.layers + sm.extras + sm.transient;
        sm.state = state, sm.state_dist = state_dist;
        sm.total = acts + state, sm.total_dist = acts + state_dist;
        sm.fits = sm.total <= o.gpu_mem_gib * GiB;
        sm.fits_dist = sm.total_dist <= o.gpu_mem_gib * GiB;  // false when NAN
    }
    r.flops_model = model_flops(m.B, m.L, m.s, m.h, m.v);
    r.flops_sel = hardware_flops_selective(m.B, m.L, m.s, m.h, m.v);
    r.flops_full = hardware_flops_full(m.B, m.L, m.s, m.h, m.v);
    if (std::isfinite(m.iter_selective)) {
        r.mfu_sel = 100 * flops_utilization(r.flops_model, m.iter_selective, o.peak, m.gpus());
        r.hfu_sel = 100 * flops_utilization(r.flops_sel, m.iter_selective, o.peak, m.gpus());
    }
    if (std::isfinite(m.iter_full)) {
        r.mfu_full = 100 * flops_utilization(r.flops_model, m.iter_full, o.peak, m.gpus());
        r.hfu_full = 100 * flops_utilization(r.flops_full, m.iter_full, o.peak, m.gpus());
    }
    if (std::isfinite(m.iter_selective) && std::isfinite(m.iter_full))
        r.gain = 100 * (m.iter_full / m.iter_selective - 1);
    if (m.zb_table) {
        const Layout& lay = kLayouts[kZBLayout];
        const ModelFormulaInput in = model_input(m, lay, o.d, stage_attention(lay, o), m.c);
        const double* T = o.pipe_times;
        for (BubbleSchedule s : {BubbleSchedule::OneFOneB, BubbleSchedule::ZeroBubbleH1, BubbleSchedule::ZeroBubbleH2,
                                 BubbleSchedule::ZeroBubbleV}) {
            ZBRow row;
            const int M = r.pipe.microbatches;
            row.schedule = s;
            // ZB-V's ops are half a stage's (two chunks per stage): its times are halved, the work the same.
            const double k = s == BubbleSchedule::ZeroBubbleV ? 0.5 : 1.0, tf = k * T[0], tb = k * T[1], tw = k * T[2];
            row.bubble = pipeline_bubble_time(s, m.p, M, tf, tb, tw);
            if (std::isnan(row.bubble)) continue;  // (ZB-V below M = 2p: no closed form; build/draw_pipeline --ideal)
            row.rate = pipeline_bubble_rate(s, m.p, M, tf, tb, tw);
            row.idle_share = pipeline_idle_share(s, m.p, M, tf, tb, tw);
            row.mem = first_stage_schedule_memory(in, s, M);
            // The masks of all in-flight micro-batches are added to the peak (after a B one fewer is held).
            row.extras = first_stage_extra_bytes(in, row.mem.in_flight);
            row.transient = recompute_transient_bytes(in.layer());
            row.state = state;
            row.total = row.mem.peak + row.extras + row.transient + row.state;
            row.fits = row.total <= o.gpu_mem_gib * GiB;
            r.zb_rows.push_back(row);
        }
    }
    if (m.cp_table) {
        // The model's own s when --seq is given, else two long sequences where CP is used in practice.
        std::vector<double> seqs = std::isfinite(o.seq) ? std::vector<double>{m.s} : std::vector<double>{32768, 131072};
        std::vector<int> cs = {1, 2, 4, 8};
        if (std::find(cs.begin(), cs.end(), o.cp) == cs.end()) cs.push_back(o.cp);
        std::sort(cs.begin(), cs.end());
        for (double s : seqs)
            for (int c : cs) {
                ModelSpec at = m;
                at.s = s, at.c = c;  // the schedule's counts (in flight) do not depend on s or c
                const ModelFormulaInput tp = model_input(at, kLayouts[kTPFlash], o.d, Attention::Flash, c);
                const ModelFormulaInput tp_sp = model_input(at, kLayouts[kTPSPFlash], o.d, Attention::Flash, c);
                CPRow row;
                row.s = s, row.c = c, row.gpus = at.gpus(), row.tokens = s / c;
                row.acts_tp = stage_layer_bytes_in_flight(tp, r.pipe.in_flight) + first_stage_extra_bytes(tp, r.pipe.embed_in_flight);
                row.acts_tp_sp =
                    stage_layer_bytes_in_flight(tp_sp, r.pipe.in_flight) + first_stage_extra_bytes(tp_sp, r.pipe.embed_in_flight);
                row.kv_fwd = cp_kv_forward_bytes(tp_sp.layer(), c);
                row.kv_bwd = cp_kv_backward_bytes(tp_sp.layer(), c);
                row.tp_fwd = tp_forward_bytes(tp_sp.layer());
                r.cp_rows.push_back(row);
            }
    }
    return r;
}

