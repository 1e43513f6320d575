// train_gpt.cu — the main loop. It reads like a table of contents: each line points to the file that holds
// the mechanism.
//
//   mpirun -np 2 build/train_gpt --tp 2 --sp --recompute selective --memory-report
#include <mpi.h>
#include <omp.h>
#include <cblas.h>
#include <cstdlib>
#include <chrono>
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
#include "model/train_step.h"
#include "recompute/memory_report.h"
#include "train_options.h"

static int g_rank = 0;
#define LOG0(...) do { if (g_rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// Every rank reaches the same verdict on a bad configuration: rank 0 explains, all exit cleanly.
static void refuse_if(const std::string& problem) {
    if (problem.empty()) return;
    if (g_rank == 0) fprintf(stderr, "error: %s\n", problem.c_str());
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
        if (!have) refuse_if("--device cuda: no CUDA GPU is visible on this machine; use --device cpu");
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
    if (backend == CommBackend::NCCL && device == Device::CPU) refuse_if("--comm nccl needs --device cuda");
    Recompute recompute;
    parse_recompute(opt.recompute.c_str(), &recompute);

    // ---- the model's shape (model/config.h, model/checkpoint.cu) ------------------------------------------
    GPTConfig cfg;
    std::vector<float> init_params;
    if (!opt.init.empty()) {
        std::string err;
        if (!checkpoint_read(opt.init, cfg, init_params, err)) refuse_if(err);
    } else {
        cfg.layers = opt.layers;
        cfg.heads = opt.heads;
        cfg.channels = opt.hidden;
        cfg.vocab = opt.vocab;
        cfg.max_seq = opt.max_seq;
        cfg.padded_vocab = opt.padded_vocab ? opt.padded_vocab : (opt.vocab + 127) / 128 * 128;
        refuse_if(validate_config(cfg));
    }
    // ---- the process grid (parallel/process_grid.cu): refuse an impossible layout before allocating ----
    refuse_if(grid_validate(world, opt.tp, opt.sp, cfg, opt.batch, opt.seq));
    int dp = world / opt.tp;
    if (opt.micro_batch && opt.micro_batch * dp != opt.batch)
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
    if (!train.init(opt.train_file, opt.batch, opt.seq, grid.dp, grid.dp_rank, opt.shuffle, opt.seed, cfg.vocab, err))
        refuse_if(err + (opt.train_file.find("data/generated/default") != std::string::npos ? " (run 'make data' first)" : ""));
    bool have_val = val.init(opt.val_file, opt.batch, opt.seq, grid.dp, grid.dp_rank, false, 0, cfg.vocab, err);
    if (!have_val) LOG0("note: no validation (%s)\n", err.c_str());

    FILE* logf = nullptr;
    if (g_rank == 0 && !opt.log.empty()) {
        logf = fopen(opt.log.c_str(), "w");
        if (!logf) refuse_if("cannot open --log file " + opt.log + " for writing");
    }

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
    float best_val = INFINITY, first_loss = NAN, last_loss = NAN;
    if (opt.val_every > 0) {
        float v0 = validate(0);
        if (v0 >= 0) best_val = v0;
    }
    double t_start = now_s(), t_steps = 0;
    const double tokens_per_step = (double)opt.batch * opt.seq;
    for (int step = 1; step <= opt.steps; step++) {
        train.next_batch();
        float lr = learning_rate(opt, step);
        auto report = [&]() {  // recompute/memory_report.cu: measured vs formula, right after the forward pass
            if (!(opt.memory_report && step == 1)) return;
            ctx_sync(ctx);
            MemoryReport r = build_memory_report(alloc.live(), shape);
            if (device == Device::CUDA) {
                size_t fr = 0, tot = 0;
                if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) r.device_used_bytes = (double)(tot - fr);
            }
            if (g_rank == 0) print_memory_report(stdout, r);
            if (logf) fprintf(logf, "{\"step\":%d,\"memory_report\":%s}\n", step, memory_report_json(r).c_str());
        };
        double t0 = now_s();
        StepStats st = train_step(model, train.inputs.data(), train.targets.data(), train.B_local, opt.seq, oc, step, lr, report);
        ctx_sync(ctx);
        double dt = now_s() - t0;
        if (step > 1 || opt.steps == 1) t_steps += dt;
        if (std::isnan(first_loss)) first_loss = st.loss;
        last_loss = st.loss;
        if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm))
            refuse_if("step " + std::to_string(step) + ": the loss or gradient norm is not finite (loss " + std::to_string(st.loss) +
                      ", grad norm " + std::to_string(st.grad_norm) + "); lower --lr or enable --grad-clip");
        if (step % opt.log_every == 0 || step == opt.steps || step == 1) {
            double avg = step > 1 ? t_steps / (step - 1) : dt;
            double eta = avg * (opt.steps - step);
            char mfu[64] = "";
            if (device == Device::CUDA) {
                double flops = model_flops(opt.batch, cfg.layers, opt.seq, cfg.channels, cfg.padded_vocab);
                snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * flops_utilization(flops, dt, 989e12, world));
            }
            LOG0("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s | ETA %.0fs\n", step, opt.steps, st.loss,
                 lr, st.grad_norm, dt * 1e3, tokens_per_step / dt, mfu, eta);
        }
        if (logf) fprintf(logf, "{\"step\":%d,\"train_loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"ms\":%.3f}\n", step, st.loss, lr,
                          st.grad_norm, dt * 1e3), fflush(logf);
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
    LOG0("done: %d steps in %.1f s | loss %.4f -> %.4f | best val %.4f | activation peak %.2f MB (allocator, this rank)\n", opt.steps,
         total, first_loss, last_loss, std::isfinite(best_val) ? best_val : NAN, alloc.peak_live_bytes() / 1e6);
    if (logf) fclose(logf);
    gpt_destroy(model);
    grid_destroy(grid);
    ctx_destroy(ctx);
    MPI_Finalize();
    return 0;
}
