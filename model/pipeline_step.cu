// pipeline_step.cu — runs a pipeline schedule's ops (see the header).
#include "pipeline_step.h"

#include "pipeline_ops.h"
#include "../layers/test_hooks.h"
#include "../layers/trace.h"
#include "../parallel/zero_bubble_schedule.h"

#include <csignal>
#include <cstdio>

// Fault injection (tests only, layers/test_hooks.h: the trainer's hidden flag --stop-stage-at S:N): pipeline
// stage S stops itself (SIGSTOP) in its N-th step, before its second unit's exchange: alive, holding its
// sockets, answering nothing, as a hung GPU or a swapped-out node would be. The other stages must then stop
// within --comm-timeout, naming it (test/model/pipeline_peer_stopped.sh).
static void maybe_stop(int stage, int unit) {
    static int calls = 0;
    if (unit == 0) calls++;
    if (unit != 1 || g_test_hooks.stop_stage != stage || g_test_hooks.stop_stage_at_step != calls) return;
    fprintf(stderr, "fault injection: stage %d stops itself (SIGSTOP) in step call %d\n", stage, calls);
    fflush(stderr);
    raise(SIGSTOP);
}

// "F3.0 B1.0": a unit's ops, for messages.
static std::string op_name(const PipeOp& op) {
    const char* kind = op.kind == PipeOp::Forward ? "F" : op.kind == PipeOp::Backward ? "B" : "W";
    return kind + std::to_string(op.microbatch) + "." + std::to_string(op.chunk);
}
static std::string unit_name(const std::vector<PipeOp>& unit) {
    std::string s;
    for (const PipeOp& op : unit) s += (s.empty() ? "" : " ") + op_name(op);
    return s;
}

// The schedule unit by unit. Each unit starts with one exchange (parallel/point_to_point.h) that sends what the
// previous unit produced and receives what this unit consumes, then runs its forward and/or backward on what
// arrived; the last unit's sends go in a final exchange. This is the pairing of Megatron-LM's
// send_forward_recv_backward and its siblings; in the interleaved steady state a unit is a (forward,
// backward) pair, its send_forward_backward_recv_forward_backward.
//
// Why this order cannot deadlock under NCCL's rules (a send completes only once its receive is posted,
// messages between two stages match in issue order, a group completes as a unit):
//  1. every directed pair of stages issues its sends and its receives in the same order, so each message
//     meets its own counterpart;
//  2. an exchange waits only for its neighbours to reach the exchanges that hold the other side of its
//     messages, and those never wait, directly or through other stages, for anything after this one: a
//     receive's data was produced in a unit the sender runs earlier, and the warm-up forwards (pipe_warmup)
//     put enough micro-batches in flight that a backward's gradient is on its way before the unit that
//     needs it.
// test_pipeline_schedule checks both by simulating every rank under these rules for every schedule at
// p 2..8, M 1..16, m 2..4. The ungrouped order (each receive alone before its op, each send alone after it)
// deadlocks there for 1F1B at M >= 2 and for every interleaved layout; --comm mpi-strict reproduces that on
// CPUs (test_equivalence_strict_ungrouped_deadlocks). (Before 2026-12-03 a 1F1B steady-state unit was a
// (forward, backward) pair too: the forward's output then waited for the backward, which at p = 2 made the two
// stages take turns; the trace's picture showed it.)
float pipeline_forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches) {
    const int M = micro_batches, b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("pipeline_forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    const PipelineStage& st = m.stage;
    Comm& pp = m.grid->pp_comm;
    const std::vector<std::vector<PipeOp>> units = pipe_units(m.schedule, st.pp, st.rank, M, st.chunks);
    // The moment of the memory report's snapshot: the most micro-batches in flight (F run, B not; under a
    // zero-bubble schedule F run, W not: zero_bubble_schedule.h), first reached.
    const std::vector<PipeOp> ops = pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks);
    const bool zb = is_zero_bubble(m.schedule);
    const int peak = zb ? zero_bubble_peak(ops).held : pipe_peak_in_flight(ops);
    const std::string stage = "stage " + std::to_string(st.rank);

    gpt_zero_grad(m);
    for (int j = 0; j < M; j++)  // every micro-batch's tokens and coordinates (dropout keyed globally)
        gpt_begin_microbatch(m, j, M, inputs + (size_t)j * b * S, targets + (size_t)j * b * S, b, S, true);
    double loss = 0;
    int in_flight = 0;
    bool peak_marked = false;
    auto run = [&](const PipeOp& op, Tensor received) {
        // --trace: the op as one span of this rank's compute row (layers/trace.h; nothing when not recording)
        TraceScope span(TraceThread::Compute, "compute", op_name(op), trace_recording() ? "\"step\":" + std::to_string(m.step) : "");
        if (op.kind == PipeOp::Forward) {
            loss += pipeline_forward(m, op.microbatch, op.chunk, received);  // the last stage: micro-batches in order
            if (++in_flight == peak && !peak_marked) {  // (in_flight: until the B, or under ZB the W)
                peak_marked = true;
                m.alloc->mark_peak();  // the memory report's snapshot (layers/activation_allocator.h)
            }
        } else if (op.kind == PipeOp::Backward) {
            pipeline_backward(m, op.microbatch, op.chunk, received);
            if (!zb) in_flight--;
        } else {
            gpt_weight_gradients(m, op.microbatch, op.chunk);  // a zero-bubble W: no message
            in_flight--;
        }
    };
    for (size_t u = 0; u < units.size(); u++) {
        const std::vector<PipeOp>& unit = units[u];
        maybe_stop(st.rank, (int)u);
        const std::string doing = stage + ", unit " + unit_name(unit);
        comm_set_activity(doing);
        if (g_test_hooks.ungrouped_p2p) {
            // Negative control (test only): the order before grouping. Each op receives alone right before it
            // runs and sends alone right after; under NCCL's rules (--comm mpi-strict) this deadlocks.
            for (const PipeOp& op : unit) {
                run(op, pipeline_receive_alone(m, op, "(ungrouped) before " + unit_name({op})));
                exchange(pp, *m.ctx, {}, "(ungrouped) after " + unit_name({op}) + " on " + stage);
            }
            continue;
        }
        std::vector<P2PMessage> recvs;
        std::vector<Tensor> in(unit.size());
        for (size_t i = 0; i < unit.size(); i++) {
            P2PMessage r;
            if (pipeline_receive(m, unit[i], &r)) in[i] = r.t, recvs.push_back(r);
        }
        // A zero-bubble unit's W's (at its front) run while its exchange is in flight: the previous B's
        // gradient is on its way to the stage before, and the wait for this unit's inputs overlaps them.
        size_t w = 0;
        while (w < unit.size() && unit[w].kind == PipeOp::WeightGrad) w++;
        if (w == 0) {
            exchange(pp, *m.ctx, recvs, "before " + doing);
        } else {
            exchange_start(pp, *m.ctx, recvs, "before " + doing);
            for (size_t i = 0; i < w; i++) run(unit[i], Tensor());
            exchange_finish(pp, *m.ctx);
        }
        for (size_t i = w; i < unit.size(); i++) run(unit[i], in[i]);
    }
    if (!m.weight_grads.empty()) mm_fatal("%s: the step ended with weight gradients no W pass computed", stage.c_str());
    exchange(pp, *m.ctx, {}, "after the last unit of " + stage);
    comm_set_activity(stage + ", the end of the step");
    float mean = (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
    broadcast_host(pp, &mean, (int)sizeof mean, st.pp - 1, "the step's loss");
    comm_set_activity("");
    return mean;
}

InFlightLayers pipeline_in_flight(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    // pp 1 runs no schedule: the plain loop holds one micro-batch at a time, 1F1B's count at one stage.
    const PipeSchedule schedule = st.pp > 1 ? m.schedule : PipeSchedule::OneFOneB;
    const std::vector<PipeOp> ops = pipe_schedule(schedule, st.pp, st.rank, M, st.chunks);
    // (Zero bubble: the saved activations at the moment the executor marks, one chunk.)
    const std::vector<int> per_chunk = is_zero_bubble(schedule) ? std::vector<int>{zero_bubble_peak(ops).saved}
                                                                : pipe_in_flight_at_peak(ops, st.chunks);
    InFlightLayers held;
    held.per_layer.assign((size_t)m.cfg.layers, 0);
    for (int c = 0; c < st.chunks; c++)
        for (int l = st.chunk_begin(c); l < st.chunk_end(c); l++) held.per_layer[(size_t)l] = per_chunk[(size_t)c];
    held.embedding = st.first() ? per_chunk[0] : 0;
    held.head = st.last() ? per_chunk[(size_t)st.chunks - 1] : 0;
    return held;
}

int pipeline_weight_pending(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    if (st.pp == 1 || !is_zero_bubble(m.schedule)) return 0;
    return zero_bubble_peak(pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks)).pending;
}
