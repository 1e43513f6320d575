// run.cu — setting a training run up (see run.h): each step refuses a bad input collectively (refuse_if),
// and the layout is checked before anything is allocated.
#include "run.h"

#include <omp.h>
#include <cblas.h>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include "../data/hf_tokenizer.h"
#include "../data/paths.h"
#include "../data/writer_lock.h"
#include "interrupt.h"
#include "../model/checkpoint.h"
#include "../layers/trace.h"
#include "../parallel/pipeline_simulation.h"
#include "../parallel/zero_bubble_schedule.h"
#include "../model/model_file.h"
#include "../model/offload_model.h"
#include "../model/pipeline_step.h"  // pipeline_in_flight: the offloading note
#include "../model/zero_model.h"
#include "../parallel/comm.h"
#include "../recompute/flash_memory.h"  // formula_input with the attention core and cp
#include "../recompute/formulas.h"

// Refuse a bad input on every rank together (run.h). Collective: every rank calls it at the same point, with ""
// when it sees no problem; if any rank has one, the lowest such rank explains and all exit(1) cleanly
// (a problem seen by one rank only, e.g. a file unreadable on one node, cannot leave the others waiting).
// Not under --comm-timeout: the other ranks wait here while rank 0 writes a checkpoint, which for a large
// model can rightly take longer than any timeout meant for a step's communication.
void refuse_if(const std::string& problem) {
    int mine = problem.empty() ? INT32_MAX : g_rank, first = mine;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == INT32_MAX) return;
    if (g_rank == first) fprintf(stderr, "error: %s\n", problem.c_str()), fflush(stderr);
    MPI_Finalize();
    exit(1);
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The next batch of a loader (data/dataloader.cu). A token id outside the vocabulary, or a read error, is
// found by the rank that reads it; every rank stops together, naming the shard, the position and the value.
void next_batch_or_stop(DataLoader& data) {
    std::string err;
    refuse_if(data.next_batch(err) ? "" : err);
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

// Where this rank runs: a GPU per rank on its node or the CPU (choose_device), the communication backend,
// the numerics, and the CPU threads it takes.
void place_rank(Run& run, int world) {
    run.world = world;
    const TrainOptions& opt = run.opt;
    LocalRank local = local_rank(MPI_COMM_WORLD);  // parallel/comm.h: this rank's index and count on its node
    run.device = choose_device(opt, local.rank, local.size, &run.gpu);
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

// Every path on the command line, before any work (data/paths.h). Inputs: --init, a --train given (a plain
// name; a pattern is expanded and each shard checked by the loader), a --val given, --tokenizer, --hellaswag:
// each an existing regular file, on every rank (a file can be missing on one node); --init and --tokenizer may
// also name Hugging Face's files (model/model_file.h, data/hf_tokenizer.h), and then those files must be there.
// Their headers are read by their readers further on, still before the first step. Outputs, on rank 0 that
// writes them: the directories of --save (or the --save DIR/ itself) and --log and the --checkpoint-dir exist or
// are made, and are writable; the --checkpoint-dir is locked for this run (data/writer_lock.h). Collective.
static void check_path_flags(const TrainOptions& opt) {
    std::string problem, lock_note;
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
        if (problem.empty() && !opt.trace.empty()) problem = output_file_problem("--trace", opt.trace);
        if (problem.empty() && !opt.checkpoint_dir.empty()) problem = output_dir_problem("--checkpoint-dir", opt.checkpoint_dir);
        // One writer per checkpoint directory (data/writer_lock.h): a second run is refused here, naming the first.
        if (problem.empty() && !opt.checkpoint_dir.empty()) problem = writer_lock_take(opt.checkpoint_dir, &lock_note);
    }
    refuse_if(problem);
    if (!lock_note.empty()) LOG0("note: %s\n", lock_note.c_str());
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
        std::string read_from;  // a checkpoint directory's model file (model/model_file.h)
        refuse_if(model_read(opt.init, cfg, init_params, err, &read_from) ? "" : err);
        if (!read_from.empty())
            LOG0("--init %s: the weights of %s, without the training state (--resume with the checkpoint directory "
                 "continues that run: its AdamW moments, data position and step)\n", opt.init.c_str(), read_from.c_str());
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
// the option parser (train/options.cu: k alone means interleaved, interleaved needs k and --pp > 1); here what
// depends on the layer count and M. Collective refusals naming the numbers.
static void pipeline_layout(Run& run) {
    const TrainOptions& opt = run.opt;
    const int p = opt.pp, M = run.micro_batches, per_stage = run.cfg.layers / p;
    const int k = opt.layers_per_virtual_stage;
    const std::string& s = opt.pipeline_schedule;
    run.schedule = s == "afab" ? PipeSchedule::AFAB : s == "interleaved" ? PipeSchedule::Interleaved
                 : s == "zb-h1" ? PipeSchedule::ZeroBubbleH1 : s == "zb-h2" ? PipeSchedule::ZeroBubbleH2
                 : s == "zb-v" ? PipeSchedule::ZeroBubbleV : PipeSchedule::OneFOneB;
    if (run.schedule == PipeSchedule::ZeroBubbleV) {  // two chunks per stage in a V (parallel/zero_bubble_schedule.h)
        refuse_if(run.cfg.layers % (2 * p) == 0 ? "" : "--pipeline-schedule zb-v cuts the " + std::to_string(run.cfg.layers) +
                  " layers into 2 · --pp " + std::to_string(p) + " = " + std::to_string(2 * p) + " chunks: they do not divide them");
        refuse_if(run.backend != CommBackend::NCCL ? "" : "--pipeline-schedule zb-v on --comm nccl: its pairs of stages send "
                  "activations and gradients both ways, each in its own order, which needs a communicator per direction "
                  "(not built); use --comm mpi");
        run.chunks = 2;
    }
    if (p == 1 && run.schedule == PipeSchedule::AFAB)  // (interleaved at pp 1 is refused by the option parser)
        LOG0("note: --pipeline-schedule afab with --pp 1 changes nothing (one stage runs the forward and backward of each "
             "micro-batch in turn)\n");
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
    // Activation offloading by layer (model/offload_model.h) counts a model chunk's layers.
    const int chunk = per_stage / run.chunks;
    refuse_if(opt.offload_layers <= chunk ? "" : "--cpu-offloading-num-layers " + std::to_string(opt.offload_layers) + " exceeds the " +
              std::to_string(chunk) + " layers of a model chunk (L / pp / chunks)");
}

// The configuration a training state records (model/train_state.h): what must match to continue exactly.
static TrainState describe_run(const TrainOptions& o, const GPTConfig& cfg, const ProcessGrid& g, DType dtype, Recompute rc, const DataLoader& train) {
    TrainState s;
    s.cfg = cfg;
    s.tp = g.tp; s.dp = g.dp; s.sp = g.sp; s.dtype = dtype == DType::BF16; s.recompute = (int)rc;
    s.pp = g.pp;  // micro-batches, schedule and chunks: resume_or_start
    s.cp = g.cp;
    s.attention = o.attention == "flash";
    s.seed = o.seed; s.shuffle = o.shuffle; s.batch = o.batch; s.seq = o.seq;
    s.steps = o.steps; s.warmup = o.warmup; s.lr_schedule = o.lr_schedule == "cosine";
    s.lr_decay_steps = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.steps;
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
                                  DataLoader& train, int64_t* skipped, bool override_schedule) {
    const std::string state_file = step_dir + "/state.bin";
    refuse_if(train_state_mismatch(saved, current, state_file, override_schedule));
    if (override_schedule)
        LOG0("note: --override-opt_param-scheduler: from step %lld on the learning rate follows this run's schedule (%s), "
             "not the checkpoint's (%s)\n", (long long)saved.step + 1, schedule_description(current).c_str(),
             schedule_description(saved).c_str());
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

void check_paths(Run& run) {
    resolve_restart(run.opt);
    check_path_flags(run.opt);
    if (g_rank == 0) interrupt_report_install(run.opt.checkpoint_dir);  // Ctrl-C says what was saved (train/interrupt.h)
}

// --use-checkpoint-opt_param-scheduler: the resumed run's learning-rate schedule is the checkpoint's, whatever
// the flags say (Megatron-LM's meaning); a cosine keeps decaying over the checkpoint's steps and stays at its
// final rate past them. Before the model and the optimizer's constants are made from the flags.
static void adopt_checkpoint_schedule(TrainOptions& opt, const TrainState& saved) {
    if (!opt.checkpoint_schedule || opt.resume.empty()) return;
    opt.lr = (float)saved.lr;
    opt.min_lr_frac = (float)saved.min_lr_frac;
    opt.warmup = saved.warmup;
    opt.lr_schedule = saved.lr_schedule ? "cosine" : "constant";
    opt.weight_decay = (float)saved.weight_decay;
    opt.lr_decay_steps = saved.lr_decay_steps;
    LOG0("note: --use-checkpoint-opt_param-scheduler: the learning rate follows the checkpoint's schedule (%s)\n",
         schedule_description(saved).c_str());
}

void read_model_shape(Run& run) {
    run.cfg = read_model_config(run.opt, run.init_params, run.resumed, run.resumed_dir);
    adopt_checkpoint_schedule(run.opt, run.resumed);
    check_shape_flags(run.opt, run.cfg);
    if (run.attention == Attention::Flash && run.device == Device::CUDA) {
        const int hd = run.cfg.channels / run.cfg.heads;
        refuse_if(flash_attention_hd_bound(hd) ? "" : "--attention flash on a GPU takes head dimensions up to 128; this model's is " +
                  std::to_string(hd) + " (hidden " + std::to_string(run.cfg.channels) + " / " + std::to_string(run.cfg.heads) +
                  " heads): use --attention unfused, or more heads");
    }
}

void make_process_grid(Run& run) {
    const TrainOptions& opt = run.opt;
    refuse_if(grid_validate(run.world, opt.tp, opt.sp, run.cfg, opt.batch, opt.seq, opt.pp, opt.cp));
    int dp = run.world / (opt.tp * opt.cp * opt.pp);
    run.micro_batches = micro_batch_count(opt, dp);
    pipeline_layout(run);
    run.ctx = ctx_create(run.device, run.gpu);
    run.grid = grid_create(MPI_COMM_WORLD, opt.tp, opt.sp, run.backend, run.ctx, opt.pp, CommRules{opt.comm == "mpi-strict", opt.comm_timeout},
                           opt.cp);
    if (run.schedule == PipeSchedule::ZeroBubbleV && opt.pp > 1) grid_use_v_placement(run.grid);  // parallel/process_grid.h
    if (opt.sp && opt.tp == 1) LOG0("note: --sp with --tp 1 changes nothing (one rank holds the whole sequence)\n");
}

void open_data(Run& run) {
    const TrainOptions& opt = run.opt;
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
}

void make_model(Run& run) {
    const TrainOptions& opt = run.opt;
    run.alloc = std::make_unique<ActivationAllocator>(run.device);
    gpt_create(run.model, run.cfg, run.grid, run.ctx, *run.alloc, run.dtype, run.recompute, opt.dropout, opt.seed, run.chunks,
               opt.zero_stage);  // parallel/distributed_optimizer.h, parallel/zero_sharding.h
    run.model.schedule = run.schedule;
    run.model.attention = run.attention;
    if (!opt.pipeline_op_times.empty()) {  // the test mode (model/pipeline_timeline.h); the flag was checked
        parse_pipe_op_times(opt.pipeline_op_times, &run.model.pipe.op_times);
        LOG0("note: --pipeline-op-times %s: every pipeline op's work is a timed wait (F:B:W ms); the loss is 0 and the "
             "weights move only by weight decay\n", opt.pipeline_op_times.c_str());
    }
    // Megatron-FSDP's recipe gives --use-distributed-optimizer with its sharding strategy: ZeRO-2/3 shard the
    // optimizer states too, so the flag asks for nothing more (a stage below the one given is refused: options.cu).
    if (opt.zero_stage >= 2 && opt.distributed_optimizer)
        LOG0("note: --use-distributed-optimizer with --zero %d: ZeRO-%d shards the optimizer states too (as Megatron-FSDP's "
             "--data-parallel-sharding-strategy with it): running ZeRO-%d\n", opt.zero_stage, opt.zero_stage, opt.zero_stage);
    if (opt.zero_stage > 0 && weight_ranks(run.grid) == 1)
        LOG0("note: %s with data-parallel size 1 changes nothing (one rank holds every optimizer state)\n",
             opt.zero_stage == 1 ? "--use-distributed-optimizer" : ("--zero " + std::to_string(opt.zero_stage)).c_str());
    if (zero_sharded(run.model))  // model/zero_model.h
        LOG0("ZeRO-%d: each of %d %s ranks keeps its piece of every unit (%zu layers%s): %lld of %lld local parameters' %s "
             "(units padded by %lld)\n", opt.zero_stage, weight_ranks(run.grid), run.grid.cp > 1 ? "data- and context-parallel" : "data-parallel",
             run.model.stage.layers.size(), run.model.sharded.edges >= 0 ? " and the edges" : "", (long long)run.model.sharded.shard,
             (long long)run.model.n_params, opt.zero_stage == 2 ? "gradients and optimizer states" : "weights, gradients and optimizer states",
             (long long)(run.model.sharded.padded - run.model.n_params));
    if (run.model.zero.on)
        LOG0("distributed optimizer: each of %d %s ranks keeps the optimizer states of %lld of %lld local parameters "
             "(padded by %lld)\n", weight_ranks(run.grid), run.grid.cp > 1 ? "data- and context-parallel" : "data-parallel",
             (long long)run.model.zero.shard, (long long)run.model.n_params, (long long)(run.model.zero.padded - run.model.n_params));
    if (!opt.offload.empty()) {  // activation offloading (model/offload_model.h)
        OffloadPolicy policy;
        policy.kind = opt.offload == "layers" ? OffloadPolicy::Layers : OffloadPolicy::InFlight;
        policy.layers = opt.offload_layers, policy.beyond = opt.offload_beyond;  // (the count checked: pipeline_layout)
        offload_configure(run.model, policy);
        if (policy.kind == OffloadPolicy::InFlight && policy.beyond < 0 && run.grid.pp == 1)
            LOG0("note: --offload-beyond-in-flight last-stage with one pipeline stage moves nothing (it is the last stage)\n");
        if (policy.kind == OffloadPolicy::Layers && (policy.layers == 0 || (policy.layers < 0 && run.model.stage.layers_per_chunk == 1)))
            LOG0("note: activation offloading moves no layer (a model chunk of %d layer%s, %d offloaded)\n", run.model.stage.layers_per_chunk,
                 run.model.stage.layers_per_chunk == 1 ? "" : "s", policy.layers < 0 ? 0 : policy.layers);
        if (policy.kind == OffloadPolicy::InFlight && policy.beyond >= 0) {  // K: moves nothing where no stage holds more
            const InFlightLayers held = pipeline_in_flight(run.model, run.micro_batches);
            int most[2] = {offload_counts(run.model, run.micro_batches).moved, 0};  // (this stage's moves, its most in flight)
            for (int n : held.per_layer) most[1] = std::max(most[1], n);
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
            if (most[0] == 0)
                LOG0("note: --offload-beyond-in-flight %d moves nothing: no pipeline stage holds more than %d micro-batch%s in "
                     "flight (%d micro-batch%s per step; the most any stage holds: %d)\n", policy.beyond, policy.beyond,
                     policy.beyond == 1 ? "" : "es", run.micro_batches, run.micro_batches == 1 ? "" : "es", most[1]);
        }
    }
    if (run.init_params.empty()) gpt_init_random(run.model, opt.seed);
    else gpt_load_full(run.model, run.init_params.data());
    run.init_params.clear();
    run.init_params.shrink_to_fit();

    // The step's constants: the paper's symbols for this rank's micro-batch (recompute/formulas.h), AdamW's.
    run.shape = formula_input(opt.seq, opt.batch / run.grid.dp / run.micro_batches, run.cfg.channels, run.cfg.heads, run.cfg.layers,
                              run.cfg.padded_vocab, run.grid.tp, run.grid.sp, run.recompute, (int)dtype_size(run.dtype),
                              run.attention, run.grid.cp);
    run.optim.beta1 = opt.beta1; run.optim.beta2 = opt.beta2; run.optim.eps = opt.eps;
    run.optim.weight_decay = opt.weight_decay; run.optim.grad_clip = opt.grad_clip;
    // Tests only (hidden flags): layers/test_hooks.h.
    g_test_hooks.inject_nan_at_step = opt.inject_nan_at_step;
    g_test_hooks.stop_stage = opt.stop_stage;
    g_test_hooks.stop_stage_at_step = opt.stop_stage_at_step;
}

void resume_or_start(Run& run) {
    const TrainOptions& opt = run.opt;
    run.state = describe_run(opt, run.cfg, run.grid, run.dtype, run.recompute, run.train);
    run.state.microbatches = run.micro_batches;
    run.state.schedule = (int)run.schedule;
    run.state.chunks = run.chunks;
    if (!opt.resume.empty()) {
        run.start_step = restore_training_state(run.resumed, run.resumed_dir, run.state, run.model, run.train, &run.skipped_steps,
                                                opt.override_schedule);
        if (g_rank == 0) interrupt_resumed_from(opt.resume, run.start_step - 1);
    }
}

static void open_trace(Run& run);

void open_log(Run& run) {
    const TrainOptions& opt = run.opt;
    if (g_rank == 0 && !opt.log.empty()) run.logf = fopen(opt.log.c_str(), opt.resume.empty() ? "w" : "a");  // a resumed run appends
    refuse_if(g_rank == 0 && !opt.log.empty() && !run.logf ? "cannot open --log file " + opt.log + " for writing" : "");
    // A resumed run appends to the log. Steps after the checkpoint that an interrupted run had logged come
    // again: the marker says that every record after it supersedes those (tools/plot_log.cu keeps the last).
    if (run.logf && !opt.resume.empty())
        fprintf(run.logf, "{\"restart_after_step\":%d}\n", run.start_step - 1), fflush(run.logf);
    open_trace(run);
}

// --trace (layers/trace.h): the steps to record, now that the first step is known (a resumed run starts later);
// this rank's row; the groups' names for the collectives' events; the device context the spans synchronize.
// The recording itself starts and stops around the steps (train/bookkeeping.cu).
static void open_trace(Run& run) {
    TrainOptions& opt = run.opt;
    if (opt.trace.empty()) return;
    if (opt.trace_first == 0)  // the default: the run's second step, after the first step's warm-up allocations
        opt.trace_first = opt.trace_last = std::max(run.start_step, std::min(run.start_step + 1, opt.steps));
    refuse_if(opt.trace_first < run.start_step && opt.was_given("--trace-steps")
                  ? "--trace-steps " + std::to_string(opt.trace_first) + ":" + std::to_string(opt.trace_last) + ": this run resumes at step " +
                        std::to_string(run.start_step) + ", so steps before it do not run; record steps from " +
                        std::to_string(run.start_step) + " on"
                  : "");
    const ProcessGrid& g = run.grid;
    std::string name = "stage " + std::to_string(g.pp_rank) + " / tp " + std::to_string(g.tp_rank) + " / dp " + std::to_string(g.dp_rank);
    if (g.cp > 1) name += " / cp " + std::to_string(g.cp_rank);
    trace_set_process(name, g.rank);
    const std::pair<const Comm*, const char*> groups[] = {{&g.tp_comm, "tp"},   {&g.cp_comm, "cp"},   {&g.dp_comm, "dp"},
                                                          {&g.dpcp_comm, "dpcp"}, {&g.pp_comm, "pp"}, {&g.emb_comm, "emb"}};
    for (const auto& group : groups) trace_name_group(group.first, group.second);
    trace_sync_context(&run.ctx);
}

double schedule_bubble(const Run& run, int M, double tf, double tb, double tw, std::string* how) {
    const int p = run.grid.pp;
    const bool post = run.opt.post_validation;
    BubbleSchedule bs;
    parse_bubble_schedule(pipe_schedule_name(run.schedule), &bs);  // the same names
    const double closed = post ? pipeline_bubble_time_post_validated(bs, p, M, tf, tb, tw) : pipeline_bubble_time(bs, p, M, tf, tb, tw);
    if (how) *how = std::string(post ? "post-validated " : "") + (std::isnan(closed) ? "simulation" : "closed form");
    return std::isnan(closed) ? pipe_simulate(run.schedule, p, M, run.chunks, tf, tb, tw, post).idle[0] : closed;
}

// The ideal bubble of `run`'s schedule at M micro-batches per step.
static double bubble_at(const Run& run, int M, std::string* formula) {
    if (!is_zero_bubble(run.schedule)) {
        *formula = "(p-1)/(m*M)";
        return pipe_ideal_bubble(run.grid.pp, M, run.chunks);
    }
    std::string how;
    const double bubble = schedule_bubble(run, M, 1, 1, 1, &how);
    *formula = "at T_F = T_B = T_W (" + how + ")";
    return bubble / (3.0 * M * run.chunks);
}

double ideal_bubble_rate(const Run& run, std::string* formula) { return bubble_at(run, run.micro_batches, formula); }

// Fewer micro-batches than stages (M < p): most of the step is bubble. Say how large, and which flag lowers it,
// with the bubble at the most micro-batches this batch allows (up to 4p; a multiple of p when interleaved).
static void bubble_hint(const Run& run, double bubble) {
    const int p = run.grid.pp, M = run.micro_batches, per_rank = run.opt.batch / run.grid.dp;
    if (p == 1 || M >= p) return;
    int best = M;
    for (int m = M + 1; m <= std::min(per_rank, 4 * p); m++)
        if (per_rank % m == 0 && (run.schedule != PipeSchedule::Interleaved || m % p == 0)) best = m;
    std::string formula;
    char then[16];
    snprintf(then, sizeof then, "%.2f", bubble_at(run, best, &formula));
    std::string how = best > M ? "--num-microbatches " + std::to_string(best) + " (or --micro-batch-size " + std::to_string(per_rank / best) +
                                     ") would make it " + then
                               : "raise --batch (now " + std::to_string(run.opt.batch) + ") so that each data-parallel rank's " +
                                     std::to_string(per_rank) + " sequences split into at least " + std::to_string(p) +
                                     " micro-batches, then set --num-microbatches";
    LOG0("note: %d micro-batch%s for %d pipeline stages: the ideal bubble is %.2f (idle over busy time), most of the step; more "
         "micro-batches lower it: %s\n", M, M == 1 ? "" : "es", p, bubble, how.c_str());
}

void print_startup(const Run& run) {
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
        std::string formula;
        const double bubble = ideal_bubble_rate(run, &formula);  // (ZB-H1 and ZB-H2 are equal at equal times)
        LOG0("pipeline: %d stages of %d layers, schedule %s%s%s, %d micro-batches per step; ideal bubble %s = %.3f%s\n",
             run.grid.pp, cfg.layers / run.grid.pp, pipe_schedule_name(run.schedule), is_zero_bubble(run.schedule) ? " (B and W split)" : "",
             chunks, run.micro_batches, formula.c_str(), bubble, run.schedule == PipeSchedule::ZeroBubbleH2 &&
             !opt.post_validation ? " (the step's synchronous end keeps it: 0 needs --optimizer-post-validation)" : "");
        bubble_hint(run, bubble);
    }
    const int per_rank = opt.batch / run.grid.dp, M = run.micro_batches;
    char micro[96] = "";
    if (M > 1) snprintf(micro, sizeof micro, " in %d micro-batches of %d, gradients accumulated", M, per_rank / M);
    LOG0("batch: %d sequences x %d tokens per step (%d per data-parallel rank%s); %lld batches per epoch\n", opt.batch, opt.seq,
         per_rank, micro, (long long)run.train.num_batches);
    LOG0("activation memory per rank by the paper's formulas: %.2f MB (layers) + %.2f MB (outside layers)\n",
         cfg.layers * layer_bytes(run.shape.layer()) / 1e6, model_extra_bytes(run.shape) / 1e6);
}

void free_run(Run& run) {
    if (run.logf) fclose(run.logf);
    post_validation_free(run.pv);
    gpt_destroy(run.model);
    grid_destroy(run.grid);
    ctx_destroy(run.ctx);
}
