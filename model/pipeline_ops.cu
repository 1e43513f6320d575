// pipeline_ops.cu — the messages between pipeline stages around one chunk's forward and backward (see the
// header).
#include "pipeline_ops.h"

// "the receive of the activation of micro-batch 3 (chunk 0) from stage 1": for timeout messages.
static std::string message_what(const PipeMessage& msg, int chunk, bool receive) {
    return std::string(receive ? "the receive of the " : "the send of the ") + (msg.gradient ? "gradient" : "activation") +
           " of micro-batch " + std::to_string(msg.microbatch) + " (chunk " + std::to_string(chunk) + ") " +
           (receive ? "from" : "to") + " stage " + std::to_string(msg.peer);
}

bool pipeline_receive(GPT& m, const PipeOp& op, P2PMessage* recv) {
    const PipelineStage& st = m.stage;
    PipeMessage msg;
    if (!pipe_op_receives(op, st.pp, st.rank, st.chunks, &msg)) return false;
    const int64_t n = (int64_t)m.flight[(size_t)op.microbatch].shape.N_shard * m.cfg.channels;
    // A forward's input becomes its chunk's first layer's saved input; a backward's is a transient gradient.
    recv->t = op.kind == PipeOp::Forward ? m.alloc->alloc(m.dtype, n, st.chunk_begin(op.chunk), "ln1_in")
                                         : m.alloc->alloc(m.dtype, n, kModelLevel, "tmp:dresidual");
    recv->peer = msg.peer;
    recv->tag = pipe_message_tag(msg, st.pp, st.chunks);
    recv->what = message_what(msg, op.chunk, true);
    return true;
}

// What an op sends, queued for the next exchange (send_later copies it, so the tensor is released at once).
static void send_output(GPT& m, const PipeOp& op, Tensor t) {
    const PipelineStage& st = m.stage;
    PipeMessage msg;
    if (!pipe_op_sends(op, st.pp, st.rank, st.chunks, &msg)) return;
    send_later(m.grid->pp_comm, *m.ctx, t, msg.peer, pipe_message_tag(msg, st.pp, st.chunks), message_what(msg, op.chunk, false));
    m.alloc->release(t);
}

float pipeline_forward(GPT& m, int j, int chunk, Tensor x, std::vector<float>* token_losses) {
    float loss = 0;
    Tensor out = gpt_forward_chunk(m, j, chunk, x, &loss, token_losses);
    send_output(m, PipeOp{PipeOp::Forward, j, chunk}, out);
    return loss;
}

void pipeline_backward(GPT& m, int j, int chunk, Tensor dout) {
    Tensor din = gpt_backward_chunk(m, j, chunk, dout);
    send_output(m, PipeOp{PipeOp::Backward, j, chunk}, din);
}

Tensor pipeline_receive_alone(GPT& m, const PipeOp& op, const std::string& what) {
    P2PMessage in;
    const bool receives = pipeline_receive(m, op, &in);
    exchange(m.grid->pp_comm, *m.ctx, receives ? std::vector<P2PMessage>{in} : std::vector<P2PMessage>{},
             what + " on stage " + std::to_string(m.stage.rank));
    return in.t;
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
    broadcast_host(pp, &loss, (int)sizeof loss, st.pp - 1, "the loss");
    if (token_losses) {
        token_losses->resize((size_t)B_local * S);
        broadcast_host(pp, token_losses->data(), (int)(token_losses->size() * sizeof(float)), st.pp - 1, "the token losses");
    }
    if (!keep) gpt_release_activations(m);
    return loss;
}
