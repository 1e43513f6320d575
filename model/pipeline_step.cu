// pipeline_step.cu — runs a pipeline schedule's ops (see the header).
#include "pipeline_step.h"

#include "pipeline_ops.h"
#include "../layers/test_hooks.h"
#include "../layers/trace.h"
#include "../parallel/zero_bubble_schedule.h"

#include <csignal>
#include <cstdio>
#include <functional>

// Fault injection (tests only, layers/test_hooks.h: the trainer's hidden flag --stop-stage-at S:N): pipeline
// stage S stops itself (SIGSTOP) in its N-th step, before its second unit's (or op's) exchange: alive, holding its
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

// Post-validation: the tied embedding's gradient sum over {first, last} starts once this stage's part is final,
// as one message each way (a copy is sent, so the gradient may change meanwhile; the receiver pulls the bytes without
// the sender's help), on the group's side communicator (point_to_point.h: it meets no pipeline message).
static void start_embedding_sum(GPT& m) {
    PipelineRunState& s = m.pipe;
    Comm& emb = m.grid->emb_comm;
    const Tensor g = gpt_grad(m, P_WTE);
    pipeline_embedding_send_wait(m);  // the previous step's part has left (long ago) before its buffer is reused
    s.embedding_sent.assign(g.as<float>(), g.as<float>() + g.n);
    s.embedding_received.assign((size_t)g.n, 0.f);
    const MPI_Comm side = side_comm(emb);
    const int other = 1 - emb.rank;
    MPI_CHECK(MPI_Irecv(s.embedding_received.data(), (int)g.n, MPI_FLOAT, other, 7402, side, &s.embedding_requests[0]));
    MPI_CHECK(MPI_Isend(s.embedding_sent.data(), (int)g.n, MPI_FLOAT, other, 7402, side, &s.embedding_requests[1]));
    s.embedding_started = true;
}

// The schedule op by op. Before each op one exchange is posted (parallel/point_to_point.h, exchange_post): the
// sends the previous op produced and the receive this op needs; then the op waits for that receive only, and
// runs. Sends complete when their peers receive them: a stage never waits for its neighbour to reach the op
// that takes what it sent. This is Megatron-LM's pairing of each op's receive with the previous op's sends
// (send_forward_recv_backward and its siblings), under NCCL's rules: a send may wait until the peer has posted
// the receive, and the messages between two stages match in issue order.
//
// Why it cannot deadlock: every directed pair of stages issues its sends and its receives in the same order
// (each message meets its counterpart), and a stage waits only for the input of its next op, which its peer
// produces in an op that, by the schedule's dependencies, never waits for anything after this one (the
// dependency graph of every schedule here has no cycle). test_pipeline_schedule simulates every rank under these
// rules for every schedule at p 2..8, M 1..16, m 2..4, and the old ways too: the exchange that completes as a
// unit (sends included: whole units, below) and the ungrouped order (each receive alone before its op, each send
// alone after it), which deadlocks for 1F1B at M >= 2 and for every interleaved layout (--comm mpi-strict shows
// it on CPUs: test_equivalence_strict_ungrouped_deadlocks).
//
// Whole units (NCCL, where one communicator's group completes as a unit, and the negative controls): the
// schedule's units (pipe_units), each starting with one exchange that waits for everything in it; a
// zero-bubble unit's W's run between exchange_start and exchange_finish. ZB-H2 then stalls its first stage (a
// steady (F, B) unit waits for the B's gradient before its F can run: bench/PERF_NOTES.md).
static void run_whole_units(GPT& m, const std::vector<std::vector<PipeOp>>& units, const std::string& stage,
                            const std::function<void(const PipeOp&, Tensor)>& run) {
    Comm& pp = m.grid->pp_comm;
    for (size_t u = 0; u < units.size(); u++) {
        const std::vector<PipeOp>& unit = units[u];
        maybe_stop(m.stage.rank, (int)u);
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
            if (pipeline_receive(m, unit[i], &r, &in[i])) in[i] = r.t, recvs.push_back(r);
        }
        size_t w = 0;  // a zero-bubble unit's W's (at its front) run while its exchange is in flight
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
    exchange(pp, *m.ctx, {}, "after the last unit of " + stage);
}

static void run_posted(GPT& m, const std::vector<PipeOp>& ops, const std::string& stage,
                       const std::function<void(const PipeOp&, Tensor)>& run) {
    Comm& pp = m.grid->pp_comm;
    for (size_t i = 0; i < ops.size(); i++) {
        const PipeOp& op = ops[i];
        maybe_stop(m.stage.rank, (int)i);
        const std::string doing = stage + ", op " + op_name(op);
        comm_set_activity(doing);
        P2PMessage r;
        Tensor in;
        const bool receives = pipeline_receive(m, op, &r, &in);
        const std::vector<int64_t> ids = exchange_post(pp, *m.ctx, receives ? std::vector<P2PMessage>{r} : std::vector<P2PMessage>{},
                                                       "before " + doing);
        if (receives) receive_wait(pp, *m.ctx, ids[0]), in = r.t;
        run(op, in);
    }
    exchange_post(pp, *m.ctx, {}, "after the last op of " + stage);  // its sends; they complete as their peers receive
}

// Negative controls (test only, layers/test_hooks.h): the executor runs the ops in another order than the
// schedule's. weight_unlagged: each W right after its B; delay_weight_stage: on that stage, the last W that comes
// right before a B runs after that B instead (one slot late).
static std::vector<PipeOp> executor_order(std::vector<PipeOp> ops, int stage) {
    if (g_test_hooks.weight_unlagged) {
        std::vector<PipeOp> out;
        for (const PipeOp& op : ops) {
            if (op.kind == PipeOp::WeightGrad) continue;
            out.push_back(op);
            if (op.kind == PipeOp::Backward) out.push_back(PipeOp{PipeOp::WeightGrad, op.microbatch, op.chunk});
        }
        if (out.size() == ops.size()) ops = out;  // (a schedule without W's keeps its order)
    }
    if (g_test_hooks.delay_weight_stage == stage)
        for (size_t i = ops.size(); i-- > 1;)
            if (ops[i].kind == PipeOp::Backward && ops[i - 1].kind == PipeOp::WeightGrad) {
                std::swap(ops[i - 1], ops[i]);
                break;
            }
    return ops;
}

float pipeline_forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches) {
    const int M = micro_batches, b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("pipeline_forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    const PipelineStage& st = m.stage;
    Comm& pp = m.grid->pp_comm;
    // The moment of the memory report's snapshot: the most micro-batches in flight (F run, B not; under a
    // zero-bubble schedule F run, W not: zero_bubble_schedule.h), first reached.
    const std::vector<PipeOp> ops = executor_order(pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks), st.rank);
    const bool zb = is_zero_bubble(m.schedule);
    const int peak = zb ? zero_bubble_peak(ops, st.chunks).held : pipe_peak_in_flight(ops);
    const std::string stage = "stage " + std::to_string(st.rank);
    StageTimeline& timeline = m.pipe.timeline;
    timeline.measure_clock(pp.mpi);  // once (collective over the pipeline)

    gpt_zero_grad(m);
    for (int j = 0; j < M; j++)  // every micro-batch's tokens and coordinates (dropout keyed globally)
        gpt_begin_microbatch(m, j, M, inputs + (size_t)j * b * S, targets + (size_t)j * b * S, b, S, true);
    double loss = 0;
    int in_flight = 0;
    bool peak_marked = false;
    auto run = [&](const PipeOp& op, Tensor received) {
        // --trace: the op as one span of this rank's compute row (layers/trace.h; nothing when not recording)
        TraceScope span(TraceThread::Compute, "compute", op_name(op), trace_recording() ? "\"step\":" + std::to_string(m.step) : "");
        timeline.op_begin(*m.ctx, op);  // its time on every backend (model/pipeline_timeline.h)
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
            // A zero-bubble W: no message. Negative control (test only, layers/test_hooks.h): micro-batch 0's W
            // throws its weight gradients away.
            if (g_test_hooks.drop_first_weight_pass && op.microbatch == 0) m.weight_grads.discard(op.microbatch, op.chunk);
            else pipeline_weight_gradients(m, op.microbatch, op.chunk);
            in_flight--;
        }
        timeline.op_end(*m.ctx);
    };
    // Post-validation: the last op that writes the tied embedding's gradient on this stage (the last B of the first
    // or the last virtual stage), after which its sum over {first, last} can start (pipeline_embedding_sum_finish).
    int wte_last = -1;
    const bool early_sum = m.pipe.post_validation && st.pp > 1 && !st.v_shape && pp.backend == CommBackend::MPI &&
                           m.ctx->device == Device::CPU && !g_test_hooks.skip_tied_embedding_sum;
    for (size_t i = 0; i < ops.size() && early_sum; i++) {
        const int v = st.virtual_stage(ops[i].chunk);
        if (ops[i].kind == PipeOp::Backward && (v == 0 || v == st.num_virtual() - 1)) wte_last = (int)i;
    }
    int op_index = 0;
    auto run_op = [&](const PipeOp& op, Tensor received) {
        run(op, received);
        if (op_index++ == wte_last) start_embedding_sum(m);
    };
    const bool whole_units = pp.backend == CommBackend::NCCL || g_test_hooks.blocking_p2p || g_test_hooks.ungrouped_p2p;
    timeline.begin_step(*m.ctx);  // (its ops start now: the set-up above is the step's, not the schedule's)
    timeline.record_start(pp);    // the logical record, when kept (model/pipeline_timeline.h)
    if (whole_units) run_whole_units(m, pipe_units(m.schedule, st.pp, st.rank, M, st.chunks), stage, run_op);
    else run_posted(m, ops, stage, run_op);
    timeline.record_stop(pp);
    if (!m.weight_grads.empty()) mm_fatal("%s: the step ended with weight gradients no W pass computed", stage.c_str());
    if (!m.pipe.handoff.empty()) mm_fatal("%s: the step ended with a tensor handed over and never taken", stage.c_str());
    timeline.end_step(*m.ctx);
    comm_set_activity(stage + ", the end of the step");
    float mean = (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
    if (!m.pipe.post_validation) broadcast_host(pp, &mean, (int)sizeof mean, st.head_rank(), "the step's loss");
    comm_set_activity("");
    return mean;
}

bool pipeline_embedding_sum_finish(GPT& m) {
    PipelineRunState& s = m.pipe;
    if (!s.embedding_started) return false;
    // Only the other end's part is waited for; this stage's (a copy) leaves when the other end takes it, which may
    // be later than now (a stage that ends its ops first would otherwise wait for the other to end too).
    comm_wait_request(s.embedding_requests[0], m.grid->emb_comm.rules.timeout_s,
                      "the tied word embedding's gradient from the other end of the pipeline");
    s.embedding_requests[0] = MPI_REQUEST_NULL;
    // The two parts added: a + b, the one rounding an all-reduce of two ranks makes (and the same on both ends).
    float* g = gpt_grad(m, P_WTE).as<float>();
    for (size_t i = 0; i < s.embedding_received.size(); i++) g[i] += s.embedding_received[i];
    s.embedding_started = false;
    return true;
}

void pipeline_embedding_send_wait(GPT& m) {
    MPI_Request& q = m.pipe.embedding_requests[1];
    if (q != MPI_REQUEST_NULL)
        comm_wait_request(q, m.grid->emb_comm.rules.timeout_s, "the tied word embedding's gradient to the other end");
    q = MPI_REQUEST_NULL;
}

InFlightLayers pipeline_in_flight(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    // pp 1 runs no schedule: the plain loop holds one micro-batch at a time, 1F1B's count at one stage.
    const PipeSchedule schedule = st.pp > 1 ? m.schedule : PipeSchedule::OneFOneB;
    const std::vector<PipeOp> ops = pipe_schedule(schedule, st.pp, st.rank, M, st.chunks);
    // (Zero bubble: the saved activations at the moment the executor marks, by chunk.)
    const std::vector<int> per_chunk = is_zero_bubble(schedule) ? zero_bubble_peak(ops, st.chunks).saved_per_chunk
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
    return zero_bubble_peak(pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks), st.chunks).pending;
}
