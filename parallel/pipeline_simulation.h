// pipeline_simulation.h — a pipeline schedule timed by a dependency simulation (beyond the paper): each stage
// runs its ops (pipe_schedule) in order, each as soon as the stage is free and its input is there: F j of
// virtual stage v after F j of v − 1, B j of v after B j of v + 1 (a B after its own F, a W after its own B by the
// stage's order). An op takes T_F, T_B or T_W (a backward without its W, under AFAB, 1F1B and interleaved, takes
// T_B + T_W), and every message between two ranks `latency` (0: communication is free, the formulas' model).
//
// Pure host code. The closed forms of recompute/formulas.h are checked against it (test_formulas), the trainer's
// end line gives its idle share where no closed form applies, tools/draw_pipeline --ideal draws it.
//
// A recorded step, replayed (pipe_replay_record): the same virtual time, but each stage runs what its executor
// RECORDED it did (model/pipeline_timeline.h, from the exchanges themselves: parallel/point_to_point.h's
// p2p_record): its ops in the order it ran them, each after the posts and waits it made before it. The schedule's
// dependencies play no part there: a stage waits where its record says it waited, so an executor that waits for
// something it does not need, posts a send late or runs its ops in another order replays to a longer step
// (test_pipeline_bubble).
//
// Two ways a step ends (post_validation):
//  false: every stage starts the step together and waits at its end for the others (the gradient norm, the
//         clip and the non-finite verdict synchronize them); a stage's idle time is the step's time (first op's
//         start to last op's end, any stage) less its busy time;
//  true:  no synchronization between steps (model/post_validation.h): each stage starts its next step as soon
//         as it has run this one's ops; the steps repeat, and a stage's idle time is its steady period less its
//         busy time.
#pragma once
#include <functional>
#include <string>
#include <vector>
#include "pipeline_schedule.h"

struct SimulatedOp {
    PipeOp op;
    double t0 = 0, t1 = 0;
};
struct PipeSimulation {
    bool deadlock = false;                        // a stage waits for an input no stage produces
    std::vector<std::vector<SimulatedOp>> stages; // one step's ops (the first; with post_validation a steady one)
    std::vector<std::vector<SimulatedOp>> next;   // with post_validation, the step after that one
    std::vector<double> idle;                     // per stage, per step (the bubble, in the times' unit)
    double step = 0;                              // the step's time (post_validation: the steady period)
    double busy = 0;                              // one stage's busy time per step: M·m·(T_F + T_B + T_W)
    double idle_share(int stage) const { return step > 0 ? idle[(size_t)stage] / step : 0; }
    std::vector<std::vector<double>> first;       // per step and stage: when its first op started
    std::string problem;                          // a replay that could not finish: who waited for what
};
PipeSimulation pipe_simulate(PipeSchedule s, int p, int M, int m, double tf, double tb, double tw,
                             bool post_validation = false, double latency = 0);

// ---- a recorded step (see the top) ----------------------------------------------------------------------------
// One stage's exchange events, as parallel/point_to_point.h's P2PEvent: a message posted (its receive or its
// send), or its completion waited for. A message is named by the two stages and its tag (pipe_message_tag), the
// n-th of that name in a step matching the n-th on the other side.
struct PipeExchangeEvent {
    enum Kind { PostReceive, PostSend, WaitReceive, WaitSend } kind;
    int peer = -1, tag = 0;
};
// One op as the executor ran it: what the stage posted and waited for since its previous op, in that order.
struct PipeRecordedOp {
    PipeOp op;
    std::vector<PipeExchangeEvent> before;
};
// One stage's step: its ops in the order it ran them, then what it posted and waited for after the last.
struct PipeStageRecord {
    std::vector<PipeRecordedOp> ops;
    std::vector<PipeExchangeEvent> after;
    bool operator==(const PipeStageRecord& o) const;
};
// records[k][r]: step k of stage r. Each stage runs its record in order in virtual time: a post happens when the
// stage gets to it; a wait for a receive ends once the peer has posted the send, a wait for a send once the peer
// has posted the receive (NCCL's rendezvous, and --comm mpi-strict's: a send is done only when received); an op
// takes duration(stage, op); messages take no time (the formulas' model). post_validation false: each step alone,
// every stage from time 0 (pass the one step to replay); true: the steps one after another on each stage, no
// synchronization between them (as pipe_simulate's, the steady period over the later steps). deadlock (with
// `problem` naming the stage and the message) when a stage waits for something no stage posts.
PipeSimulation pipe_replay_record(const std::vector<std::vector<PipeStageRecord>>& records,
                                  const std::function<double(int, const PipeOp&)>& duration, bool post_validation = false);
