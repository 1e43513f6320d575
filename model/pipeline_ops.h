// pipeline_ops.h — what pipeline parallelism adds around the model's forward and backward of one micro-batch
// through one model chunk (model/gpt.h): the messages between stages. A chunk's input comes from the stage
// before it (virtual stage v − 1, on pipeline rank (v − 1) mod p), its output goes to the next; gradients go
// the other way (parallel/pipeline_schedule.h: pipe_op_receives / pipe_op_sends). The schedule's executor
// (model/pipeline_step.h) runs these ops in its order; an evaluation passes one micro-batch through every
// stage (forward_through_stages).
#pragma once
#include <string>
#include <vector>
#include "gpt.h"

// The tensor an op of the schedule receives before it runs, as a receive for its unit's exchange
// (parallel/point_to_point.h): a forward's input from the previous virtual stage, a backward's output gradient from
// the next. Allocates the buffer; false (nothing allocated) when the op receives nothing (the first
// virtual stage's forward embeds the tokens, the last's backward starts from the loss) or when its input comes
// from this same rank (ZB-V's turn on rank p − 1: *local is then that tensor, handed over by the op that made it).
bool pipeline_receive(GPT& m, const PipeOp& op, P2PMessage* recv, Tensor* local);
// The same as an exchange of its own (with the sends queued before it), returning what arrived (an empty
// tensor when the op receives nothing): one micro-batch's chain through the stages.
Tensor pipeline_receive_alone(GPT& m, const PipeOp& op, const std::string& what);
// One op of a schedule for micro-batch j and model chunk `chunk` of this stage, with what it received (an
// empty tensor when it receives nothing): the chunk's forward (gpt_forward_chunk), returning the loss on the
// last virtual stage (0 elsewhere), or its backward (gpt_backward_chunk). What the op sends on is queued for
// the next exchange (send_later), or handed over on this rank. Under --pipeline-op-times (m.pipe.op_times) each
// op's work is a timed wait instead (model/pipeline_timeline.h): the same messages, zeros for their values.
float pipeline_forward(GPT& m, int j, int chunk, Tensor in, std::vector<float>* token_losses = nullptr);
void pipeline_backward(GPT& m, int j, int chunk, Tensor dout);
// A zero-bubble W (gpt_weight_gradients), or its timed wait.
void pipeline_weight_gradients(GPT& m, int j, int chunk);

// gpt_forward at pp > 1: the batch as one micro-batch through every stage, chunk by chunk, each op's receive
// an exchange of its own (a single chain cannot deadlock). A collective of the pipeline group: every stage
// returns the last stage's loss (and token losses).
float forward_through_stages(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                             std::vector<float>* token_losses = nullptr);

// The forward of an evaluation (validation, HellaSwag, sampling: no backward) on any layout: gpt_forward
// at pp 1, forward_through_stages at pp > 1.
inline float evaluation_forward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                                std::vector<float>* token_losses = nullptr) {
    return m.stage.pp > 1 ? forward_through_stages(m, inputs, targets, B_local, S, keep, token_losses)
                          : gpt_forward(m, inputs, targets, B_local, S, keep, token_losses);
}
