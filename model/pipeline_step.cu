// pipeline_step.cu — runs a pipeline schedule's ops (see the header).
#include "pipeline_step.h"

#include <mpi.h>

float forward_backward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, int micro_batches,
                       const std::function<void()>& at_peak) {
    const int M = micro_batches, b = B_local / M;
    if (M < 1 || b * M != B_local) mm_fatal("forward_backward: %d sequences do not split into %d micro-batches", B_local, M);
    const PipelineStage& st = m.stage;
    Comm& pp = m.grid->pp_comm;
    const std::vector<PipeOp> ops = pipe_schedule(m.schedule, st.pp, st.rank, M, st.chunks);
    const int peak = pipe_peak_in_flight(ops);

    gpt_zero_grad(m);
    for (int j = 0; j < M; j++)  // every micro-batch's tokens and coordinates (dropout keyed globally)
        gpt_begin_microbatch(m, j, M, inputs + (size_t)j * b * S, targets + (size_t)j * b * S, b, S, true);
    double loss = 0;
    int in_flight = 0;
    bool peak_reported = false;
    for (const PipeOp& op : ops) {
        if (op.kind == PipeOp::Forward) {
            loss += gpt_pipeline_forward(m, op.microbatch, op.chunk);  // the last stage: micro-batches 0, 1, ... in order
            if (++in_flight == peak && !peak_reported && at_peak) {
                peak_reported = true;
                at_peak();
            }
        } else {
            gpt_pipeline_backward(m, op.microbatch, op.chunk);
            in_flight--;
        }
    }
    wait_sends(pp);
    m.micro = {};
    float mean = (float)(loss / M);  // each micro-batch's loss is a mean over the same number of targets
    if (st.pp > 1) MPI_CHECK(MPI_Bcast(&mean, 1, MPI_FLOAT, st.pp - 1, pp.mpi));
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
