// offload_model.cu — activation offloading in the model (see the header).
#include "offload_model.h"
#include "test_hooks.h"

#include <algorithm>
#include "../parallel/zero_bubble_schedule.h"

void offload_configure(GPT& m, const OffloadPolicy& policy) {
    m.offload.policy = policy;
    m.offload.mover.reset();
    if (policy.kind == OffloadPolicy::Off) return;
    if (policy.kind == OffloadPolicy::Layers && policy.layers > m.stage.layers_per_chunk)
        mm_fatal("--cpu-offloading-num-layers %d: a model chunk has %d layers (L/pp/m)", policy.layers, m.stage.layers_per_chunk);
    m.offload.mover.reset(new ActivationOffload(*m.ctx, *m.alloc));
    m.offload.mover->skip_produced_wait = g_test_hooks.skip_offload_wait;  // a negative control (tests only)
}

// The ops this stage runs in a step of M micro-batches: its pipeline schedule, or at pp 1 the accumulation loop
// (forward j, backward j: 1F1B at one stage).
static std::vector<PipeOp> stage_ops(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    if (st.pp > 1) return pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks);
    std::vector<PipeOp> ops;
    for (int j = 0; j < M; j++) ops.push_back({PipeOp::Forward, j, 0}), ops.push_back({PipeOp::Backward, j, 0});
    return ops;
}

// InFlight: micro-batch j of chunk c moves when, at its forward, the stage already keeps `K_c` of that chunk's
// micro-batches on the device. K_c: the policy's, or the last stage's count at its peak (its schedule's own).
static std::vector<std::vector<bool>> in_flight_plan(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    std::vector<int> keep((size_t)st.chunks, m.offload.policy.beyond);
    if (m.offload.policy.beyond < 0) {
        const std::vector<PipeOp> last = st.pp > 1 ? pipe_schedule(m.schedule, st.pp, st.pp - 1, M, st.chunks) : stage_ops(m, M);
        keep = pipe_in_flight_at_peak(last, st.chunks);
    }
    std::vector<std::vector<bool>> plan((size_t)M, std::vector<bool>((size_t)st.chunks, false));
    std::vector<int> resident((size_t)st.chunks, 0);
    for (const PipeOp& op : stage_ops(m, M)) {
        const size_t c = (size_t)op.chunk;
        if (op.kind == PipeOp::Forward) {
            if (resident[c] >= keep[c]) plan[(size_t)op.microbatch][c] = true;
            else resident[c]++;
        } else if (op.kind == PipeOp::Backward && !plan[(size_t)op.microbatch][c]) {
            resident[c]--;
        }
    }
    return plan;
}

static bool chooses(const GPT& m, const std::vector<std::vector<bool>>& plan, int j, int chunk, int layer) {
    const OffloadPolicy& p = m.offload.policy;
    if (p.kind == OffloadPolicy::Layers) {
        const int n = p.layers < 0 ? m.stage.layers_per_chunk - 1 : p.layers;
        return layer - m.stage.chunk_begin(chunk) < n;
    }
    if (p.kind == OffloadPolicy::InFlight) return j < (int)plan.size() && plan[(size_t)j][(size_t)chunk];
    return false;
}

bool offload_chooses(const GPT& m, int j, int chunk, int layer) { return chooses(m, m.offload.plan, j, chunk, layer); }

OffloadStep::OffloadStep(GPT& m, int micro_batches) : m_(m) {
    if (!offload_on(m)) return;
    if (m.offload.policy.kind == OffloadPolicy::InFlight) m.offload.plan = in_flight_plan(m, micro_batches);
    m.offload.mover->begin_step();
    m.offload.in_step = true;
}

OffloadStep::~OffloadStep() { m_.offload.in_step = false; }

void offload_after_forward(GPT& m, int j, int chunk, int layer, SavedLayer& s) {
    if (!m.offload.in_step) return;
    if (offload_chooses(m, j, chunk, layer)) m.offload.mover->offload(j, layer, s);
    if (layer + 1 == m.stage.chunk_end(chunk)) m.offload.mover->flush();  // the forward ends with them off the device
}

void reload_before_backward(GPT& m, int j, int chunk, int layer, std::vector<SavedLayer>& saved) {
    if (!m.offload.in_step) return;
    ActivationOffload& mover = *m.offload.mover;
    const PipelineStage& st = m.stage;
    mover.wait(j, layer, saved[(size_t)st.local_layer(layer)]);  // issued one layer ahead, or now (the chunk's last)
    if (layer - 1 >= st.chunk_begin(chunk)) mover.reload(j, layer - 1, saved[(size_t)st.local_layer(layer - 1)]);
}

// ---- measured next to the formula ------------------------------------------------------------------------------------
OffloadCounts offload_counts(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    OffloadCounts out;
    out.device.assign((size_t)m.cfg.layers, 0);
    out.host.assign((size_t)m.cfg.layers, 0);
    // The plan of a step of M micro-batches (what OffloadStep computes).
    const std::vector<std::vector<bool>> plan = m.offload.policy.kind == OffloadPolicy::InFlight ? in_flight_plan(m, M)
                                                                                               : std::vector<std::vector<bool>>();
    // The executor's moment (model/pipeline_step.cu): the first forward that brings the stage to its peak, F to B
    // (to W under a zero-bubble schedule); at pp 1 the first forward.
    const std::vector<PipeOp> ops = stage_ops(m, M);
    const bool zb = st.pp > 1 && is_zero_bubble(m.schedule);
    const int peak = st.pp == 1 ? 1 : zb ? zero_bubble_peak(ops).held : pipe_peak_in_flight(ops);
    std::vector<std::pair<int, int>> held;  // (micro-batch, chunk): forward run, backward not
    int in_flight = 0, on_host = 0;
    bool marked = false;
    auto moved_layers = [&](int j, int c) {
        int n = 0;
        for (int l = st.chunk_begin(c); l < st.chunk_end(c); l++) n += chooses(m, plan, j, c, l) ? 1 : 0;
        return n;
    };
    for (const PipeOp& op : ops) {
        if (op.kind == PipeOp::Forward) {
            held.push_back({op.microbatch, op.chunk});
            on_host += moved_layers(op.microbatch, op.chunk);
            out.moved += moved_layers(op.microbatch, op.chunk);
            out.host_peak = std::max(out.host_peak, on_host);
            if (++in_flight == peak && !marked) {
                marked = true;
                for (const auto& jc : held)
                    for (int l = st.chunk_begin(jc.second); l < st.chunk_end(jc.second); l++)
                        (chooses(m, plan, jc.first, jc.second, l) ? out.host : out.device)[(size_t)l] += 1;
            }
        } else if (op.kind == PipeOp::Backward) {
            held.erase(std::find(held.begin(), held.end(), std::make_pair(op.microbatch, op.chunk)));
            on_host -= moved_layers(op.microbatch, op.chunk);
            if (!zb) in_flight--;
        } else {
            in_flight--;
        }
    }
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
    const double fl = layer_train_flops(shape.layer()), copy = transfer_seconds(per, kHostLinkBytesPerSecond);
    fprintf(f, "  at %.0f GB/s (PCIe 4.0 x16) one layer's copy takes %.3g ms each way, %.3g ms per step each way; the next\n"
               "  layer's forward takes at least %.3g ms and a layer's backward %.3g ms at the A100's %.0f TFLOP/s (bf16 peak):\n"
               "  the copies %s (on a GPU they overlap on their own stream; not measured without one)\n",
            kHostLinkBytesPerSecond / 1e9, copy * 1e3, c.moved * copy * 1e3, fl / 3 / kA100PeakBf16 * 1e3, 2 * fl / 3 / kA100PeakBf16 * 1e3,
            kA100PeakBf16 / 1e12, copy <= fl / 3 / kA100PeakBf16 ? "can hide behind the compute" : "take longer than the compute they could hide behind");
}
