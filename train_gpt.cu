// train_gpt.cu — the trainer, as a table of contents: main() sets a run up, runs the training loop, and
// ends it; each line is a call whose file holds the mechanism. Setting a run up: train/run.h; what happens
// around each step and at the end: train/bookkeeping.h; the step itself (forward, backward, gradient
// synchronization, AdamW): model/train_step.h; the flags: train/options.h.
//
//   mpirun -np 2 build/train_gpt --tp 2 --sp --recompute selective --memory-report
#include <mpi.h>

#include "model/train_step.h"
#include "train/bookkeeping.h"
#include "train/options.h"
#include "train/run.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    // ---- set up: options, where this rank runs, the model's shape, the process grid, data, model, log ----
    Run run;
    run.opt = parse_train_options(argc, argv, g_rank == 0);  // train/options.cu: bad flags exit 2
    TrainOptions& opt = run.opt;
    place_rank(run, world);   // a GPU per rank or the CPU, the communication backend, the CPU threads
    check_paths(run);         // --resume auto decided; every input exists, every output is writable
    read_model_shape(run);    // a checkpoint to resume, --init, or the shape flags
    make_process_grid(run);   // parallel/process_grid.h: tp x cp x dp x pp, micro-batches, pipeline schedule
    open_data(run);           // data/dataloader.h: this data-parallel rank's part of each batch
    make_model(run);          // model/gpt.h: this rank's shard, its weights, the step's constants
    resume_or_start(run);     // model/train_state.h: exact resume, or a fresh run's description
    open_log(run);            // --log
    print_startup(run);       // what runs, and the activation memory the paper's formulas predict

    // ---- the validation loss and HellaSwag accuracy before any training (not when resuming) ----
    Progress p;
    if (opt.val_every > 0 && run.start_step == 1) validate(run, p, 0);
    if (opt.eval_every > 0 && run.start_step == 1) evaluate_hellaswag(run, 0);

    // ---- training ----
    begin_training(p);
    for (int step = run.start_step; step <= opt.steps; step++) {
        next_batch_or_stop(run.train);                  // data/dataloader.cu
        const float lr = learning_rate(opt, step);      // warmup, then constant or cosine
        begin_step(run, p, step);                       // counters, clocks, the memory report's snapshot
        // One optimizer step (model/train_step.cu): forward, backward, gradient sync, clipping, AdamW (with
        // --optimizer-post-validation validated a step later: model/post_validation.cu).
        const StepStats st = take_step(run, step, lr);
        end_step(run, p, step, st);                     // its time and counters; --memory-report after the first
        apply_nan_policy(run, p, step, st);             // a non-finite step: stop, or skip (--skip-bad-steps)
        log_step(run, p, step, st, lr);                 // the step line, the --log record
        // Checkpoints for exact resume (model/train_state.cu): every --save-every steps, at the end, and
        // before an --exit-interval stop.
        const bool exit_now = exit_interval_reached(opt, step);
        if (checkpoint_due(opt, step) || exit_now) save_checkpoint(run, step);
        if (exit_now) {
            stop_at_exit_interval(run, step);
            break;
        }
        // Once in a while, the validation loss and the HellaSwag accuracy.
        if (eval_due(opt.val_every, step, opt.steps)) validate(run, p, step);
        if (eval_due(opt.eval_every, step, opt.steps)) evaluate_hellaswag(run, step);
    }
    // ---- the final validation loss and HellaSwag accuracy ----
    if (opt.steps > 0) validate(run, p, opt.steps);
    if (opt.steps > 0) evaluate_hellaswag(run, opt.steps);

    // ---- save the weights, sample some text, the run's reports and summary; then free what was set up ----
    finish_run(run, p);
    free_run(run);
    MPI_Finalize();
    return 0;
}
