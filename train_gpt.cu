// train_gpt.cu — the trainer. main(), at the bottom, is the step loop and reads like a table of contents:
// each line points to the file that holds the mechanism. The functions above it set a run up
// (setup_run), report on it while it runs, and finish it (finish_run).
//
//   mpirun -np 2 build/train_gpt --tp 2 --sp --recompute selective --memory-report
#include <mpi.h>
#include <omp.h>
#include <cblas.h>
#include <cstdlib>
#include <chrono>
#include <climits>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/hf_tokenizer.h"
#include "data/paths.h"
#include "data/text_tokenizer.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/hellaswag.h"
#include "model/model_file.h"
#include "model/gpt.h"
#include "model/train_state.h"
#include "model/train_step.h"
#include "parallel/comm.h"
#include "parallel/context_parallel.h"
#include "recompute/memory_report.h"
#include "train_options.h"

static int g_rank = 0;
#define LOG0(...) do { if (g_rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// Refuse a bad input on every rank together. Collective: every rank calls it at the same point, with ""
// when it sees no problem; if any rank has one, the lowest such rank explains and all exit(1) cleanly
// (a problem seen by one rank only, e.g. a file unreadable on one node, cannot leave the others waiting).
// Not under --comm-timeout: the other ranks wait here while rank 0 writes a checkpoint, which for a large
// model can rightly take longer than any timeout meant for a step's communication.
static void refuse_if(const std::string& problem) {
    int mine = problem.empty() ? INT32_MAX : g_rank, first = mine;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == INT32_MAX) return;
    if (g_rank == first) fprintf(stderr, "error: %s\n", problem.c_str()), fflush(stderr);
    MPI_Finalize();
    exit(1);
}

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Learning rate at `step` (1-based): linear warmup, then constant or cosine decay to min_lr_frac · lr.
static float learning_rate(const TrainOptions& o, int step) {
    if (o.warmup > 0 && step <= o.warmup) return o.lr * step / o.warmup;
    if (o.lr_schedule == "constant" || o.steps <= o.warmup) return o.lr;
    float progress = (float)(step - o.warmup) / (float)(o.steps - o.warmup);
    float min_lr = o.lr * o.min_lr_frac;
    return min_lr + 0.5f * (o.lr - min_lr) * (1.0f + std::cos((float)M_PI * progress));
}

// --device auto: a GPU per local rank, else the CPU (several ranks cannot share one GPU through NCCL).
static Device choose_device(const TrainOptions& o, int local_rank, int local_size, int* gpu) {
    int n = 0;
    bool have = cuda_available() && cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    if (o.device == "cpu") return Device::CPU;
    if (o.device == "cuda") {
        refuse_if(have ? "" : "--device cuda: no CUDA GPU is visible on this machine; use --device cpu");
        *gpu = local_rank % n;
        return Device::CUDA;
    }
    if (have && n >= local_size) {
        *gpu = local_rank;
        return Device::CUDA;
    }
    if (have) LOG0("note: %d GPU(s) for %d ranks on this node: running on CPU (use --device cuda --comm mpi to share a GPU)\n", n, local_size);
    return Device::CPU;
}

// The configuration a training state records (model/train_state.h): what must match to continue exactly.
static TrainState describe_run(const TrainOptions& o, const GPTConfig& cfg, const ProcessGrid& g, DType dtype, Recompute rc, const DataLoader& train) {
    TrainState s;
    s.cfg = cfg;
    s.tp = g.tp; s.dp = g.dp; s.sp = g.sp; s.dtype = dtype == DType::BF16; s.recompute = (int)rc;
    s.pp = g.pp;  // micro-batches, schedule and chunks: setup_run
    s.cp = g.cp;
    s.attention = o.attention == "flash";
    s.seed = o.seed; s.shuffle = o.shuffle; s.batch = o.batch; s.seq = o.seq;
    s.steps = o.steps; s.warmup = o.warmup; s.lr_schedule = o.lr_schedule == "cosine";
    s.lr = o.lr; s.min_lr_frac = o.min_lr_frac; s.beta1 = o.beta1; s.beta2 = o.beta2; s.eps = o.eps;
    s.weight_decay = o.weight_decay; s.grad_clip = o.grad_clip; s.dropout = o.dropout;
    if (!o.checkpoint_dir.empty() || !o.resume.empty()) {
        s.train_tokens = train.total_tokens();
        s.train_hash = train.fingerprint();  // data/dataloader.h: counts and edges of each shard
    }
    return s;
}

// --resume: check the saved state against this run (collectively: every rank reaches the same verdict),
// then restore the AdamW moments and the data position. Returns the first step to run.
static int restore_training_state(TrainState& saved, const std::string& step_dir, const TrainState& current, GPT& model,
                                  DataLoader& train, int64_t* skipped) {
    const std::string state_file = step_dir + "/state.bin";
    refuse_if(train_state_mismatch(saved, current, state_file));
    refuse_if(saved.data_position < train.num_batches ? "" : state_file + ": data position " +
              std::to_string(saved.data_position) + " is past the " + std::to_string(train.num_batches) + " batches of an epoch");
    std::string note = train_state_layout_note(saved, current);
    if (!note.empty()) LOG0("note: %s\n", note.c_str());
    gpt_load_full_optimizer(model, saved.adam_m.data(), saved.adam_v.data());
    train.set_state({saved.data_epoch, saved.data_position});
    *skipped = saved.skipped_steps;
    saved.adam_m = saved.adam_v = std::vector<float>();
    LOG0("resumed from %s: step %lld done, data epoch %lld batch %lld\n", step_dir.c_str(), (long long)saved.step,
         (long long)saved.data_epoch, (long long)saved.data_position);
    return (int)saved.step + 1;
}

// Save the pair DIR/step_N/{model.bin,state.bin} (model/train_state.cu): the TP ranks gather the weights and
// AdamW moments (consolidated), rank 0 writes. The directory was checked at start (check_paths), but a disk
// can fill or a directory vanish since: then the pair goes to a rescue directory that the message names,
// and the run stops (non-zero) rather than train on without checkpoints.
static void save_checkpoint(const std::string& dir, GPT& model, TrainState s, const DataLoader& train, int step, int64_t skipped) {
    std::vector<float> params;
    gpt_gather_full(model, params);
    gpt_gather_full_optimizer(model, s.adam_m, s.adam_v);
    s.step = step;
    s.data_epoch = train.epoch;
    s.data_position = train.position;
    s.skipped_steps = skipped;
    std::string err;
    if (g_rank == 0 && !checkpoint_dir_save(dir, model.cfg, params.data(), s, err)) {
        const std::string rescue = rescue_path(dir);
        std::string rescue_err;
        const bool rescued = checkpoint_dir_save(rescue, model.cfg, params.data(), s, rescue_err);
        err = "checkpoint of step " + std::to_string(step) + " not saved: " + err + "; " +
              (rescued ? "saved to " + rescue + " instead (resume with --resume " + rescue + ")"
                       : "the rescue directory " + rescue + " failed too: " + rescue_err);
    }
    refuse_if(err);
    LOG0("saved checkpoint %s/%s\n", dir.c_str(), checkpoint_step_name(step).c_str());
}

// A step whose loss or gradient norm was NaN/Inf (its update was not applied): name the first bad gradient
// tensor and stop -- or, with --skip-bad-steps, go on (at most 10 in a row). Returns the new run of bad steps.
static int handle_bad_step(const TrainOptions& o, GPT& model, const StepStats& st, int step, int bad_in_a_row) {
    std::string where = first_nonfinite_gradient(model);  // collective
    char head[160];
    snprintf(head, sizeof head, "step %d: the loss (%g) or the gradient norm (%g) is not finite; first non-finite gradient: ", step, st.loss, st.grad_norm);
    std::string what = head + (where.empty() ? std::string("none (the loss itself)") : where);
    if (!o.skip_bad_steps)
        refuse_if(what + "; stopped before the update (weights and checkpoints hold step " + std::to_string(step - 1) +
                  "); lower --lr, keep --grad-clip on, or pass --skip-bad-steps");
    if (bad_in_a_row + 1 >= 10) refuse_if(what + "; 10 steps in a row were not finite: stopping despite --skip-bad-steps");
    LOG0("warning: %s; update skipped (--skip-bad-steps)\n", what.c_str());
    return bad_in_a_row + 1;
}

// The next batch of a loader (data/dataloader.cu). A token id outside the vocabulary, or a read error, is
// found by the rank that reads it; every rank stops together, naming the shard, the position and the value.
static void next_batch_or_stop(DataLoader& data) {
    std::string err;
    refuse_if(data.next_batch(err) ? "" : err);
}

// ---- setting a run up ------------------------------------------------------------------------------------
// Everything one run holds once set up (setup_run), in the order it is made. Built in place and never
// copied: the model keeps pointers to the grid, the context and the allocator.
struct Run {
    TrainOptions opt;
    int world = 1;                               // ranks in MPI_COMM_WORLD
    Device device = Device::CPU;
    DType dtype = DType::F32;
    CommBackend backend = CommBackend::MPI;
    Recompute recompute = Recompute::None;
    Attention attention = Attention::Unfused;    // --attention (recompute/formulas.h)
    GPTConfig cfg;
    Ctx ctx;
    ProcessGrid grid;                            // parallel/process_grid.h: world = tp x dp x pp
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
    std::string memory_text, memory_json;        // --memory-report of this rank, taken at the schedule's peak
    FILE* logf = nullptr;                        // --log, on rank 0: one JSON object per line
};

// Where this rank runs: a GPU per rank on its node or the CPU (choose_device), the communication backend,
// the numerics, and the CPU threads it takes.
static void place_rank(Run& run, int* gpu) {
    const TrainOptions& opt = run.opt;
    LocalRank local = local_rank(MPI_COMM_WORLD);  // parallel/comm.h: this rank's index and count on its node
    run.device = choose_device(opt, local.rank, local.size, gpu);
    // CPU threads: share this node's cores among its ranks, as OpenMP threads, with single-threaded BLAS
    // calls inside them. OpenMP and OpenBLAS thread pools on the same cores spin against each other and can
    // make a step several times slower. OMP_NUM_THREADS, when set, wins.
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(std::max(1, omp_get_num_procs() / local.size));
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
    run.dtype = opt.dtype == "bf16" ? DType::BF16 : DType::F32;
    run.backend = (opt.comm == "nccl" || (opt.comm == "auto" && run.device == Device::CUDA)) ? CommBackend::NCCL : CommBackend::MPI;
    refuse_if(run.backend == CommBackend::NCCL && run.device == Device::CPU ? "--comm nccl needs --device cuda" : "");
    parse_recompute(opt.recompute.c_str(), &run.recompute);
    parse_attention(opt.attention.c_str(), &run.attention);
}

// A restartable job (--resume auto, or --resume DIR with --init): continue from DIR/latest when a checkpoint
// is there, else start as if --resume were not given, and say which. Rank 0 looks, every rank follows (a
// directory seen differently by two nodes must not split the job).
static void resolve_restart(TrainOptions& opt) {
    if (!opt.resume_if_present) return;
    int present = 0;
    if (g_rank == 0) {
        FILE* f = fopen((opt.resume + "/latest").c_str(), "rb");
        if (f) present = 1, fclose(f);
    }
    MPI_CHECK(MPI_Bcast(&present, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (present) {
        LOG0("restart: %s/latest exists: resuming from it%s\n", opt.resume.c_str(), opt.init.empty() ? "" : " (--init not used)");
        opt.init.clear();
    } else {
        LOG0("restart: no checkpoint in %s yet: starting %s; checkpoints go there\n", opt.resume.c_str(),
             opt.init.empty() ? "from scratch" : ("from --init " + opt.init).c_str());
        opt.resume.clear();
    }
}

// Gradient accumulation: M micro-batches of b sequences per DP rank and step, B = M · b · dp. From
// --micro-batch-size b or --num-microbatches M (both: they must agree); neither: M = 1. Collective refusals.
static int micro_batch_count(const TrainOptions& opt, int dp) {
    const int per_rank = opt.batch / dp;  // grid_validate has checked that dp divides the batch
    int M = opt.num_microbatches ? opt.num_microbatches : 1;
    if (opt.micro_batch) {
        refuse_if(per_rank % opt.micro_batch == 0 ? "" : "--batch " + std::to_string(opt.batch) + " is not divisible by --micro-batch-size " +
                  std::to_string(opt.micro_batch) + " x data-parallel size " + std::to_string(dp));
        const int from_b = per_rank / opt.micro_batch;
        refuse_if(!opt.num_microbatches || opt.num_microbatches == from_b ? "" : "--num-microbatches " + std::to_string(opt.num_microbatches) +
                  " contradicts --micro-batch-size " + std::to_string(opt.micro_batch) + ": --batch " + std::to_string(opt.batch) +
                  " over data-parallel size " + std::to_string(dp) + " makes " + std::to_string(from_b) + " micro-batches");
        M = from_b;
    }
    refuse_if(per_rank % M == 0 ? "" : "--num-microbatches " + std::to_string(M) + " does not divide the " + std::to_string(per_rank) +
              " sequences per data-parallel rank (--batch " + std::to_string(opt.batch) + " / dp " + std::to_string(dp) + ")");
    return M;
}

// The pipeline schedule and its model chunks (parallel/pipeline_schedule.h). The flags alone were checked by
// the option parser (train_options.cu: k alone means interleaved, interleaved needs k and --pp > 1); here what
// depends on the layer count and M. Collective refusals naming the numbers.
static void pipeline_layout(Run& run) {
    const TrainOptions& opt = run.opt;
    const int p = opt.pp, M = run.micro_batches, per_stage = run.cfg.layers / p;
    const int k = opt.layers_per_virtual_stage;
    const std::string& s = opt.pipeline_schedule;
    run.schedule = s == "afab" ? PipeSchedule::AFAB : s == "interleaved" ? PipeSchedule::Interleaved : PipeSchedule::OneFOneB;
    if (run.schedule == PipeSchedule::Interleaved) {
        refuse_if(per_stage % k == 0 ? "" : "--num-layers-per-virtual-pipeline-stage " + std::to_string(k) + " does not divide the " +
                  std::to_string(per_stage) + " layers of a stage (" + std::to_string(run.cfg.layers) + " layers / --pp " + std::to_string(p) + ")");
        run.chunks = per_stage / k;
    }
    std::string problem = pipe_schedule_problem(run.schedule, p, M, run.chunks);
    if (!problem.empty() && run.schedule == PipeSchedule::Interleaved)
        problem += run.chunks < 2 ? " (--num-layers-per-virtual-pipeline-stage " + std::to_string(k) + " of the " +
                                        std::to_string(per_stage) + " layers of a stage)"
                                  : " (set --num-microbatches or --micro-batch-size so that M = --batch / (b · dp) is a multiple of --pp)";
    refuse_if(problem);
}

// Every path on the command line, before any work (data/paths.h). Inputs: --init, a --train given (a plain
// name; a pattern is expanded and each shard checked by the loader), a --val given, --tokenizer, --hellaswag:
// each an existing regular file, on every rank (a file can be missing on one node); --init and --tokenizer may
// also name Hugging Face's files (model/model_file.h, data/hf_tokenizer.h), and then those files must be there.
// Their headers are read by their readers further on, still before the first step. Outputs, on rank 0 that
// writes them: the directories of --save (or the --save DIR/ itself) and --log and the --checkpoint-dir exist or
// are made, and are writable. Collective.
static void check_paths(const TrainOptions& opt) {
    std::string problem;
    auto input = [&](const char* flag, const std::string& path) {
        if (problem.empty() && !path.empty()) problem = input_file_problem(flag, path);
    };
    if (!opt.init.empty()) problem = model_input_problem("--init", opt.init);
    if (opt.was_given("--train") && opt.train_file.find_first_of("*?[") == std::string::npos)  // the default: the loader's hint
        input("--train", opt.train_file);
    if (opt.was_given("--val") && opt.val_file != "none") input("--val", opt.val_file);
    if (problem.empty() && !opt.tokenizer.empty()) problem = tokenizer_path_problem("--tokenizer", opt.tokenizer);
    input("--hellaswag", opt.hellaswag);
    if (g_rank == 0) {
        if (problem.empty() && !opt.save.empty()) problem = model_output_problem("--save", opt.save);
        if (problem.empty() && !opt.log.empty()) problem = output_file_problem("--log", opt.log);
        if (problem.empty() && !opt.checkpoint_dir.empty()) problem = output_dir_problem("--checkpoint-dir", opt.checkpoint_dir);
    }
    refuse_if(problem);
}

// With --init or --resume the model's shape is the checkpoint's. A shape flag given as well must agree:
// training another shape than the one asked for, without a word, is worse than stopping. Collective.
static void check_shape_flags(const TrainOptions& opt, const GPTConfig& cfg) {
    if (opt.init.empty() && opt.resume.empty()) return;
    const std::string from = opt.resume.empty() ? "--init " + opt.init : "the checkpoint in --resume " + opt.resume;
    const struct { const char* flag; int given, file; const char* symbol; } shape[] = {
        {"--layers", opt.layers, cfg.layers, "L"},     {"--heads", opt.heads, cfg.heads, "NH"},
        {"--hidden", opt.hidden, cfg.channels, "C"},   {"--vocab", opt.vocab, cfg.vocab, "V"},
        {"--max-seq", opt.max_seq, cfg.max_seq, "maxT"}, {"--padded-vocab", opt.padded_vocab, cfg.padded_vocab, "Vp"}};
    std::string problem;
    for (const auto& f : shape)
        if (problem.empty() && opt.was_given(f.flag) && f.given != f.file)
            problem = std::string(f.flag) + " " + std::to_string(f.given) + " contradicts " + from + ", whose model has " +
                      f.symbol + " = " + std::to_string(f.file) + ": leave the shape flags out (the checkpoint sets the shape) "
                      "or give its values";
    refuse_if(problem);
}

// The model's shape and first weights: a checkpoint directory to resume (with its training state), an llm.c
// file or a Hugging Face GPT-2 (--init, model/model_file.h), or a fresh model of the flags' shape
// (layers/model_shape.h).
static GPTConfig read_model_config(const TrainOptions& opt, std::vector<float>& init_params, TrainState& resumed,
                                   std::string& resumed_dir) {
    GPTConfig cfg;
    std::string err;
    if (!opt.resume.empty()) {
        refuse_if(checkpoint_dir_load(opt.resume, cfg, init_params, resumed, resumed_dir, err) ? "" : err);
    } else if (!opt.init.empty()) {
        refuse_if(model_read(opt.init, cfg, init_params, err) ? "" : err);
    } else {
        cfg.layers = opt.layers;
        cfg.heads = opt.heads;
        cfg.channels = opt.hidden;
        cfg.vocab = opt.vocab;
        cfg.max_seq = opt.max_seq;
        cfg.padded_vocab = opt.padded_vocab ? opt.padded_vocab : padded_vocab_for(opt.vocab);
        refuse_if(validate_config(cfg));
    }
    return cfg;
}

// Set a run up: device, model shape (or a checkpoint to resume), process grid, model, data, training state,
// log. Every refusal is collective (refuse_if), and the layout is checked before anything is allocated.
static void setup_run(Run& run, const TrainOptions& options, int world) {
    run.opt = options;
    run.world = world;
    const TrainOptions& opt = run.opt;
    int gpu = 0;
    place_rank(run, &gpu);
    resolve_restart(run.opt);
    check_paths(opt);

    // The model's shape, then the process grid (parallel/process_grid.cu): refuse an impossible layout early.
    std::vector<float> init_params;
    TrainState resumed;  // model/train_state.h: AdamW moments, step, data position, configuration
    std::string resumed_dir;
    run.cfg = read_model_config(opt, init_params, resumed, resumed_dir);
    check_shape_flags(opt, run.cfg);
    if (run.attention == Attention::Flash && run.device == Device::CUDA) {
        const int hd = run.cfg.channels / run.cfg.heads;
        refuse_if(flash_attention_hd_bound(hd) ? "" : "--attention flash on a GPU takes head dimensions up to 128; this model's is " +
                  std::to_string(hd) + " (hidden " + std::to_string(run.cfg.channels) + " / " + std::to_string(run.cfg.heads) +
                  " heads): use --attention unfused, or more heads");
    }
    refuse_if(grid_validate(world, opt.tp, opt.sp, run.cfg, opt.batch, opt.seq, opt.pp, opt.cp));
    int dp = world / (opt.tp * opt.cp * opt.pp);
    run.micro_batches = micro_batch_count(opt, dp);
    pipeline_layout(run);
    run.ctx = ctx_create(run.device, gpu);
    run.grid = grid_create(MPI_COMM_WORLD, opt.tp, opt.sp, run.backend, run.ctx, opt.pp, CommRules{opt.comm == "mpi-strict", opt.comm_timeout},
                           opt.cp);
    if (opt.sp && opt.tp == 1) LOG0("note: --sp with --tp 1 changes nothing (one rank holds the whole sequence)\n");
    std::string err;

    // Text in and out (--prompt, --sample): GPT-2 BPE from --tokenizer, which must fit the model's
    // vocabulary, else byte-level (its ids decode as bytes whatever the model's vocabulary).
    if (!opt.tokenizer.empty()) refuse_if(text_tokenizer_open(opt.tokenizer, run.cfg.vocab, run.text, err) ? "" : err);

    // The data (data/dataloader.cu): this data-parallel rank's part of each global batch.
    bool train_ok = run.train.init(opt.train_file, opt.batch, opt.seq, run.grid.dp, run.grid.dp_rank, opt.shuffle, opt.seed,
                                   run.cfg.vocab, err);
    refuse_if(train_ok ? "" : err + (opt.train_file.find("data/generated/default") != std::string::npos ? " (run 'make data' first)" : ""));
    if (!opt.hellaswag.empty()) {
        refuse_if(read_eval_file(opt.hellaswag, run.hellaswag, err) ? "" : err);
        refuse_if(eval_problem(run.hellaswag, opt.seq, run.cfg.vocab));
    }
    // --val none: no validation. A --val given must be read; the default's absence is only noted.
    if (opt.val_file != "none") {
        run.have_val = run.val.init(opt.val_file, opt.batch, opt.seq, run.grid.dp, run.grid.dp_rank, false, 0, run.cfg.vocab, err);
        refuse_if(run.have_val || !opt.was_given("--val") ? "" : "--val: " + err + " (--val none: train without validation)");
        if (!run.have_val) LOG0("note: no validation (%s)\n", err.c_str());
    }

    // The model (model/gpt.cu): this rank's shard, with random or loaded weights.
    run.alloc = std::make_unique<ActivationAllocator>(run.device);
    gpt_create(run.model, run.cfg, run.grid, run.ctx, *run.alloc, run.dtype, run.recompute, opt.dropout, opt.seed, run.chunks,
               opt.distributed_optimizer);  // parallel/distributed_optimizer.h
    run.model.schedule = run.schedule;
    run.model.attention = run.attention;
    if (opt.distributed_optimizer && weight_ranks(run.grid) == 1)
        LOG0("note: --use-distributed-optimizer with data-parallel size 1 changes nothing (one rank holds every optimizer state)\n");
    if (run.model.zero.on)
        LOG0("distributed optimizer: each of %d %s ranks keeps the optimizer states of %lld of %lld local parameters "
             "(padded by %lld)\n", weight_ranks(run.grid), run.grid.cp > 1 ? "data- and context-parallel" : "data-parallel",
             (long long)run.model.zero.shard, (long long)run.model.n_params, (long long)(run.model.zero.padded - run.model.n_params));
    if (init_params.empty()) gpt_init_random(run.model, opt.seed);
    else gpt_load_full(run.model, init_params.data());
    init_params.clear();
    init_params.shrink_to_fit();

    // Exact resume (model/train_state.h): check the saved state against this run, restore it.
    run.state = describe_run(opt, run.cfg, run.grid, run.dtype, run.recompute, run.train);
    run.state.microbatches = run.micro_batches;
    run.state.schedule = (int)run.schedule;
    run.state.chunks = run.chunks;
    if (!opt.resume.empty())
        run.start_step = restore_training_state(resumed, resumed_dir, run.state, run.model, run.train, &run.skipped_steps);

    if (g_rank == 0 && !opt.log.empty()) run.logf = fopen(opt.log.c_str(), opt.resume.empty() ? "w" : "a");  // a resumed run appends
    refuse_if(g_rank == 0 && !opt.log.empty() && !run.logf ? "cannot open --log file " + opt.log + " for writing" : "");
    // A resumed run appends to the log. Steps after the checkpoint that an interrupted run had logged come
    // again: the marker says that every record after it supersedes those (tools/plot_log.cu keeps the last).
    if (run.logf && !opt.resume.empty())
        fprintf(run.logf, "{\"restart_after_step\":%d}\n", run.start_step - 1), fflush(run.logf);

    run.shape = formula_input(opt.seq, opt.batch / run.grid.dp / run.micro_batches, run.cfg.channels, run.cfg.heads, run.cfg.layers,
                              run.cfg.padded_vocab, run.grid.tp, run.grid.sp, run.recompute, (int)dtype_size(run.dtype),
                              run.attention, run.grid.cp);
    run.optim.beta1 = opt.beta1; run.optim.beta2 = opt.beta2; run.optim.eps = opt.eps;
    run.optim.weight_decay = opt.weight_decay; run.optim.grad_clip = opt.grad_clip;
    g_test_hooks.inject_nan_at_step = opt.inject_nan_at_step;  // tests only (hidden flag): model/test_hooks.h
}

// What runs: the model, the layout, the batch, and the activation memory the paper's formulas predict.
static void print_startup(const Run& run) {
    const TrainOptions& opt = run.opt;
    const GPTConfig& cfg = run.cfg;
    LOG0("mini-megatron: %lld parameters (L=%d h=%d a=%d V=%d Vp=%d maxT=%d) on %s, %s\n", (long long)param_count(cfg),
         cfg.layers, cfg.channels, cfg.heads, cfg.vocab, cfg.padded_vocab, cfg.max_seq, device_name(run.device), dtype_name(run.dtype));
    char cp[32] = "";
    if (run.grid.cp > 1) snprintf(cp, sizeof cp, " x cp %d", run.grid.cp);
    LOG0("layout: %d ranks = tp %d%s x pp %d x dp %d, sequence parallel %s, recompute %s, attention %s, comm %s\n", run.world,
         run.grid.tp, cp, run.grid.pp, run.grid.dp, run.grid.sp ? "on" : "off", recompute_name(run.recompute),
         attention_name(run.attention),
         run.backend == CommBackend::NCCL ? "nccl" : opt.comm == "mpi-strict" ? "mpi-strict" : "mpi");
    if (run.attention == Attention::Flash && run.recompute == Recompute::Selective)
        LOG0("note: --recompute selective keeps what none keeps under --attention flash: flash attention never "
             "stores the s×s tensors selective recomputation drops (its backward rebuilds them tile by tile)\n");
    if (run.grid.pp > 1) {
        char chunks[96] = "";
        if (run.chunks > 1) snprintf(chunks, sizeof chunks, ", %d model chunks of %d layers per stage", run.chunks, run.model.stage.layers_per_chunk);
        LOG0("pipeline: %d stages of %d layers, schedule %s%s, %d micro-batches per step; ideal bubble (p-1)/(m*M) = %.3f\n",
             run.grid.pp, cfg.layers / run.grid.pp, pipe_schedule_name(run.schedule), chunks, run.micro_batches,
             pipe_ideal_bubble(run.grid.pp, run.micro_batches, run.chunks));
    }
    const int per_rank = opt.batch / run.grid.dp, M = run.micro_batches;
    char micro[96] = "";
    if (M > 1) snprintf(micro, sizeof micro, " in %d micro-batches of %d, gradients accumulated", M, per_rank / M);
    LOG0("batch: %d sequences x %d tokens per step (%d per data-parallel rank%s); %lld batches per epoch\n", opt.batch, opt.seq,
         per_rank, micro, (long long)run.train.num_batches);
    LOG0("activation memory per rank by the paper's formulas: %.2f MB (layers) + %.2f MB (outside layers)\n",
         cfg.layers * layer_bytes(run.shape.layer()) / 1e6, model_extra_bytes(run.shape) / 1e6);
}

// ---- during the run --------------------------------------------------------------------------------------
// What the loop keeps from step to step, for the step lines and the final summary.
struct Progress {
    float best_val = INFINITY, first_loss = NAN, last_loss = NAN;
    int first_step = 0, last_step = 0, steps_run = 0;  // of this run (after --resume: from the checkpoint's step + 1)
    // The activation allocator's high-water marks, apart: a training step's (its schedule's peak, what the paper's
    // formulas and the pipeline schedules are about) and a validation pass's (forward only, but at full batch).
    size_t train_peak = 0, val_peak = 0;
    double t_steps = 0;      // time of the timed steps (a run's first step is warm-up, unless it is the only one)
    int bad_in_a_row = 0;    // consecutive non-finite steps (handle_bad_step)
    CommCounters step_comm;  // the TP group's collectives of the last training step
    uint64_t step_p2p_bytes = 0;              // pipeline: bytes this rank sent to neighbouring stages, last step
    double t_pipeline = 0, t_recv_wait = 0;   // pipeline: forward-backward time and time blocked in exchanges
    // Context parallelism: ring attention's work in the first training step, and its compute time over the
    // timed steps (parallel/context_parallel.h); validation's forwards are not counted.
    CpStats cp_first;
    double cp_compute_s = 0;
};

// Context parallelism, after the run (collective; rank 0 prints): each CP rank's ring attention blocks and
// query-key pairs in the first step (the zigzag makes them equal), its attention compute time over the timed
// steps, and the K/V bytes of the first step measured by the communicator's counters next to their formula
// (recompute/formulas.h) for this stage's layers and micro-batches; full recompute runs each forward ring twice.
static void report_context_parallel(const Run& run, const Progress& p) {
    const ProcessGrid& g = run.grid;
    if (g.cp == 1) return;
    double mine[6] = {(double)p.cp_first.blocks, (double)p.cp_first.diagonal_blocks, p.cp_first.pairs, p.cp_compute_s,
                      (double)p.cp_first.forward_bytes, (double)p.cp_first.backward_bytes};
    std::vector<double> all(6 * (size_t)g.world);
    MPI_CHECK(MPI_Gather(mine, 6, MPI_DOUBLE, all.data(), 6, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (g_rank != 0) return;
    const int L = run.opt.seq / (2 * g.cp);
    LOG0("context parallelism: cp %d, the sequence in 2c = %d chunks of %d positions, CP rank r holding chunks r and "
         "2c-1-r; ring attention per rank (first step: chunk-pair blocks, diagonal ones, query-key pairs; attention "
         "compute over the timed steps):\n", g.cp, 2 * g.cp, L);
    double t_min = INFINITY, t_max = 0;
    for (int r = 0; r < g.world; r++) {
        const double* a = &all[6 * (size_t)r];
        t_min = std::min(t_min, a[3]), t_max = std::max(t_max, a[3]);
        if (r % g.tp == 0 && r < g.tp * g.cp)  // the CP group of rank 0
            LOG0("  rank %d (cp rank %d): %.0f blocks (%.0f diagonal), %.0f query-key pairs, %.3f s\n", r, r / g.tp, a[0],
                 a[1], a[2], a[3]);
    }
    if (t_min > 0) LOG0("  attention compute time, all %d ranks: %.3f to %.3f s, max/min %.3f\n", g.world, t_min, t_max, t_max / t_min);
    const LayerFormulaInput in = run.shape.layer();
    const double layers = (double)run.model.stage.layers.size() * run.micro_batches;
    const double fwd = cp_kv_forward_bytes(in) * layers * (run.recompute == Recompute::Full ? 2 : 1);
    const double bwd = cp_kv_backward_bytes(in) * layers;
    LOG0("  K/V bytes sent by rank 0 in the first step: forward %.0f (formula 2(c-1)(s/c)b(h/t)d x %.0f layer passes%s = "
         "%.0f), backward %.0f (formula [2(c-1)(s/c)b(h/t)d + 2c(s/c)b(h/t)4] x %.0f = %.0f)\n", all[4], layers,
         run.recompute == Recompute::Full ? " x 2 (full recompute reruns the ring)" : "", fwd, all[5], layers, bwd);
    if (run.logf)
        fprintf(run.logf, "{\"context_parallel\":{\"cp\":%d,\"blocks\":%.0f,\"pairs\":%.0f,\"kv_forward_bytes\":%.0f,"
                "\"kv_forward_formula\":%.0f,\"kv_backward_bytes\":%.0f,\"kv_backward_formula\":%.0f,"
                "\"attention_s_min\":%.6f,\"attention_s_max\":%.6f}}\n", g.cp, all[0], all[2], all[4], fwd, all[5], bwd,
                t_min, t_max), fflush(run.logf);
}

// The validation loss over the first --val-batches batches, printed and logged; *best keeps the lowest.
// Nothing without validation data or with --val-batches 0.
static void validate(Run& run, int step, float* best, size_t* peak) {
    const TrainOptions& opt = run.opt;
    if (!run.have_val || opt.val_batches == 0) return;
    run.alloc->reset_peak();
    run.val.set_state(DataLoaderState{});
    double sum = 0;
    int nb = (int)std::min<int64_t>(opt.val_batches, run.val.num_batches);
    for (int i = 0; i < nb; i++) {
        next_batch_or_stop(run.val);
        sum += eval_loss(run.model, run.val.inputs.data(), run.val.targets.data(), run.val.B_local, opt.seq);
    }
    float vl = (float)(sum / nb);
    LOG0("step %5d | val loss %.4f\n", step, vl);
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"val_loss\":%.6f}\n", step, vl), fflush(run.logf);
    if (vl >= 0) *best = std::min(*best, vl);
    *peak = std::max(*peak, run.alloc->peak_live_bytes());
}

// --hellaswag: the multiple-choice accuracy (model/hellaswag.cu), printed and logged. Each DP rank scores
// its share of the examples, a quarter of its batch's rows' worth of examples per forward pass.
static void evaluate_hellaswag(Run& run, int step) {
    if (run.hellaswag.empty()) return;
    const int per_forward = std::max(1, run.train.B_local / kEvalCompletions);
    EvalScore s = hellaswag_evaluate(run.model, run.hellaswag, run.opt.seq, per_forward);
    LOG0("step %5d | hellaswag %d/%d = %.4f\n", step, s.correct, s.total, s.accuracy());
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"hellaswag_acc\":%.6f}\n", step, s.accuracy()), fflush(run.logf);
}

// --memory-report, on the run's first step, between its forward and backward pass (train_step's
// after_forward): the saved activations measured by the allocator next to the paper's formulas
// (recompute/memory_report.cu).
static void maybe_report_memory(Run& run, int step) {
    if (!(run.opt.memory_report && step == run.start_step)) return;
    ctx_sync(run.ctx);
    // What the stage holds at this moment, its schedule's peak (model/pipeline_step.h).
    const PipelineStage& st = run.model.stage;
    MemoryReport r = build_memory_report(run.alloc->live(), run.shape, pipeline_in_flight(run.model, run.micro_batches));
    r.pp = st.pp;
    r.pp_rank = st.rank;
    r.microbatches = run.micro_batches;
    r.schedule = pipe_schedule_name(run.schedule);
    add_model_state(r, run.model.state_memory, model_state_formula(run.model.n_params, weight_ranks(run.grid), run.model.zero.on,
                                                                   run.dtype != DType::F32));  // recompute/model_state_memory.h
    if (run.device == Device::CUDA) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) r.device_used_bytes = (double)(tot - fr);
    }
    // Printed and logged after the step (emit_memory_report): stages reach their peaks at different moments,
    // and nothing may wait on another stage in the middle of a schedule.
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    print_memory_report(f, r);
    fclose(f);
    run.memory_text = text;
    free(text);
    run.memory_json = memory_report_json(r);
}

// The memory reports of the first rank of every pipeline stage, printed and logged by rank 0 (collective).
static void emit_memory_report(Run& run, int step) {
    if (!(run.opt.memory_report && step == run.start_step)) return;
    const ProcessGrid& g = run.grid;
    const auto reports = gather_stage_reports(run.memory_text, run.memory_json, g.pp, ranks_per_stage(g), MPI_COMM_WORLD);
    for (size_t s = 0; s < reports.size(); s++) {  // rank 0 only
        if (g.pp > 1) printf("\n---- pipeline stage %zu (rank %d) ----", s, (int)s * ranks_per_stage(g));
        fputs(reports[s].first.c_str(), stdout);
        if (run.logf) fprintf(run.logf, "{\"step\":%d,\"memory_report\":%s}\n", step, reports[s].second.c_str());
    }
    const std::string by_rank = model_states_by_rank(run.model, MPI_COMM_WORLD);  // collective (distributed_optimizer.h)
    if (g_rank == 0) printf("Model states per rank\n%s", by_rank.c_str());
    fflush(stdout);
}

// The step's line: on stdout every --log-every steps (and the first and last), in the --log file every step.
// dt is this step's time, t_steps that of the timed steps so far (for the ETA).
static void log_step(const Run& run, int step, const StepStats& st, float lr, double dt, double t_steps, uint64_t p2p_bytes) {
    const TrainOptions& opt = run.opt;
    if (step % opt.log_every == 0 || step == opt.steps || step == run.start_step) {
        double avg = step > run.start_step ? t_steps / (step - run.start_step) : dt;
        double eta = avg * (opt.steps - step);
        char mfu[64] = "";
        if (run.device == Device::CUDA) {  // recompute/formulas.h: model FLOPs against the H100's bf16 peak
            double flops = model_flops(opt.batch, run.cfg.layers, opt.seq, run.cfg.channels, run.cfg.padded_vocab);
            snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * flops_utilization(flops, dt, kH100PeakBf16, run.world));
        }
        if (run.grid.pp > 1)  // what rank 0 (the first stage) sent to the next stage this step
            snprintf(mfu + strlen(mfu), sizeof mfu - strlen(mfu), " | p2p %.2f MB", p2p_bytes / 1e6);
        const double tokens_per_step = (double)opt.batch * opt.seq;
        LOG0("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s | ETA %.0fs\n", step, opt.steps, st.loss,
             lr, st.grad_norm, dt * 1e3, tokens_per_step / dt, mfu, eta);
    }
    char extra[96] = "";
    if (run.grid.pp > 1) snprintf(extra, sizeof extra, ",\"p2p_bytes\":%llu", (unsigned long long)p2p_bytes);
    // %.9g: a float's exact value (resume tests compare losses bitwise)
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"train_loss\":%.9g,\"lr\":%.6e,\"grad_norm\":%.9g,\"ms\":%.3f%s%s}\n", step, st.loss, lr,
                          st.grad_norm, dt * 1e3, extra, st.applied ? "" : ",\"skipped\":true"), fflush(run.logf);
}

// Pipeline parallelism: the ideal bubble of the schedule next to what each stage measured, the share of its
// forward-backward time spent blocked in exchanges (collective; rank 0 prints). The first stage waits at the
// start of its cool-down, the last stage at the start of the step: the paper's bubble (§2).
static void report_bubble(const Run& run, const Progress& p) {
    const ProcessGrid& g = run.grid;
    if (g.pp == 1) return;
    double mine[2] = {p.t_recv_wait, p.t_pipeline};
    std::vector<double> all(2 * (size_t)g.world);
    MPI_CHECK(MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (g_rank != 0) return;
    // The paper's bubble fraction (p-1)/(m*M) is the idle time over the ideal (bubble-free) time; as a share of
    // the whole step that is b/(1+b), the number comparable with the time measured idle.
    const double b = pipe_ideal_bubble(g.pp, run.micro_batches, run.chunks);
    LOG0("pipeline bubble (%s, p %d, m %d, M %d): ideal (p-1)/(m*M) = %.3f of the ideal time, an idle share %.3f of the step; "
         "measured idle share (blocked in exchanges):", pipe_schedule_name(run.schedule), g.pp, run.chunks, run.micro_batches, b,
         b / (1 + b));
    for (int s = 0; s < g.pp; s++) {
        const int r = s * ranks_per_stage(g);
        const double idle = all[2 * (size_t)r + 1] > 0 ? all[2 * (size_t)r] / all[2 * (size_t)r + 1] : 0;
        LOG0(" stage %d %.3f%s", s, idle, s + 1 < g.pp ? "," : "\n");
    }
}

// ---- the end of a run ------------------------------------------------------------------------------------
// --save: one consolidated llm.c file (fp32), or a Hugging Face directory in the training dtype
// (model/model_file.h), gathered from every rank, written by rank 0. Its
// directory was checked at start (check_paths); if the write fails all the same (a full disk, a directory
// removed since), the trained model goes to a rescue file that the message names, and the run stops with an
// error (collective, so no rank is left waiting and MPI prints no abort report).
static void save_final_model(Run& run) {
    const std::string& path = run.opt.save;
    std::vector<float> full;
    gpt_gather_full(run.model, full);
    std::string err;
    const bool bf16 = run.dtype == DType::BF16;  // the Hugging Face format is written in the training dtype
    if (g_rank == 0 && !model_try_write(path, run.cfg, full.data(), bf16, err)) {
        // A Hugging Face directory ("out/") is rescued as a directory of the same kind ("rescued_<pid>_out/").
        const bool dir = !path.empty() && path.back() == '/';
        const std::string rescue = dir ? rescue_path(path.substr(0, path.find_last_not_of('/') + 1)) + "/" : rescue_path(path);
        std::string rescue_err;
        const bool rescued = model_try_write(rescue, run.cfg, full.data(), bf16, rescue_err);
        err = "--save " + path + ": the trained model could not be written (" + err + "); " +
              (rescued ? "it was written to " + rescue + " instead" : "the rescue file " + rescue + " failed too: " + rescue_err);
    }
    refuse_if(err);
    LOG0("saved %s (%s)\n", path.c_str(), model_format_name(path, bf16).c_str());
}

// The done line: the steps this run ran (after --resume, from the checkpoint's step on), the losses of its
// first and last steps with their numbers, the best validation loss, and the activation peaks of a training
// step and of validation apart. Nothing is printed that was not measured.
static std::string summary_line(const Run& run, const Progress& p, double seconds) {
    char b[256];
    std::string s = "done: ";
    if (run.start_step > 1) s += "resumed at step " + std::to_string(run.start_step - 1) + ": ";
    if (p.steps_run == 0) {
        s += run.start_step > 1 ? "no steps left to run (the run had reached --steps " + std::to_string(run.opt.steps) + ")"
                                : "no steps run (--steps " + std::to_string(run.opt.steps) + ")";
    } else {
        snprintf(b, sizeof b, "%d steps in %.1f s", p.steps_run, seconds);
        s += b;
        if (p.first_step > 0) {
            snprintf(b, sizeof b, " | loss %.4f (step %d) -> %.4f (step %d)", p.first_loss, p.first_step, p.last_loss, p.last_step);
            s += b;
        } else {
            s += " | no step had a finite loss";
        }
    }
    if (std::isfinite(p.best_val)) snprintf(b, sizeof b, " | best val %.4f", p.best_val), s += b;
    std::string peaks;
    if (p.steps_run > 0) snprintf(b, sizeof b, "training step %.2f MB", p.train_peak / 1e6), peaks += b;
    if (p.val_peak > 0) snprintf(b, sizeof b, "%svalidation %.2f MB", peaks.empty() ? "" : ", ", p.val_peak / 1e6), peaks += b;
    if (!peaks.empty()) s += " | activation peak: " + peaks + " (allocator, this rank)";
    return s;
}
// --save (model/checkpoint.cu: one consolidated llm.c file), --sample (model/generate.cu), the TP group's
// communication in the last step, and the done line. t_start: when training began.
static void finish_run(Run& run, const Progress& p, double t_start) {
    const TrainOptions& opt = run.opt;
    if (!opt.save.empty()) save_final_model(run);
    if (opt.sample > 0) {
        std::vector<int> toks = run.text.encode(opt.prompt.empty() ? std::string("\n") : opt.prompt);
        size_t n0 = toks.size();
        int window = std::min(opt.seq, run.cfg.max_seq);
        generate(run.model, toks, opt.sample, window, opt.temperature, opt.top_k, opt.seed + 1);
        std::vector<int> out(toks.begin() + n0, toks.end());
        LOG0("\n---- sample (%d tokens, temperature %.2f, top-k %d) ----\n%s%s\n----\n", opt.sample, opt.temperature, opt.top_k,
             opt.prompt.c_str(), run.text.decode(out).c_str());
    }
    double total = now_s() - t_start;
    // Communication of the TP group in the last step (parallel/comm.h ring model): under SP the all-gathers and
    // reduce-scatters move what TP's all-reduces move; the backward re-gathers of saved shards come on top.
    const CommCounters& cc = p.step_comm;
    if (run.grid.tp > 1)
        LOG0("TP communication per step (bytes sent per rank): all-reduce %llu calls %.2f MB | all-gather %llu calls %.2f MB "
             "(of which backward re-gathers %.2f MB) | reduce-scatter %llu calls %.2f MB\n",
             (unsigned long long)cc.calls[kAllReduce], cc.bytes[kAllReduce] / 1e6, (unsigned long long)cc.calls[kAllGather],
             cc.bytes[kAllGather] / 1e6, cc.regather_bytes / 1e6, (unsigned long long)cc.calls[kReduceScatter],
             cc.bytes[kReduceScatter] / 1e6);
    report_bubble(run, p);
    report_context_parallel(run, p);
    const std::string dp_line = distributed_optimizer_comm_line(run.model);  // parallel/distributed_optimizer.h
    if (!dp_line.empty()) LOG0("%s\n", dp_line.c_str());
    LOG0("%s\n", summary_line(run, p, total).c_str());
}

// Free what setup_run made, in reverse order (the allocator goes with `run`, after MPI_Finalize).
static void free_run(Run& run) {
    if (run.logf) fclose(run.logf);
    gpt_destroy(run.model);
    grid_destroy(run.grid);
    ctx_destroy(run.ctx);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    // ---- set up: device, model (or a checkpoint to resume), process grid, data, log; say what will run ----
    Run run;
    setup_run(run, parse_train_options(argc, argv, g_rank == 0), world);
    print_startup(run);
    TrainOptions& opt = run.opt;

    // ---- the validation loss before any training (not when resuming) ----
    Progress p;
    if (opt.val_every > 0 && run.start_step == 1) validate(run, 0, &p.best_val, &p.val_peak);
    if (opt.eval_every > 0 && run.start_step == 1) evaluate_hellaswag(run, 0);

    // ---- training ----
    double t_start = now_s();
    for (int step = run.start_step; step <= opt.steps; step++) {
        // One optimizer step (model/train_step.cu), timed; the memory report runs between forward and backward.
        next_batch_or_stop(run.train);
        float lr = learning_rate(opt, step);
        run.grid.tp_comm.counters.reset();  // parallel/comm.h: bytes each collective kind moves, per step
        run.grid.pp_comm.counters.reset();
        run.alloc->reset_peak();
        const CpStats cp0 = cp_stats();
        double t0 = now_s();
        StepStats st = train_step(run.model, run.train.inputs.data(), run.train.targets.data(), run.train.B_local, opt.seq,
                                  run.optim, step, lr, [&] { maybe_report_memory(run, step); }, run.micro_batches);
        ctx_sync(run.ctx);
        double dt = now_s() - t0;
        const CpStats cp_step = cp_stats_since(cp0);
        if (step == run.start_step) p.cp_first = cp_step;
        p.train_peak = std::max(p.train_peak, run.alloc->peak_live_bytes());
        p.step_comm = run.grid.tp_comm.counters;
        p.step_p2p_bytes = run.grid.pp_comm.counters.p2p_bytes;
        emit_memory_report(run, step);
        if (step > run.start_step || opt.steps == run.start_step) {  // the pipeline's idle time (bubble), timed steps
            p.t_pipeline += st.pipeline_seconds;
            p.t_recv_wait += st.recv_wait_seconds;
        }
        if (step > run.start_step || opt.steps == run.start_step) p.t_steps += dt, p.cp_compute_s += cp_step.compute_s;
        // Numerical faults (model/train_step.cu): a non-finite step was not applied; stop, naming the first bad
        // gradient, before anything reaches a checkpoint -- or skip it with --skip-bad-steps.
        if (!st.applied) {
            run.skipped_steps++;
            p.bad_in_a_row = handle_bad_step(opt, run.model, st, step, p.bad_in_a_row);
        } else {
            p.bad_in_a_row = 0;
            if (std::isnan(p.first_loss)) p.first_loss = st.loss, p.first_step = step;
            p.last_loss = st.loss, p.last_step = step;
        }
        p.steps_run++;
        // The step's line: stdout every --log-every steps, the --log file every step.
        log_step(run, step, st, lr, dt, p.t_steps, p.step_p2p_bytes);
        // Checkpoint for exact resume (model/train_state.cu): every --save-every steps and at the end.
        const bool exit_now = opt.exit_interval > 0 && step % opt.exit_interval == 0 && step < opt.steps;
        if (!opt.checkpoint_dir.empty() && ((opt.save_every > 0 && step % opt.save_every == 0) || step == opt.steps || exit_now))
            save_checkpoint(opt.checkpoint_dir, run.model, run.state, run.train, step, run.skipped_steps);
        if (exit_now) {
            LOG0("exit: --exit-interval %d reached at step %d%s\n", opt.exit_interval, step,
                 opt.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : "; continue with --resume");
            opt.steps = step;  // end here: the final validation, --save and --sample still run
            break;
        }
        // Once in a while, the validation loss and the HellaSwag accuracy.
        if (opt.val_every > 0 && step % opt.val_every == 0 && step != opt.steps) validate(run, step, &p.best_val, &p.val_peak);
        if (opt.eval_every > 0 && step % opt.eval_every == 0 && step != opt.steps) evaluate_hellaswag(run, step);
    }
    // ---- the final validation loss and HellaSwag accuracy ----
    if (opt.steps > 0) validate(run, opt.steps, &p.best_val, &p.val_peak);
    if (opt.steps > 0) evaluate_hellaswag(run, opt.steps);

    // ---- save the weights, sample some text, print the summary; then free what setup_run made ----
    finish_run(run, p, t_start);
    free_run(run);
    MPI_Finalize();
    return 0;
}
