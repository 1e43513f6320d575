// offload_model.cu — activation offloading in the model (see the header).
#include "offload_model.h"
#include "../layers/test_hooks.h"

#include <algorithm>
#include "offload_layers.h"
#include "../parallel/offload_schedule.h"
#include "../parallel/zero_bubble_schedule.h"

bool offload_on(const GPT& m) { return m.offload.policy.kind != OffloadPolicy::Off; }

void offload_configure(GPT& m, const OffloadPolicy& policy) {
    m.offload.policy = policy;
    m.offload.mover.reset();
    if (policy.kind == OffloadPolicy::Off) return;
    if (policy.kind == OffloadPolicy::Layers && policy.layers > m.stage.layers_per_chunk)
        mm_fatal("--cpu-offloading-num-layers %d: a model chunk has %d layers (L/pp/m)", policy.layers, m.stage.layers_per_chunk);
    m.offload.mover.reset(new ActivationOffload(*m.ctx, *m.alloc));
    m.offload.mover->skip_produced_wait = g_test_hooks.skip_offload_wait;  // a negative control (tests only)
}

// InFlight: micro-batch j of chunk c moves when, at its forward, the stage already keeps K_c of that chunk's
// micro-batches on the device (parallel/offload_schedule.h). K_c: the policy's, or the last stage's count.
static std::vector<std::vector<bool>> in_flight_plan(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    const std::vector<int> keep = m.offload.policy.beyond >= 0 ? std::vector<int>((size_t)st.chunks, m.offload.policy.beyond)
                                                               : offload_last_stage_keep(m.schedule, st.pp, M, st.chunks);
    return offload_in_flight_plan(offload_stage_ops(m.schedule, st.pp, st.rank, M, st.chunks), M, st.chunks, keep);
}

OffloadStep::OffloadStep(GPT& m, int micro_batches) : m_(m) {
    if (!offload_on(m)) return;
    if (m.offload.policy.kind == OffloadPolicy::InFlight) m.offload.plan = in_flight_plan(m, micro_batches);
    m.offload.mover->begin_step();
    m.offload.in_step = true;
}

OffloadStep::~OffloadStep() { m_.offload.in_step = false; }

// ---- measured next to the formula ------------------------------------------------------------------------------------
OffloadCounts offload_counts(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    // The plan of a step of M micro-batches (what OffloadStep computes), counted over the stage's ops.
    const std::vector<std::vector<bool>> plan = m.offload.policy.kind == OffloadPolicy::InFlight ? in_flight_plan(m, M)
                                                                                               : std::vector<std::vector<bool>>();
    auto moved = [&](int j, int chunk, int i) {
        return offload_chooses(m.offload.policy, plan, st, j, chunk, st.chunk_begin(chunk) + i);
    };
    const OffloadScheduleCounts c = offload_schedule_counts(
        offload_stage_ops(m.schedule, st.pp, st.rank, M, st.chunks), st.pp > 1 && is_zero_bubble(m.schedule), st.chunks,
        st.layers_per_chunk, moved);
    OffloadCounts out;
    out.device.assign((size_t)m.cfg.layers, 0);
    out.host.assign((size_t)m.cfg.layers, 0);
    for (int chunk = 0; chunk < st.chunks; chunk++)
        for (int i = 0; i < st.layers_per_chunk; i++) {
            out.device[(size_t)(st.chunk_begin(chunk) + i)] = c.device[(size_t)chunk][(size_t)i];
            out.host[(size_t)(st.chunk_begin(chunk) + i)] = c.host[(size_t)chunk][(size_t)i];
        }
    out.host_peak = c.host_peak, out.moved = c.moved;
    return out;
}

InFlightLayers offload_resident(const GPT& m, int M, InFlightLayers held) {
    if (!offload_on(m)) return held;
    const OffloadCounts c = offload_counts(m, M);
    held.per_layer = c.device;  // the device's share; every layer the stage holds keeps its entry (0: all moved)
    return held;
}

void print_offload_report(FILE* f, const GPT& m, int M, const ModelFormulaInput& shape) {
    if (!offload_on(m)) return;
    const OffloadCounts c = offload_counts(m, M);
    const ActivationOffload& mover = *m.offload.mover;
    const double per = offload_layer_bytes(shape.layer());  // recompute/memory_techniques.h
    int on_device = 0, on_host = 0;
    for (size_t l = 0; l < c.device.size(); l++) on_device += c.device[l], on_host += c.host[l];
    const OffloadPolicy& p = m.offload.policy;
    char policy[160];
    if (p.kind == OffloadPolicy::Layers)
        snprintf(policy, sizeof policy, "each chunk's first %d layer%s", p.layers < 0 ? m.stage.layers_per_chunk - 1 : p.layers,
                 p.layers == 1 ? "" : "s");
    else if (p.beyond >= 0) snprintf(policy, sizeof policy, "the micro-batches in flight beyond %d", p.beyond);
    else snprintf(policy, sizeof policy, "the micro-batches in flight beyond the last stage's count");
    fprintf(f, "\nActivation offloading (%s; recompute/activation_offload.h): measured next to recompute/memory_techniques.h\n", policy);
    fprintf(f, "  one layer and micro-batch moves %.0f bytes: its saved tensors (the layer's formula above) and the\n"
               "  layer-norm statistics; at the report's moment %d layer-micro-batch%s on the device (the table above),\n"
               "  %d on the host\n", per, on_device, on_device == 1 ? " is" : "es are", on_host);
    fprintf(f, "  %-28s %14s %14s %10s\n", "", "measured", "formula", "diff");
    auto row = [&](const char* what, double measured, double formula, const char* note) {
        fprintf(f, "  %-28s %14.0f %14.0f %10.0f   %s\n", what, measured, formula, measured - formula, note);
    };
    char note[96];
    snprintf(note, sizeof note, "%d layer-micro-batches at the step's most", c.host_peak);
    row("host memory, peak", (double)mover.host().peak_bytes(), c.host_peak * per, note);
    snprintf(note, sizeof note, "%d layer-micro-batches per step (%d measured)", c.moved, mover.step_layers_out);
    row("copied to the host", (double)mover.step_out_bytes, c.moved * per, note);
    snprintf(note, sizeof note, "%d layer-micro-batches per step (%d measured)", c.moved, mover.step_layers_in);
    row("copied back", (double)mover.step_in_bytes, c.moved * per, note);
    // Time, at a stated bandwidth, next to the compute a copy can hide behind (at the peak: a lower bound).
    const double fl = layer_train_flops(shape.layer(), m.grid->cp), copy = transfer_seconds(per, kHostLinkBytesPerSecond);
    fprintf(f, "  at %.0f GB/s (PCIe 4.0 x16) one layer's copy takes %.3g ms each way, %.3g ms per step each way; the next\n"
               "  layer's forward takes at least %.3g ms and a layer's backward %.3g ms at the A100's %.0f TFLOP/s (bf16 peak):\n"
               "  the copies %s (on a GPU they overlap on their own stream; not measured without one)\n",
            kHostLinkBytesPerSecond / 1e9, copy * 1e3, c.moved * copy * 1e3, fl / 3 / kA100PeakBf16 * 1e3, 2 * fl / 3 / kA100PeakBf16 * 1e3,
            kA100PeakBf16 / 1e12, copy <= fl / 3 / kA100PeakBf16 ? "can hide behind the compute" : "take longer than the compute they could hide behind");
}
