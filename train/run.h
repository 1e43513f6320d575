// run.h — setting a training run up: everything one run holds (Run), made in the order train_gpt.cu's main
// calls these steps: the rank's place (device, threads, backend), its paths checked, the model's shape, the
// process grid, the data, the model and its weights, a resumed training state, the log. Every refusal of a
// bad input is collective (refuse_if): every rank stops together, and the lowest rank that saw the problem
// says what it is and what to do.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../data/dataloader.h"
#include "../data/text_tokenizer.h"
#include "../model/gpt.h"
#include "../model/hellaswag.h"
#include "../model/train_state.h"
#include "../model/train_step.h"
#include "../recompute/memory_report.h"
#include "options.h"

inline int g_rank = 0;  // this rank in MPI_COMM_WORLD (main sets it); rank 0 prints
#define LOG0(...) do { if (g_rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// Refuse a bad input on every rank together. Collective: every rank calls it at the same point, with ""
// when it sees no problem (see run.cu).
void refuse_if(const std::string& problem);
double now_s();  // a steady clock, in seconds
// The next batch of a loader (data/dataloader.cu); a bad token id or a read error stops every rank together.
void next_batch_or_stop(DataLoader& data);

// Everything one run holds once set up, in the order it is made. Built in place and never copied: the model
// keeps pointers to the grid, the context and the allocator.
struct Run {
    TrainOptions opt;
    int world = 1;                               // ranks in MPI_COMM_WORLD
    int gpu = 0;                                 // this rank's GPU (place_rank), on CUDA
    Device device = Device::CPU;
    DType dtype = DType::F32;
    CommBackend backend = CommBackend::MPI;
    Recompute recompute = Recompute::None;
    Attention attention = Attention::Unfused;    // --attention (recompute/formulas.h)
    GPTConfig cfg;
    // What read_model_shape read, until make_model and resume_or_start have used it.
    std::vector<float> init_params;              // the first weights, full model (empty: random)
    TrainState resumed;                          // --resume: the saved training state (model/train_state.h)
    std::string resumed_dir;                     // its step directory
    Ctx ctx;
    ProcessGrid grid;                            // parallel/process_grid.h: world = tp x cp x dp x pp
    std::unique_ptr<ActivationAllocator> alloc;  // layers/activation_allocator.h: tagged, measured activations
    GPT model;
    DataLoader train, val;
    bool have_val = false;
    TextTokenizer text;                          // data/text_tokenizer.h: byte-level, or GPT-2 BPE (--tokenizer)
    std::vector<EvalExample> hellaswag;          // --hellaswag (data/eval_file.h); empty without
    TrainState state;                            // what a training state records about this run (describe_run)
    int start_step = 1;                          // > 1 after --resume
    int micro_batches = 1;                       // M: gradient accumulation (micro_batch_count)
    PipeSchedule schedule = PipeSchedule::OneFOneB;  // parallel/pipeline_schedule.h (pipeline_layout)
    int chunks = 1;                              // model chunks per pipeline rank (interleaved schedule)
    int64_t skipped_steps = 0;                   // updates not applied (--skip-bad-steps), kept across resumes
    OptimConfig optim;
    ModelFormulaInput shape;                     // the paper's symbols for this rank (recompute/formulas.h)
    FILE* logf = nullptr;                        // --log, on rank 0: one JSON object per line
};

// The steps of setting a run up, in order.
// Where this rank runs: a GPU per rank on its node or the CPU, the communication backend, the numerics, the
// CPU threads it takes.
void place_rank(Run& run, int world);
// --resume auto (continue from DIR/latest when it is there), then every path on the command line.
void check_paths(Run& run);
// The model's shape and first weights: a checkpoint to resume, --init, or the flags; a shape flag given as
// well must agree.
void read_model_shape(Run& run);
// The process grid (parallel/process_grid.h): the layout refused early if impossible, the micro-batches, the
// pipeline schedule and its chunks, the device context and the communicators.
void make_process_grid(Run& run);
// The tokenizer, the training and validation data (this data-parallel rank's part of each batch), HellaSwag.
void open_data(Run& run);
// The model (model/gpt.h): this rank's shard with random or loaded weights, and the step's constants.
void make_model(Run& run);
// Exact resume (model/train_state.h): the saved state checked against this run and restored; a fresh run's
// state described.
void resume_or_start(Run& run);
// --log: opened on rank 0 (a resumed run appends, after a restart marker). --trace: the steps it records
// (--trace-steps, or the run's second step) and this rank's row on the timeline (layers/trace.h).
void open_log(Run& run);
// What runs: the model, the layout, the batch, and the activation memory the paper's formulas predict.
void print_startup(const Run& run);
// The schedule's ideal bubble rate (idle over busy time; every op of a chunk equally long, communication free)
// and its formula, for the log: (p-1)/(m*M) for AFAB, 1F1B and interleaved (pipe_ideal_bubble); under a
// zero-bubble schedule recompute/formulas.h's at T_F = T_B = T_W (with the synchronous step end; M < p too).
double ideal_bubble_rate(const Run& run, std::string* formula);
// Free what the set-up made, in reverse order (the allocator goes with `run`, after MPI_Finalize).
void free_run(Run& run);
