// train_gpt.cu — the main loop. It reads like a table of contents: each line points to the file that holds
// the mechanism.
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
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "model/train_state.h"
#include "model/train_step.h"
#include "recompute/memory_report.h"
#include "train_options.h"

static int g_rank = 0;
#define LOG0(...) do { if (g_rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// Refuse a bad input on every rank together. Collective: every rank calls it at the same point, with ""
// when it sees no problem; if any rank has one, the lowest such rank explains and all exit(1) cleanly
// (a problem seen by one rank only, e.g. a file unreadable on one node, cannot leave the others waiting).
static void refuse_if(const std::string& problem) {
    int mine = problem.empty() ? INT32_MAX : g_rank, first = mine;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
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
static int restore_training_state(TrainState& saved, const std::string& step_dir, const TrainState& run, GPT& model,
                                  DataLoader& train, int64_t* skipped) {
    const std::string state_file = step_dir + "/state.bin";
    refuse_if(train_state_mismatch(saved, run, state_file));
    refuse_if(saved.data_position < train.num_batches ? "" : state_file + ": data position " +
              std::to_string(saved.data_position) + " is past the " + std::to_string(train.num_batches) + " batches of an epoch");
    std::string note = train_state_layout_note(saved, run);
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
// AdamW moments (consolidated), rank 0 writes.
static void save_checkpoint(const std::string& dir, GPT& model, TrainState s, const DataLoader& train, int step, int64_t skipped) {
    std::vector<float> params;
    gpt_gather_full(model, params);
    gpt_gather_full_optimizer(model, s.adam_m, s.adam_v);
    s.step = step;
    s.data_epoch = train.epoch;
    s.data_position = train.position;
    s.skipped_steps = skipped;
    std::string err;
    if (g_rank == 0 && !checkpoint_dir_save(dir, model.cfg, params.data(), s, err)) err = "checkpoint not saved: " + err;
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

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    TrainOptions opt = parse_train_options(argc, argv, g_rank == 0);

    // ---- where to run: one rank per GPU, or CPUs -------------------------------------------------------
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    int local_rank = 0, local_size = 1;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    int gpu = 0;
    Device device = choose_device(opt, local_rank, local_size, &gpu);
    // CPU threads: share this node's cores among its ranks, as OpenMP threads, with single-threaded BLAS
    // calls inside them. OpenMP and OpenBLAS thread pools on the same cores spin against each other and can
    // make a step 10x slower (measured on 2 cores: 80 ms vs 250 ms per step). OMP_NUM_THREADS, when set, wins.
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(std::max(1, omp_get_num_procs() / local_size));
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
    DType dtype = opt.dtype == "bf16" ? DType::BF16 : DType::F32;
    CommBackend backend = (opt.comm == "nccl" || (opt.comm == "auto" && device == Device::CUDA)) ? CommBackend::NCCL : CommBackend::MPI;
    refuse_if(backend == CommBackend::NCCL && device == Device::CPU ? "--comm nccl needs --device cuda" : "");
    Recompute recompute;
    parse_recompute(opt.recompute.c_str(), &recompute);

    // ---- the model's shape (model/config.h, model/checkpoint.cu), or a checkpoint to resume ---------------
    GPTConfig cfg;
    std::vector<float> init_params;
    TrainState resumed;      // model/train_state.h: AdamW moments, step, data position, configuration
    std::string resumed_dir;
    if (!opt.resume.empty()) {
        std::string err;
        refuse_if(checkpoint_dir_load(opt.resume, cfg, init_params, resumed, resumed_dir, err) ? "" : err);
    } else if (!opt.init.empty()) {
        std::string err;
        refuse_if(checkpoint_read(opt.init, cfg, init_params, err) ? "" : err);
    } else {
        cfg.layers = opt.layers;
        cfg.heads = opt.heads;
        cfg.channels = opt.hidden;
        cfg.vocab = opt.vocab;
        cfg.max_seq = opt.max_seq;
        cfg.padded_vocab = opt.padded_vocab ? opt.padded_vocab : padded_vocab_for(opt.vocab);
        refuse_if(validate_config(cfg));
    }
    // ---- the process grid (parallel/process_grid.cu): refuse an impossible layout before allocating ----
    refuse_if(grid_validate(world, opt.tp, opt.sp, cfg, opt.batch, opt.seq));
    int dp = world / opt.tp;
    if (opt.micro_batch && opt.micro_batch * dp != opt.batch)  // (the same on every rank)
        refuse_if("--micro-batch-size " + std::to_string(opt.micro_batch) + " times data-parallel size " + std::to_string(dp) +
                  " must equal the global batch " + std::to_string(opt.batch) + " (no gradient accumulation)");
    Ctx ctx = ctx_create(device, gpu);
    ProcessGrid grid = grid_create(MPI_COMM_WORLD, opt.tp, opt.sp, backend, ctx);
    if (opt.sp && opt.tp == 1) LOG0("note: --sp with --tp 1 changes nothing (one rank holds the whole sequence)\n");

    // ---- model (model/gpt.cu), data (data/dataloader.cu) ----------------------------------------------------
    ActivationAllocator alloc(device);
    GPT model;
    gpt_create(model, cfg, grid, ctx, alloc, dtype, recompute, opt.dropout, opt.seed);
    if (init_params.empty()) gpt_init_random(model, opt.seed);
    else gpt_load_full(model, init_params.data());
    init_params.clear();
    init_params.shrink_to_fit();

    DataLoader train, val;
    std::string err;
    bool train_ok = train.init(opt.train_file, opt.batch, opt.seq, grid.dp, grid.dp_rank, opt.shuffle, opt.seed, cfg.vocab, err);
    refuse_if(train_ok ? "" : err + (opt.train_file.find("data/generated/default") != std::string::npos ? " (run 'make data' first)" : ""));
    bool have_val = val.init(opt.val_file, opt.batch, opt.seq, grid.dp, grid.dp_rank, false, 0, cfg.vocab, err);
    if (!have_val) LOG0("note: no validation (%s)\n", err.c_str());

    // ---- exact resume (model/train_state.h): check the saved state against this run, restore it -----------
    TrainState run = describe_run(opt, cfg, grid, dtype, recompute, train);
    int start_step = 1;
    int64_t skipped_steps = 0;
    if (!opt.resume.empty()) start_step = restore_training_state(resumed, resumed_dir, run, model, train, &skipped_steps);

    FILE* logf = nullptr;
    if (g_rank == 0 && !opt.log.empty()) logf = fopen(opt.log.c_str(), opt.resume.empty() ? "w" : "a");  // a resumed run appends
    refuse_if(g_rank == 0 && !opt.log.empty() && !logf ? "cannot open --log file " + opt.log + " for writing" : "");

    // ---- start-up summary ---------------------------------------------------------------------------------
    ModelFormulaInput shape;
    shape.s = opt.seq; shape.b = opt.batch / grid.dp; shape.h = cfg.channels; shape.a = cfg.heads;
    shape.L = cfg.layers; shape.v = cfg.padded_vocab; shape.t = grid.tp; shape.sp = grid.sp; shape.rc = recompute;
    shape.d = (int)dtype_size(dtype);
    LOG0("mini-megatron: %lld parameters (L=%d h=%d a=%d V=%d Vp=%d maxT=%d) on %s, %s\n", (long long)param_count(cfg),
         cfg.layers, cfg.channels, cfg.heads, cfg.vocab, cfg.padded_vocab, cfg.max_seq, device_name(device), dtype_name(dtype));
    LOG0("layout: %d ranks = tp %d x dp %d, sequence parallel %s, recompute %s, comm %s\n", world, grid.tp, grid.dp,
         grid.sp ? "on" : "off", recompute_name(recompute), backend == CommBackend::NCCL ? "nccl" : "mpi");
    LOG0("batch: %d sequences x %d tokens per step (%d per data-parallel rank); %lld batches per epoch\n", opt.batch, opt.seq,
         opt.batch / grid.dp, (long long)train.num_batches);
    LOG0("activation memory per rank by the paper's formulas: %.2f MB (layers) + %.2f MB (outside layers)\n",
         cfg.layers * layer_bytes(shape.layer()) / 1e6, model_extra_bytes(shape) / 1e6);

    auto validate = [&](int step) {
        if (!have_val || opt.val_batches == 0) return -1.0f;
        val.set_state(DataLoaderState{});
        double sum = 0;
        int nb = (int)std::min<int64_t>(opt.val_batches, val.num_batches);
        for (int i = 0; i < nb; i++) {
            val.next_batch();
            sum += eval_loss(model, val.inputs.data(), val.targets.data(), val.B_local, opt.seq);
        }
        float vl = (float)(sum / nb);
        LOG0("step %5d | val loss %.4f\n", step, vl);
        if (logf) fprintf(logf, "{\"step\":%d,\"val_loss\":%.6f}\n", step, vl), fflush(logf);
        return vl;
    };

    // ---- training ---------------------------------------------------------------------------------------------
    OptimConfig oc;
    oc.beta1 = opt.beta1; oc.beta2 = opt.beta2; oc.eps = opt.eps; oc.weight_decay = opt.weight_decay; oc.grad_clip = opt.grad_clip;
    g_test_hooks.inject_nan_at_step = opt.inject_nan_at_step;  // tests only (hidden flag): model/train_step.h
    int step = 0;
    float best_val = INFINITY, first_loss = NAN, last_loss = NAN;
    int bad_in_a_row = 0;
    if (opt.val_every > 0 && start_step == 1) {
        float v0 = validate(0);
        if (v0 >= 0) best_val = v0;
    }
    double t_start = now_s(), t_steps = 0;
    const double tokens_per_step = (double)opt.batch * opt.seq;
    CommCounters step_comm;  // the TP group's collectives of the last training step
    for (step = start_step; step <= opt.steps; step++) {
        train.next_batch();
        float lr = learning_rate(opt, step);
        auto report = [&]() {  // recompute/memory_report.cu: measured vs formula, right after the forward pass
            if (!(opt.memory_report && step == start_step)) return;
            ctx_sync(ctx);
            MemoryReport r = build_memory_report(alloc.live(), shape);
            if (device == Device::CUDA) {
                size_t fr = 0, tot = 0;
                if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) r.device_used_bytes = (double)(tot - fr);
            }
            if (g_rank == 0) print_memory_report(stdout, r);
            if (logf) fprintf(logf, "{\"step\":%d,\"memory_report\":%s}\n", step, memory_report_json(r).c_str());
        };
        grid.tp_comm.counters.reset();  // parallel/comm.h: bytes each collective kind moves, per step
        double t0 = now_s();
        StepStats st = train_step(model, train.inputs.data(), train.targets.data(), train.B_local, opt.seq, oc, step, lr, report);
        ctx_sync(ctx);
        double dt = now_s() - t0;
        step_comm = grid.tp_comm.counters;
        if (step > start_step || opt.steps == start_step) t_steps += dt;
        // Numerical faults (model/train_step.cu): a non-finite step was not applied; stop, naming the first bad
        // gradient, before anything reaches a checkpoint -- or skip it with --skip-bad-steps.
        if (!st.applied) {
            skipped_steps++;
            bad_in_a_row = handle_bad_step(opt, model, st, step, bad_in_a_row);
        } else {
            bad_in_a_row = 0;
            if (std::isnan(first_loss)) first_loss = st.loss;
            last_loss = st.loss;
        }
        if (step % opt.log_every == 0 || step == opt.steps || step == start_step) {
            double avg = step > start_step ? t_steps / (step - start_step) : dt;
            double eta = avg * (opt.steps - step);
            char mfu[64] = "";
            if (device == Device::CUDA) {
                double flops = model_flops(opt.batch, cfg.layers, opt.seq, cfg.channels, cfg.padded_vocab);
                snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * flops_utilization(flops, dt, kH100PeakBf16, world));
            }
            LOG0("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s | ETA %.0fs\n", step, opt.steps, st.loss,
                 lr, st.grad_norm, dt * 1e3, tokens_per_step / dt, mfu, eta);
        }
        // %.9g: a float's exact value (resume tests compare losses bitwise)
        if (logf) fprintf(logf, "{\"step\":%d,\"train_loss\":%.9g,\"lr\":%.6e,\"grad_norm\":%.9g,\"ms\":%.3f%s}\n", step, st.loss, lr,
                          st.grad_norm, dt * 1e3, st.applied ? "" : ",\"skipped\":true"), fflush(logf);
        // Checkpoint for exact resume (model/train_state.cu): every --save-every steps and at the end.
        const bool exit_now = opt.exit_interval > 0 && step % opt.exit_interval == 0 && step < opt.steps;
        if (!opt.checkpoint_dir.empty() && ((opt.save_every > 0 && step % opt.save_every == 0) || step == opt.steps || exit_now))
            save_checkpoint(opt.checkpoint_dir, model, run, train, step, skipped_steps);
        if (exit_now) {
            LOG0("exit: --exit-interval %d reached at step %d%s\n", opt.exit_interval, step,
                 opt.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : "; continue with --resume");
            opt.steps = step;  // end here: the final validation, --save and --sample still run
            break;
        }
        if (opt.val_every > 0 && step % opt.val_every == 0 && step != opt.steps) {
            float vl = validate(step);
            if (vl >= 0) best_val = std::min(best_val, vl);
        }
    }
    if (opt.steps > 0) {
        float vl = validate(opt.steps);
        if (vl >= 0) best_val = std::min(best_val, vl);
    }

    // ---- save (model/checkpoint.cu: one consolidated llm.c file), sample (model/generate.cu) -------------------
    if (!opt.save.empty()) {
        std::vector<float> full;
        gpt_gather_full(model, full);
        if (g_rank == 0) {
            checkpoint_write(opt.save, cfg, full.data(), false);
            LOG0("saved %s (llm.c format, fp32)\n", opt.save.c_str());
        }
    }
    if (opt.sample > 0) {
        std::vector<uint16_t> p16 = tokenizer::encode(opt.prompt.empty() ? std::string("\n") : opt.prompt);
        std::vector<int> toks(p16.begin(), p16.end());
        size_t n0 = toks.size();
        int window = std::min(opt.seq, cfg.max_seq);
        generate(model, toks, opt.sample, window, opt.temperature, opt.top_k, opt.seed + 1);
        std::vector<uint16_t> out(toks.begin() + n0, toks.end());
        LOG0("\n---- sample (%d tokens, temperature %.2f, top-k %d) ----\n%s%s\n----\n", opt.sample, opt.temperature, opt.top_k,
             opt.prompt.c_str(), tokenizer::decode(out).c_str());
    }
    double total = now_s() - t_start;
    // Communication of the TP group in the last step (parallel/comm.h ring model): under SP the all-gathers and
    // reduce-scatters move what TP's all-reduces move; the backward re-gathers of saved shards come on top.
    const CommCounters& cc = step_comm;
    if (grid.tp > 1)
        LOG0("TP communication per step (bytes sent per rank): all-reduce %llu calls %.2f MB | all-gather %llu calls %.2f MB "
             "(of which backward re-gathers %.2f MB) | reduce-scatter %llu calls %.2f MB\n",
             (unsigned long long)cc.calls[kAllReduce], cc.bytes[kAllReduce] / 1e6, (unsigned long long)cc.calls[kAllGather],
             cc.bytes[kAllGather] / 1e6, cc.regather_bytes / 1e6, (unsigned long long)cc.calls[kReduceScatter],
             cc.bytes[kReduceScatter] / 1e6);
    LOG0("done: %d steps in %.1f s | loss %.4f -> %.4f | best val %.4f | activation peak %.2f MB (allocator, this rank)\n", opt.steps,
         total, first_loss, last_loss, std::isfinite(best_val) ? best_val : NAN, alloc.peak_live_bytes() / 1e6);
    if (logf) fclose(logf);
    gpt_destroy(model);
    grid_destroy(grid);
    ctx_destroy(ctx);
    MPI_Finalize();
    return 0;
}
