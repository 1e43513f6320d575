// pipeline_simulation.h — a pipeline schedule timed by a dependency simulation (beyond the paper): each stage
// runs its ops (pipe_schedule) in order, each as soon as the stage is free and its input is there: F j of
// virtual stage v after F j of v − 1, B j of v after B j of v + 1 (a B after its own F, a W after its own B by the
// stage's order). An op takes T_F, T_B or T_W (a backward without its W, under AFAB, 1F1B and interleaved, takes
// T_B + T_W), and every message between two ranks `latency` (0: communication is free, the formulas' model).
// A replay's latency may depend on how long the receiving stage has waited for the message (MessageLatency): the
// executor's waits spin first, then sleep between polls (parallel/comm.cu), and a stage that has gone to sleep
// wakes up later than one that still spins (on this machine about 100-200 us against 2-20: test_pipeline_bubble).
//
// Pure host code. The closed forms of recompute/formulas.h are checked against it (test_formulas), the
// synthetic-time test (test_pipeline_bubble) takes its tolerance from it (the same schedule with the measured
// exchange latency), tools/draw_pipeline --ideal draws it.
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
#include <vector>
#include "pipeline_schedule.h"

// How late a message reaches the stage that waits for it: `spinning` when, at the producer's end, the stage has
// waited at most `spin` (it has not gone to sleep yet, or is still busy), else `asleep`. A number: every message
// that late. In the times' unit.
struct MessageLatency {
    double spinning = 0, asleep = 0, spin = 1e300;
    MessageLatency(double all = 0) : spinning(all), asleep(all) {}
    MessageLatency(double spinning_, double asleep_, double spin_) : spinning(spinning_), asleep(asleep_), spin(spin_) {}
    double operator()(double waited) const { return waited > spin ? asleep : spinning; }
};
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
    std::vector<std::vector<double>> first;       // per step and stage: when its first op started (replays)
};
PipeSimulation pipe_simulate(PipeSchedule s, int p, int M, int m, double tf, double tb, double tw,
                             bool post_validation = false, double latency = 0);
// One synchronized step with each op's own time: duration(stage, op) (a replay of a measured step: the op times a
// run measured, the order and the dependencies the schedule's). busy is then stage 0's; idle per stage.
PipeSimulation pipe_replay(PipeSchedule s, int p, int M, int m, const std::function<double(int, const PipeOp&)>& duration,
                           const MessageLatency& latency = 0);
// `steps` post-validated steps (no synchronization between them) with each op's own time duration(step, stage, op):
// first[step][stage] is when each stage began each step. between(step, stage), when given: what the stage does
// after that step's last op before its next step's ops can start (its gradient sync, optimizer step, the next
// step's set-up), as measured.
PipeSimulation pipe_replay_steps(PipeSchedule s, int p, int M, int m, int steps,
                                 const std::function<double(int, int, const PipeOp&)>& duration, const MessageLatency& latency = 0,
                                 const std::function<double(int, int)>& between = nullptr);
