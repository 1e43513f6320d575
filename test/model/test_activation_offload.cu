// test_activation_offload.cu — activation offloading (recompute/activation_offload.cu, model/offload_model.cu)
// changes no bit, and moves and holds what its formulas say.
//
// Run under mpirun, world = tp × cp × dp × pp. Every rank builds the model twice on MPI_COMM_WORLD, without and
// with offloading:
//   test_activation_offload [--policy layers|layers:N|in-flight|in-flight:K] [--tp T] [--sp] [--pp P]
//       [--schedule 1f1b|afab|interleaved|zb-h1|zb-h2] [--chunks m] [--cp C] [--micro M] [--dtype fp32|bf16]
//       [--recompute none|selective|full] [--zero 2|3] [--device cpu|cuda] [--steps N]
//   1. one step's loss and gathered gradients, and N training steps' losses and final parameters: bit for bit
//      the run without offloading (dropout on);
//   2. after a step: the bytes copied to the host and back == the moved layer-micro-batches × offload_layer_bytes,
//      the host pool's high-water mark == its formula, and the device's saved activations at the schedule's peak
//      (the allocator's snapshot, as --memory-report takes it) == the formula at the device's counts;
//   3. --policy in-flight at pp > 1 (the first-stage policy): every stage keeps on the device the layer-micro-
//      batches the last stage keeps, measured (and the first stage moved some).
//   --forward-peak [--layers L] (pp 1): the forward's peak, mid-chunk, is at least (L − 3) layers lower with offloading
//      than without: a layer's device blocks go back one layer later, not at the chunk's end (forward_peak).
//   After the step of 2.: --memory-report's rank total == the high-water mark of the rank's whole account, the host
//      pool in it (check_rank_total).
//   --skip-offload-wait (negative control, --device cuda on the emulated GPU): the copy stream does not wait for
//      the layer's forward; the gradients must then differ from the run without offloading (checked: this test
//      passes only if they do).
#include <cstring>
#include "model_fixture.h"
#include "../../model/offload_model.h"
#include "../../model/pipeline_step.h"
#include "../../recompute/flash_memory.h"
#include "../../recompute/other_reports.h"

static int g_rank = 0;

struct Run {
    float loss = 0;
    std::vector<float> grads, curve, params;
};

static Run run(const ModelSpec& spec, const OffloadPolicy& policy, int B, int S, int micro, int steps) {
    Run r;
    {
        ModelHarness h(spec, MPI_COMM_WORLD);
        offload_configure(h.model, policy);
        r.loss = loss_and_grads(h, B, S, 1, r.grads, true, micro);
    }
    ModelHarness h(spec, MPI_COMM_WORLD);
    offload_configure(h.model, policy);
    r.curve = loss_curve(h, B, S, steps, micro);
    gpt_gather_full(h.model, r.params);
    return r;
}

// After a step: --memory-report's rank total (recompute/other_reports.h) == the high-water mark of the rank's whole
// account; the host pool is in it (its own peak), and nothing is left there after the step.
static void check_rank_total(ModelHarness& h) {
    MemoryReport r;
    add_model_state(r, h.model.state_memory, gpt_model_state_formula(h.model));
    const RankMemory& a = rank_memory();
    const HostActivationPool& pool = h.model.offload.mover->host();
    const int host = (int)MemoryKind::OffloadHost;
    CHECK(a.total_at_peak() == a.peak_total, "stage %d: the report's rank total %lld != the account's high-water mark %lld", h.grid.pp_rank,
          (long long)a.total_at_peak(), (long long)a.peak_total);
    CHECK(a.kind_peak[host] == (int64_t)pool.peak_bytes() && a.live[host] == 0, "stage %d: the account's host pool peak %lld (now %lld), "
          "the pool's own %zu", h.grid.pp_rank, (long long)a.kind_peak[host], (long long)a.live[host], pool.peak_bytes());
    // Without the host pool (and ZeRO-2/3's pool) only the activation allocator's blocks move beside the constant
    // states: the peak of every kind but the host pool (on CUDA, the GPU's share) is exactly their sum.
    if (!h.model.sharded.on())
        CHECK(a.peak_without_host == (int64_t)h.alloc->peak_live_bytes() + h.model.state_memory.total(),
              "stage %d: the account's peak without the host pool %lld != the activation allocator's peak %zu + the states %lld",
              h.grid.pp_rank, (long long)a.peak_without_host, h.alloc->peak_live_bytes(), (long long)h.model.state_memory.total());
    CHECK(a.peak_total >= (int64_t)h.alloc->peak_live_bytes() + h.model.state_memory.total(),
          "stage %d: the account's peak %lld holds less than the activation allocator's peak %zu + the states %lld", h.grid.pp_rank,
          (long long)a.peak_total, h.alloc->peak_live_bytes(), (long long)h.model.state_memory.total());
}

// The forward's peak at pp 1 (--forward-peak), measured by the allocator over one micro-batch's forward: with every
// layer but the chunk's last offloaded, a layer's blocks go back one layer later (model/offload_layers.cu), so the
// device holds at most two layers' saved tensors at once, and the peak must be at least (moved − 2) layers below the
// run without offloading (a layer: its saved bytes, measured there). Released only at the chunk's end, the peak
// falls by the head's share alone, mid-chunk: the check fails.
static void forward_peak(const ModelSpec& spec, int B, int S) {
    double peak[2] = {0, 0}, layer = 0;
    for (int off = 0; off < 2; off++) {
        ModelHarness h(spec, MPI_COMM_WORLD);
        GPT& m = h.model;
        OffloadPolicy p;
        if (off) p.kind = OffloadPolicy::Layers;  // each chunk's layers but its last
        offload_configure(m, p);
        Batch b = make_batch(m.cfg, B, S, 1, h.grid.dp, h.grid.dp_rank);
        gpt_zero_grad(m);
        {
            OffloadStep scope(m, 1);
            h.alloc->reset_peak();
            gpt_forward(m, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, true);
            ctx_sync(h.ctx);
            peak[off] = (double)h.alloc->peak_live_bytes();
            if (!off) {
                const ModelFormulaInput shape = formula_input(S, B / h.grid.dp, m.cfg.channels, m.cfg.heads, m.cfg.layers, m.cfg.padded_vocab,
                                                              spec.tp, spec.sp, spec.rc, (int)dtype_size(spec.dtype), spec.attention, spec.cp);
                const MemoryReport r = build_memory_report(h.alloc->live(), shape);
                layer = r.per_layer_measured + r.per_layer_extras;
            }
            gpt_backward(m);
        }
        ctx_sync(h.ctx);
        CHECK(h.alloc->live_bytes() == 0, "activations left after the backward: %zu bytes", h.alloc->live_bytes());
    }
    const int moved = spec.cfg.layers - 1;
    if (g_rank == 0)
        printf("  forward peak at pp 1, %d layers (%.0f B saved each): %.0f B without offloading, %.0f B with %d layers offloaded "
               "(%.2f layers lower; at least %d required)\n", spec.cfg.layers, layer, peak[0], peak[1], moved, (peak[0] - peak[1]) / layer,
               moved - 2);
    CHECK(layer > 0 && peak[0] - peak[1] >= (moved - 2) * layer,
          "the forward's peak with offloading (%.0f B) is only %.0f B below the run without (%.0f B): under %d layers of %.0f B; the "
          "offloaded layers are not released one layer later", peak[1], peak[0] - peak[1], peak[0], moved - 2, layer);
}

// One step with the allocator keeping its peak snapshot: the bytes moved and held, against the formulas.
static void measure(const ModelSpec& spec, const OffloadPolicy& policy, int B, int S, int micro) {
    ModelHarness h(spec, MPI_COMM_WORLD);
    GPT& m = h.model;
    offload_configure(m, policy);
    h.alloc->keep_peak_snapshot(true);
    Batch b = make_batch(m.cfg, B, S, 1, h.grid.dp, h.grid.dp_rank);
    h.alloc->reset_peak();  // and the rank's whole account's (layers/activation_allocator.h)
    train_step(m, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, OptimConfig(), 1, 1e-3f, micro);
    check_rank_total(h);
    const ModelFormulaInput shape = formula_input(S, B / h.grid.dp / micro, m.cfg.channels, m.cfg.heads, m.cfg.layers,
                                                  m.cfg.padded_vocab, spec.tp, spec.sp, spec.rc, (int)dtype_size(spec.dtype),
                                                  spec.attention, spec.cp);
    const OffloadCounts c = offload_counts(m, micro);
    const double per = offload_layer_bytes(shape.layer());
    const ActivationOffload& mover = *m.offload.mover;
    CHECK(mover.step_out_bytes == c.moved * per && mover.step_in_bytes == c.moved * per && mover.step_layers_out == c.moved &&
              mover.step_layers_in == c.moved,
          "stage %d: copied out %llu (%d layers), back %llu (%d); formula %d x %.0f", h.grid.pp_rank, (unsigned long long)mover.step_out_bytes,
          mover.step_layers_out, (unsigned long long)mover.step_in_bytes, mover.step_layers_in, c.moved, per);
    CHECK(mover.host().peak_bytes() == c.host_peak * per && mover.host().live_bytes() == 0,
          "stage %d: host pool peak %zu (live after the step %zu), formula %d x %.0f", h.grid.pp_rank, mover.host().peak_bytes(),
          mover.host().live_bytes(), c.host_peak, per);
    // The device's saved activations at the schedule's peak, as --memory-report builds them.
    InFlightLayers held = offload_resident(m, micro, pipeline_in_flight(m, micro));
    const MemoryReport rep = build_memory_report(h.alloc->peak_snapshot(), shape, held);
    CHECK(rep.stage_layers_measured == rep.stage_layers_formula && rep.layers_identical,
          "stage %d: device layers at the peak %.0f, formula %.0f (%d layer-micro-batches)%s", h.grid.pp_rank, rep.stage_layers_measured,
          rep.stage_layers_formula, rep.in_flight_layers, rep.layers_identical ? "" : ", layers differ");
    int on_host = 0;
    for (int x : c.host) on_host += x;
    if (h.grid.tp_rank == 0 && h.grid.dp_rank == 0 && h.grid.cp_rank == 0)
        printf("  stage %d: device %d layer-micro-batches = %.0f B at the peak (formula %.0f), host %d = %zu B at most (formula %.0f); "
               "%d layers x %.0f B out and back per step\n", h.grid.pp_rank, rep.in_flight_layers, rep.stage_layers_measured,
               rep.stage_layers_formula, on_host, mover.host().peak_bytes(), c.host_peak * per, c.moved, per);
    // The first-stage policy: the device keeps the last stage's layer-micro-batches, measured, on every stage.
    if (policy.kind == OffloadPolicy::InFlight && policy.beyond < 0 && spec.pp > 1) {
        double last = rep.stage_layers_measured;
        MPI_Bcast(&last, 1, MPI_DOUBLE, spec.pp - 1, h.grid.pp_comm.mpi);
        CHECK(rep.stage_layers_measured == last, "stage %d keeps %.0f bytes of layer activations on the device, the last stage %.0f",
              h.grid.pp_rank, rep.stage_layers_measured, last);
        if (h.grid.pp_rank == 0) CHECK(c.moved > 0, "the first stage moved nothing to the host");
        if (g_rank == 0) printf("  first-stage policy: stage 0 keeps on the device what the last stage keeps (%.0f B), measured\n", last);
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    ModelSpec spec;
    spec.cfg = tiny_config(4);
    OffloadPolicy policy;
    policy.kind = OffloadPolicy::Layers;
    int micro = 1, steps = 4, B = 4, S = 16;
    bool negative = false, fwd_peak = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--policy")) {
            const std::string v = argv[++i];
            policy.kind = v.rfind("in-flight", 0) == 0 ? OffloadPolicy::InFlight : OffloadPolicy::Layers;
            const size_t colon = v.find(':');
            if (colon != std::string::npos) (policy.kind == OffloadPolicy::Layers ? policy.layers : policy.beyond) = atoi(v.c_str() + colon + 1);
        } else if (!strcmp(argv[i], "--tp")) spec.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) spec.sp = true;
        else if (!strcmp(argv[i], "--pp")) spec.pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunks")) spec.chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cp")) spec.cp = atoi(argv[++i]), spec.attention = Attention::Flash;
        else if (!strcmp(argv[i], "--micro")) micro = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zero")) spec.zero = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dtype")) spec.dtype = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
        else if (!strcmp(argv[i], "--recompute")) parse_recompute(argv[++i], &spec.rc);
        else if (!strcmp(argv[i], "--device")) spec.device = !strcmp(argv[++i], "cuda") ? Device::CUDA : Device::CPU;
        else if (!strcmp(argv[i], "--skip-offload-wait")) negative = true;
        else if (!strcmp(argv[i], "--forward-peak")) fwd_peak = true;
        else if (!strcmp(argv[i], "--layers")) spec.cfg = tiny_config(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--schedule")) {
            const char* v = argv[++i];
            spec.schedule = !strcmp(v, "afab") ? PipeSchedule::AFAB : !strcmp(v, "interleaved") ? PipeSchedule::Interleaved
                          : !strcmp(v, "zb-h1") ? PipeSchedule::ZeroBubbleH1 : !strcmp(v, "zb-h2") ? PipeSchedule::ZeroBubbleH2
                                                                                 : PipeSchedule::OneFOneB;
        } else {
            fprintf(stderr, "test_activation_offload: unknown argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (spec.chunks > 1) spec.cfg = tiny_config(spec.pp * spec.chunks * 2);
    if (spec.device == Device::CUDA) {
        int ok = cuda_available() ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (g_rank == 0) printf("test_activation_offload: no CUDA GPU visible, skipping\n");
            MPI_Finalize();
            return 77;
        }
    }
    if (g_rank == 0)
        printf("test_activation_offload: policy %s%s, tp %d pp %d (%s, %d chunk%s) cp %d, %d micro-batch%s, %s/%s, recompute %s%s\n",
               policy.kind == OffloadPolicy::Layers ? "layers" : "in-flight",
               (policy.kind == OffloadPolicy::Layers ? policy.layers : policy.beyond) >= 0
                   ? (":" + std::to_string(policy.kind == OffloadPolicy::Layers ? policy.layers : policy.beyond)).c_str() : " (default)",
               spec.tp, spec.pp, pipe_schedule_name(spec.schedule), spec.chunks, spec.chunks == 1 ? "" : "s", spec.cp, micro,
               micro == 1 ? "" : "es", device_name(spec.device), dtype_name(spec.dtype), recompute_name(spec.rc),
               negative ? " (negative control: the copy stream does not wait for the forward)" : "");
    if (fwd_peak) {
        forward_peak(spec, B, S);
        int failed = g_failures, any = 0;
        MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        int rc = g_rank == 0 || g_failures ? test_finish("test_activation_offload --forward-peak") : 0;
        MPI_Finalize();
        return any ? 1 : rc;
    }
    OffloadPolicy off;
    const Run plain = run(spec, off, B, S, micro, steps);
    g_test_hooks.skip_offload_wait = negative;
    const Run moved = run(spec, policy, B, S, micro, steps);
    g_test_hooks.skip_offload_wait = false;
    const bool same = plain.loss == moved.loss && same_bits(plain.grads, moved.grads) && same_bits(plain.curve, moved.curve) &&
                      same_bits(plain.params, moved.params);
    if (negative) {
        CHECK(!same, "without the copy stream's wait for the forward the run still equals the one without offloading: the missing "
                     "wait went unseen");
        if (g_rank == 0 && !same)
            printf("  without the wait: the gradients differ from the run without offloading (rel %.2e), as they must\n",
                   norm_rel_err(moved.grads, plain.grads));
    } else {
        CHECK(same, "offloading changed the result: loss %.9g vs %.9g, gradients rel %.3e, curve %s, parameters %s", moved.loss, plain.loss,
              norm_rel_err(moved.grads, plain.grads), same_bits(plain.curve, moved.curve) ? "equal" : "differs",
              same_bits(plain.params, moved.params) ? "equal" : "differ");
        if (g_rank == 0 && same)
            printf("  bit for bit the run without offloading: loss, %zu gradients, %d losses, the final parameters\n", plain.grads.size(), steps);
        measure(spec, policy, B, S, micro);
    }
    int failed = g_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_failures) fprintf(stderr, "rank %d: ", g_rank);
    int rc = g_rank == 0 || g_failures ? test_finish("test_activation_offload") : 0;
    MPI_Finalize();
    return any ? 1 : rc;
}
