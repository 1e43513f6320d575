// op_times.h — --op-times: where the trainer's own steps spend their time, op by op.
//
// The op timer (layers/op_timer.h) is what bench/layer_bench reads for one layer; here it runs inside
// train_gpt, over the whole step (the embeddings, every layer, the LM head and the loss, the gradient norm,
// AdamW), so a step's time can be taken apart on the model, shape and thread count a user trains with.
// It is on from the run's third step (the first two allocate and warm caches up; a run of fewer steps times
// its last one) to the end, off during validation, and rank 0 prints its own ops after the run: each op's
// milliseconds per step, its share of the timed steps' wall time, and the rate of its matrix products.
// On a GPU every op synchronizes the device (the timer's events are read at each step's end), so the
// table says where the time goes, not how fast an untimed step is.
#pragma once
#include <string>
#include <vector>

#include "../layers/op_timer.h"

struct OpTimes {
    int first = 0;        // the first timed step (0: not known yet)
    bool timing = false;  // the step in flight started the timer
    int steps = 0;        // steps timed so far
    double step_ms = 0;   // their wall time, summed
    std::vector<OpTime> totals;  // summed over the timed steps, in order of first call
};

// Before a step of a run with --op-times (`enabled`): the timer starts at the first timed step (the run's
// third, or its last when shorter).
void op_times_begin_step(OpTimes& t, bool enabled, int step, int start_step, int last_step);
// After a step (the device synchronized): its ops' times and its wall time join the totals; the timer stops
// until the next step, so validation and checkpoints between steps are not counted.
void op_times_end_step(OpTimes& t, double step_seconds);
// The table, as text (empty when nothing was timed).
std::string op_times_table(const OpTimes& t);
