// bookkeeping.h — what the trainer does around each step and at the end of a run, apart from the step
// itself (model/train_step.h): the learning rate, the step's clocks and counters, the memory report, the
// NaN policy, the step line and the --log record, checkpoint cadence and the exit interval, validation and
// HellaSwag, and at the end the saved model, the sample, the communication, bubble and CP reports and the
// done line. train_gpt.cu's loop calls these in order; they print on rank 0 and, where it says so, are
// collective (every rank calls them at the same point).
#pragma once
#include <cmath>
#include "../parallel/context_parallel.h"
#include "op_times.h"
#include "run.h"

// What the loop keeps from step to step, for the step lines and the final summary.
struct Progress {
    float best_val = INFINITY, first_loss = NAN, last_loss = NAN;
    int first_step = 0, last_step = 0, steps_run = 0;  // of this run (after --resume: from the checkpoint's step + 1)
    // The activation allocator's high-water marks, apart: a training step's (its schedule's peak, what the paper's
    // formulas and the pipeline schedules are about) and a validation pass's (forward only, but at full batch).
    size_t train_peak = 0, val_peak = 0;
    double t_start = 0;      // when training began (begin_training)
    double t0 = 0, dt = 0;   // the step in flight: its start, and its time once over
    double t_steps = 0;      // time of the timed steps (a run's first step is warm-up, unless it is the only one)
    int bad_in_a_row = 0;    // consecutive non-finite steps (apply_nan_policy)
    CommCounters step_comm;  // the TP group's collectives of the last training step
    uint64_t step_p2p_bytes = 0;              // pipeline: bytes this rank sent to neighbouring stages, last step
    double t_pipeline = 0, t_recv_wait = 0;   // pipeline: forward-backward time and time blocked in exchanges
    // Context parallelism: ring attention's work in the first training step, and its compute time over the
    // timed steps (parallel/context_parallel.h); validation's forwards are not counted.
    CpStats cp0;  // the counters at the start of the step in flight
    CpStats cp_first;
    double cp_compute_s = 0;
    OpTimes op_times;  // --op-times (train/op_times.h)
};

// Learning rate at `step` (1-based): linear warmup, then constant or cosine decay to min_lr_frac · lr.
float learning_rate(const TrainOptions& o, int step);
// The clock of the training loop starts (the summary's seconds).
void begin_training(Progress& p);
// Before a step: the communication counters and the allocator's high-water mark start afresh, the clocks
// start, and on the first step with --memory-report the allocator keeps the live set of the schedule's peak.
void begin_step(Run& run, Progress& p, int step);
// After a step: its time, communication, activation peak and CP work; the bubble's times of the timed steps;
// on the first step with --memory-report, the report built from the peak's snapshot, printed and logged
// (collective).
void end_step(Run& run, Progress& p, int step, const StepStats& st);
// A step whose loss or gradient norm was not finite (its update was not applied): name the first bad gradient
// and stop, or with --skip-bad-steps go on (at most 10 in a row). Counts the step. Collective.
void apply_nan_policy(Run& run, Progress& p, int step, const StepStats& st);
// The step's line: on stdout every --log-every steps (and the first and last), in the --log file every step.
void log_step(const Run& run, const Progress& p, int step, const StepStats& st, float lr);
// --exit-interval K: this step ends the job (step % K == 0, before the last step).
bool exit_interval_reached(const TrainOptions& o, int step);
// --checkpoint-dir: a checkpoint is due every --save-every steps and at the last step.
bool checkpoint_due(const TrainOptions& o, int step);
// Save the pair DIR/step_N/{model.bin,state.bin} for exact resume (model/train_state.cu). Collective.
void save_checkpoint(Run& run, int step);
// Say that --exit-interval ended the loop; the final validation, --save and --sample still run.
void stop_at_exit_interval(Run& run, int step);
// An evaluation every K steps (K = 0: never here), except at the last step (the final one comes after the loop).
inline bool eval_due(int every, int step, int last) { return every > 0 && step % every == 0 && step != last; }
// The validation loss over the first --val-batches batches, printed and logged. Collective.
void validate(Run& run, Progress& p, int step);
// --hellaswag: the multiple-choice accuracy (model/hellaswag.cu), printed and logged. Collective.
void evaluate_hellaswag(Run& run, int step);
// --save, --sample, the TP group's communication in the last step, the pipeline's bubble, the CP report, the
// distributed optimizer's line, and the done line. Collective.
void finish_run(Run& run, const Progress& p);
