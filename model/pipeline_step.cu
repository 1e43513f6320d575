// pipeline_step.cu — runs a pipeline schedule's ops (see the header).
#include "pipeline_step.h"

#include <mpi.h>

static PipelineStepStats g_last;
const PipelineStepStats& last_pipeline_step() { return g_last; }

float forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches,
                       const std::function<void()>& at_peak) {
    const int M = micro_batches, b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    const PipelineStage& st = m.stage;
    const int P = st.num_virtual();
    Comm& pp = m.grid->pp_comm;
    const double t0 = MPI_Wtime(), wait0 = pp.counters.recv_wait_s;
    const std::vector<PipeOp> ops = pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks);
    const int peak = pipe_peak_in_flight(ops);

    gpt_zero_grad(m);
    for (int j = 0; j < M; j++)  // every micro-batch's tokens and coordinates (dropout keyed globally)
        gpt_begin_microbatch(m, j, M, inputs + (size_t)j * b * S, targets + (size_t)j * b * S, b, S, true);
    double loss = 0;
    int in_flight = 0;
    bool peak_reported = false;
    for (const PipeOp& op : ops) {
        const int j = op.microbatch, c = op.chunk, v = st.virtual_stage(c);
        const int prev = (v - 1 + st.pp) % st.pp, next = (v + 1) % st.pp;  // pipeline ranks of the neighbours
        if (op.kind == PipeOp::Forward) {
            Tensor x;
            if (v > 0) {
                x = gpt_chunk_input(m, c);
                recv(pp, *m.ctx, x, prev, gpt_p2p_tag(m, j, v - 1, false));
            }
            float l = 0;
            Tensor out = gpt_forward_chunk(m, j, c, x, &l);
            if (v < P - 1) {
                send_async(pp, *m.ctx, out, next, gpt_p2p_tag(m, j, v, false));
                m.alloc->release(out);
            } else {
                loss += l;  // the last stage sees micro-batches 0, 1, ..., M-1 in order
            }
            if (++in_flight == peak && !peak_reported && at_peak) {
                peak_reported = true;
                at_peak();
            }
        } else {
            Tensor dout;
            if (v < P - 1) {
                dout = m.alloc->alloc(m.dtype, (int64_t)m.flight[(size_t)j].shape.N_shard * m.cfg.channels, kModelLevel,
                                      "tmp:dresidual");
                recv(pp, *m.ctx, dout, next, gpt_p2p_tag(m, j, v, true));
            }
            Tensor din = gpt_backward_chunk(m, j, c, dout);
            if (v > 0) {
                send_async(pp, *m.ctx, din, prev, gpt_p2p_tag(m, j, v - 1, true));
                m.alloc->release(din);
            }
            in_flight--;
        }
    }
    wait_sends(pp);
    m.micro = {};
    float mean = (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
    if (st.pp > 1) MPI_CHECK(MPI_Bcast(&mean, 1, MPI_FLOAT, st.pp - 1, pp.mpi));
    g_last.peak_in_flight = peak;
    g_last.recv_wait_s = pp.counters.recv_wait_s - wait0;
    g_last.seconds = MPI_Wtime() - t0;
    return mean;
}

InFlightLayers pipeline_in_flight(const GPT& m, int M) {
    const PipelineStage& st = m.stage;
    const std::vector<int> per_chunk = pipe_in_flight_at_peak(pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks), st.chunks);
    InFlightLayers held;
    held.per_layer.assign((size_t)m.cfg.layers, 0);
    for (int c = 0; c < st.chunks; c++)
        for (int l = st.chunk_begin(c); l < st.chunk_end(c); l++) held.per_layer[(size_t)l] = per_chunk[(size_t)c];
    held.embedding = st.first() ? per_chunk[0] : 0;
    held.head = st.last() ? per_chunk[(size_t)st.chunks - 1] : 0;
    return held;
}
