// pipeline_ops.cu — the messages between pipeline stages around one chunk's forward and backward (see the
// header).
#include "pipeline_ops.h"

#include "../parallel/zero_bubble_schedule.h"

// "the receive of the activation of micro-batch 3 (chunk 0) from stage 1": for timeout messages.
static std::string message_what(const PipeMessage& msg, int chunk, bool receive) {
    return std::string(receive ? "the receive of the " : "the send of the ") + (msg.gradient ? "gradient" : "activation") +
           " of micro-batch " + std::to_string(msg.microbatch) + " (chunk " + std::to_string(chunk) + ") " +
           (receive ? "from" : "to") + " stage " + std::to_string(msg.peer);
}

bool pipeline_receive(GPT& m, const PipeOp& op, P2PMessage* recv, Tensor* local) {
    const PipelineStage& st = m.stage;
    PipeMessage msg;
    *local = Tensor();
    if (!pipe_op_receives(m.schedule, op, st.pp, st.rank, st.chunks, &msg)) return false;
    const int tag = pipe_message_tag(msg, st.pp, st.chunks);
    if (msg.peer == st.rank) {  // ZB-V's turn: handed over by this rank's own op (send_output)
        auto it = m.pipe.handoff.find(tag);
        if (it == m.pipe.handoff.end())
            mm_fatal("stage %d: %s was not handed over before its op (the schedule runs it too early)", st.rank,
                     message_what(msg, op.chunk, true).c_str());
        *local = it->second;
        m.pipe.handoff.erase(it);
        if (op.kind == PipeOp::Forward) {  // now the chunk's first layer's saved input, tagged as a received one is
            Tensor in = m.alloc->alloc(m.dtype, local->n, st.chunk_begin(op.chunk), "ln1_in");
            tensor_copy(*m.ctx, in, *local);
            m.alloc->release(*local);
            *local = in;
        }
        return false;
    }
    const int64_t n = (int64_t)m.flight[(size_t)op.microbatch].shape.N_shard * m.cfg.channels;
    // A forward's input becomes its chunk's first layer's saved input; a backward's is a transient gradient.
    recv->t = op.kind == PipeOp::Forward ? m.alloc->alloc(m.dtype, n, st.chunk_begin(op.chunk), "ln1_in")
                                         : m.alloc->alloc(m.dtype, n, kModelLevel, "tmp:dresidual");
    recv->peer = msg.peer;
    recv->tag = tag;
    recv->what = message_what(msg, op.chunk, true);
    return true;
}

// What an op sends, queued for the next exchange (send_later copies it, so the tensor is released at once). On
// ZB-V's turn it stays on this rank, as it is (a transient, like a message on its way), until the op that takes
// it (pipeline_receive).
static void send_output(GPT& m, const PipeOp& op, Tensor t) {
    const PipelineStage& st = m.stage;
    PipeMessage msg;
    if (!pipe_op_sends(m.schedule, op, st.pp, st.rank, st.chunks, &msg)) return;
    const int tag = pipe_message_tag(msg, st.pp, st.chunks);
    if (msg.peer == st.rank) {
        m.pipe.handoff[tag] = t;
        return;
    }
    send_later(m.grid->pp_comm, *m.ctx, t, msg.peer, tag, message_what(msg, op.chunk, false));
    m.alloc->release(t);
}

// --pipeline-op-times: the op's input released, its work a timed wait, its output (if it sends one) zeros of the
// shape it would have.
static Tensor synthetic_op(GPT& m, const PipeOp& op, Tensor in, double ms) {
    if (!in.empty()) m.alloc->release(in);
    timed_wait(*m.ctx, ms);
    PipeMessage msg;
    if (!pipe_op_sends(m.schedule, op, m.stage.pp, m.stage.rank, m.stage.chunks, &msg)) return Tensor();
    Tensor out = m.alloc->alloc(m.dtype, (int64_t)m.flight[(size_t)op.microbatch].shape.N_shard * m.cfg.channels, kModelLevel,
                                op.kind == PipeOp::Forward ? "tmp:stage_out" : "tmp:dresidual");
    tensor_zero(*m.ctx, out);
    return out;
}

float pipeline_forward(GPT& m, int j, int chunk, Tensor x, std::vector<float>* token_losses) {
    const PipeOp op{PipeOp::Forward, j, chunk};
    if (m.pipe.op_times.on) return send_output(m, op, synthetic_op(m, op, x, m.pipe.op_times.f_ms)), 0.f;
    float loss = 0;
    Tensor out = gpt_forward_chunk(m, j, chunk, x, &loss, token_losses);
    send_output(m, op, out);
    return loss;
}

void pipeline_backward(GPT& m, int j, int chunk, Tensor dout) {
    const PipeOp op{PipeOp::Backward, j, chunk};
    const PipeOpTimes& t = m.pipe.op_times;
    // (Without a W op the backward is B and W together.)
    if (t.on) return send_output(m, op, synthetic_op(m, op, dout, t.b_ms + (is_zero_bubble(m.schedule) ? 0 : t.w_ms)));
    Tensor din = gpt_backward_chunk(m, j, chunk, dout);
    send_output(m, op, din);
}

void pipeline_weight_gradients(GPT& m, int j, int chunk) {
    if (m.pipe.op_times.on) return timed_wait(*m.ctx, m.pipe.op_times.w_ms);
    gpt_weight_gradients(m, j, chunk);
}

Tensor pipeline_receive_alone(GPT& m, const PipeOp& op, const std::string& what) {
    P2PMessage in;
    Tensor local;
    const bool receives = pipeline_receive(m, op, &in, &local);
    exchange(m.grid->pp_comm, *m.ctx, receives ? std::vector<P2PMessage>{in} : std::vector<P2PMessage>{},
             what + " on stage " + std::to_string(m.stage.rank));
    return receives ? in.t : local;
}

float forward_through_stages(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                             std::vector<float>* token_losses) {
    const PipelineStage& st = m.stage;
    Comm& pp = m.grid->pp_comm;
    gpt_begin_microbatch(m, 0, 1, inputs, targets, B_local, S, keep);
    float loss = 0;
    for (int c = 0; c < st.chunks; c++) {
        Tensor in = pipeline_receive_alone(m, PipeOp{PipeOp::Forward, 0, c}, "before the forward of chunk " + std::to_string(c));
        loss += pipeline_forward(m, 0, c, in, token_losses);  // the last chunk's
    }
    exchange(pp, *m.ctx, {}, "after the forward on stage " + std::to_string(st.rank));
    // every stage returns the last stage's loss (and token losses)
    broadcast_host(pp, &loss, (int)sizeof loss, st.head_rank(), "the loss");
    if (token_losses) {
        token_losses->resize((size_t)B_local * S);
        broadcast_host(pp, token_losses->data(), (int)(token_losses->size() * sizeof(float)), st.head_rank(), "the token losses");
    }
    if (!keep) gpt_release_activations(m);
    return loss;
}
