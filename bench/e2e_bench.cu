// e2e_bench.cu — end-to-end training throughput, Table 5 style: a whole GPT (model/gpt.h) trained with
// train_step (forward, backward, gradient sync, clipping, AdamW) on synthetic random tokens, once per
// recompute policy (full, selective, none), reporting ms/step, tokens/s, MFU and HFU, and memory.
//
// MFU and HFU (paper §6.3, Appendix A) use recompute/formulas.h:
//   model FLOPs per iteration     Eq. 7: 72BLsh²(1 + s/(6h) + v/(12hL))             (any policy)
//   hardware FLOPs, selective     Eq. 8: 72BLsh²(1 + s/(3h) + v/(12hL))
//   hardware FLOPs, full          one more forward of every layer
//   MFU / HFU = FLOPs / step time / peak,
// against two peaks: the datasheet's dense bf16 rate of an H100/H200 (989 TFLOP/s; the paper's Table 5 uses
// the A100's 312) and the rate this device actually reaches on a large bf16 GEMM through the project's own
// gemm() (layers/matmul.h), which is the ceiling this code could hope for.
//
// Default model: GPT-2 XL class (48 layers, h = 1600, 25 heads, s = 1024, GPT-2 vocabulary), 8 sequences per
// step, bf16, dropout 0.1, one process, tp = 1 (the paper's Table 5 runs need 8+ GPUs). Policies run from
// the least memory to the most (full, selective, none), each with its own activation allocator, so that the
// peaks reported are that policy's; when the paper's formulas say a policy cannot fit in the free device
// memory it is skipped with a message, and an allocation failure that still happens names cudaMalloc and
// "out of memory" (mm_fatal). The JSON file is rewritten after every policy, so results survive.
//
//   build/e2e_bench                                   # GPT-2 XL class on the GPU
//   build/e2e_bench --device cpu --layers 2 --hidden 64 --heads 4 --seq 32 --batch 2 --vocab 256
#include "bench_common.h"

#include "../layers/matmul.h"
#include "../model/checkpoint.h"
#include "../model/gpt.h"
#include "../model/train_step.h"
#include "../recompute/formulas.h"

struct Options {
    int layers = 48, hidden = 1600, heads = 25, seq = 1024, batch = 8, vocab = 50257, padded_vocab = 0;
    int warmup = 2, steps = 5, gemm_size = -1;
    float dropout = 0.1f, lr = 1e-4f;
    double peak = kH100PeakBf16;  // H100/H200 SXM dense bf16, datasheet (recompute/formulas.h)
    std::string dtype = "bf16", device = "auto", json, mpi = "auto", policies = "full,selective,none";
    Attention attention = Attention::Unfused;  // --attention: core attention's form for every policy
};

static void usage() {
    printf(
        "e2e_bench: whole-model training steps on random tokens, per recompute policy: tokens/s, MFU, HFU\n"
        "  --layers L (48) --hidden H (1600) --heads A (25) --seq S (1024) --vocab V (50257) --padded-vocab Vp\n"
        "  --batch B        sequences per step (8)\n"
        "  --warmup W       untimed steps per policy (2)     --steps N   timed steps per policy (5)\n"
        "  --policies LIST  comma-separated, run in this order (full,selective,none)\n"
        "  --dtype bf16|f32 (bf16)   --dropout P (0.1)   --lr LR (1e-4)\n"
        "  --attention unfused|flash  core attention for every policy (unfused)\n"
        "  --peak FLOPS     datasheet peak for MFU/HFU (989e12: H100/H200 dense bf16)\n"
        "  --gemm-size N    size of the N^3 GEMM that measures the attainable rate (8192 on GPU, 512 on CPU; 0: skip)\n"
        "  --device auto|cpu|cuda   --json FILE   --mpi auto|on|off\n");
}

static Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(); exit(0); }
        else if (bench_flag(argc, argv, i, "--layers", v)) o.layers = bench_int(v, "--layers", 1);
        else if (bench_flag(argc, argv, i, "--hidden", v)) o.hidden = bench_int(v, "--hidden", 1);
        else if (bench_flag(argc, argv, i, "--heads", v)) o.heads = bench_int(v, "--heads", 1);
        else if (bench_flag(argc, argv, i, "--seq", v)) o.seq = bench_int(v, "--seq", 1);
        else if (bench_flag(argc, argv, i, "--batch", v)) o.batch = bench_int(v, "--batch", 1);
        else if (bench_flag(argc, argv, i, "--vocab", v)) o.vocab = bench_int(v, "--vocab", 1);
        else if (bench_flag(argc, argv, i, "--padded-vocab", v)) o.padded_vocab = bench_int(v, "--padded-vocab", 1);
        else if (bench_flag(argc, argv, i, "--warmup", v)) o.warmup = bench_int(v, "--warmup", 0);
        else if (bench_flag(argc, argv, i, "--steps", v)) o.steps = bench_int(v, "--steps", 1);
        else if (bench_flag(argc, argv, i, "--gemm-size", v)) o.gemm_size = bench_int(v, "--gemm-size", 0);
        else if (bench_flag(argc, argv, i, "--dropout", v)) o.dropout = (float)bench_double(v, "--dropout");
        else if (bench_flag(argc, argv, i, "--lr", v)) o.lr = (float)bench_double(v, "--lr");
        else if (bench_flag(argc, argv, i, "--peak", v)) o.peak = bench_double(v, "--peak");
        else if (bench_flag(argc, argv, i, "--policies", v)) o.policies = v;
        else if (bench_flag(argc, argv, i, "--dtype", v)) o.dtype = v;
        else if (bench_flag(argc, argv, i, "--attention", v)) o.attention = bench_attention(v);
        else if (bench_flag(argc, argv, i, "--device", v)) o.device = v;
        else if (bench_flag(argc, argv, i, "--json", v)) o.json = v;
        else if (bench_flag(argc, argv, i, "--mpi", v)) o.mpi = v;
        else {
            fprintf(stderr, "error: unknown flag '%s' (--help lists them)\n", argv[i]);
            exit(2);
        }
    }
    bench_dtype(o.dtype);
    if (o.dropout < 0 || o.dropout >= 1) { fprintf(stderr, "error: --dropout must be in [0, 1)\n"); exit(2); }
    if (o.peak <= 0) { fprintf(stderr, "error: --peak must be positive\n"); exit(2); }
    return o;
}

static std::vector<Recompute> parse_policies(const std::string& list) {
    std::vector<Recompute> out;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
        Recompute rc;
        if (!parse_recompute(name.c_str(), &rc)) {
            fprintf(stderr, "error: --policies: unknown policy '%s' (none, selective, full)\n", name.c_str());
            exit(2);
        }
        out.push_back(rc);
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return out;
}

// ---- the attainable matmul rate: an n×n×n GEMM through the project's gemm() ----------------------------------
// Random operands (never zeros: zero operands make GEMMs run faster than real data), 3 warm-ups, median of 10; C = A·Bᵀ in the run's dtype.
static double measure_gemm_flops(Ctx& ctx, DType dt, int n) {
    if (n <= 0) return NAN;
    Tensor a = tensor_alloc(ctx.device, dt, (int64_t)n * n), b = tensor_alloc(ctx.device, dt, (int64_t)n * n);
    Tensor c = tensor_alloc(ctx.device, dt, (int64_t)n * n);
    bench_fill_normal(a, 3, 1, 0.f, 1.f);
    bench_fill_normal(b, 3, 2, 0.f, 1.f);
    BenchTimer timer(ctx, 2);
    std::vector<double> ms;
    const int warm = 3, reps = ctx.device == Device::CUDA ? 10 : 3;
    for (int i = 0; i < warm + reps; i++) {
        timer.mark(0);
        gemm(ctx, false, true, n, n, n, 1.f, GemmOperand{a.data, n}, GemmOperand{b.data, n}, 0.f, c.data, n, 0, dt, dt);
        timer.mark(1);
        double t = timer.ms(0, 1);
        if (i >= warm) ms.push_back(t);
    }
    ctx_sync(ctx);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    return 2.0 * n * (double)n * n / (median_of(ms) * 1e-3);
}

struct PolicyResult {
    Recompute policy = Recompute::None;
    std::string status = "not run";  // "ok", or why it was skipped
    std::vector<double> step_ms;
    double median_ms = NAN, tokens_per_s = NAN, model_flops = NAN, hw_flops = NAN;
    double mfu_peak = NAN, hfu_peak = NAN, mfu_gemm = NAN, hfu_gemm = NAN;
    double act_estimate_gb = NAN, act_peak_live_gb = NAN, act_peak_reserved_gb = NAN, device_used_gb = NAN;
    double first_loss = NAN, last_loss = NAN;
};

static void write_json(const Options& o, const std::string& dev_name, const GPTConfig& cfg, double gemm_rate,
                       double model_state_gb, const std::vector<PolicyResult>& res) {
    if (o.json.empty()) return;
    JsonOut j;
    j.open('{');
    j.kv("benchmark", "e2e_bench");
    j.kv("device", dev_name);
    j.kv("dtype", o.dtype);
    j.key("config");
    j.open('{');
    j.kv("layers", cfg.layers); j.kv("hidden", cfg.channels); j.kv("heads", cfg.heads); j.kv("seq", o.seq);
    j.kv("vocab", cfg.vocab); j.kv("padded_vocab", cfg.padded_vocab); j.kv("batch", o.batch);
    j.kv("params", (double)param_count(cfg)); j.kv("dropout", o.dropout); j.kv("attention", attention_name(o.attention));
    j.kv("warmup_steps", o.warmup); j.kv("timed_steps", o.steps);
    j.close('}');
    j.kv("peak_datasheet_flops", o.peak);
    j.kv("gemm_size", o.gemm_size);
    j.kv("gemm_measured_flops", gemm_rate);
    j.kv("model_state_gb", model_state_gb);
    j.key("policies");
    j.open('[');
    for (const PolicyResult& r : res) {
        j.open('{');
        j.kv("recompute", recompute_name(r.policy));
        j.kv("status", r.status);
        j.kv("step_ms", r.step_ms);
        j.kv("median_step_ms", r.median_ms);
        j.kv("tokens_per_s", r.tokens_per_s);
        j.kv("model_flops_per_step", r.model_flops);
        j.kv("hardware_flops_per_step", r.hw_flops);
        j.kv("mfu_vs_datasheet", r.mfu_peak);
        j.kv("hfu_vs_datasheet", r.hfu_peak);
        j.kv("mfu_vs_measured_gemm", r.mfu_gemm);
        j.kv("hfu_vs_measured_gemm", r.hfu_gemm);
        j.kv("activation_estimate_gb", r.act_estimate_gb);
        j.kv("activation_peak_live_gb", r.act_peak_live_gb);
        j.kv("activation_peak_reserved_gb", r.act_peak_reserved_gb);
        j.kv("device_used_gb", r.device_used_gb);
        j.kv("first_loss", r.first_loss);
        j.kv("last_loss", r.last_loss);
        j.close('}');
    }
    j.close(']');
    j.close('}');
    if (!j.write(o.json)) mm_fatal("could not write %s", o.json.c_str());
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file: a run killed by a timeout keeps its lines
    Options o = parse(argc, argv);
    std::vector<Recompute> policies = parse_policies(o.policies);
    bool mpi = bench_mpi_init(o.mpi, &argc, &argv);
    Device device = bench_device(o.device);
    DType dt = bench_dtype(o.dtype);
    if (o.gemm_size < 0) o.gemm_size = device == Device::CUDA ? 8192 : 512;

    GPTConfig cfg;
    cfg.layers = o.layers;
    cfg.heads = o.heads;
    cfg.channels = o.hidden;
    cfg.vocab = o.vocab;
    cfg.padded_vocab = o.padded_vocab ? o.padded_vocab : padded_vocab_for(o.vocab);
    cfg.max_seq = o.seq;
    std::string bad = validate_config(cfg);
    if (!bad.empty()) { fprintf(stderr, "error: %s\n", bad.c_str()); exit(2); }

    Ctx ctx = ctx_create(device, 0);
    ProcessGrid grid = bench_single_rank_grid(mpi, ctx);  // tp = dp = 1: no collective does anything
    const std::string dev_name = bench_device_name(device);
    const double tokens = (double)o.batch * o.seq;
    printf("e2e_bench: GPT training steps on random tokens, per recompute policy (paper Table 5 style)\n");
    printf("device: %s | dtype %s | dropout %.2f | attention %s | %d warm-up + %d timed steps per policy | MPI %s\n",
           dev_name.c_str(), dtype_name(dt), o.dropout, attention_name(o.attention), o.warmup, o.steps,
           mpi ? "on" : "off (one process, no MPI calls)");
    printf("model : L=%d h=%d a=%d s=%d V=%d (Vp=%d), %.3g parameters; %d sequences x %d tokens per step; tp=1, one device\n",
           cfg.layers, cfg.channels, cfg.heads, o.seq, cfg.vocab, cfg.padded_vocab, (double)param_count(cfg), o.batch, o.seq);

    // ---- the attainable matmul rate ---------------------------------------------------------------------------
    double gemm_rate = measure_gemm_flops(ctx, dt, o.gemm_size);
    if (o.gemm_size > 0)
        printf("gemm  : %d^3 %s GEMM through gemm(): %.4g TFLOP/s (median of timed runs)\n", o.gemm_size, dtype_name(dt),
               gemm_rate / 1e12);

    // ---- the model (weights, gradients, AdamW state: allocated once, shared by every policy) --------------
    double t0 = wall_s();
    ActivationAllocator first_alloc(device);
    GPT m;
    gpt_create(m, cfg, grid, ctx, first_alloc, dt, policies[0], o.dropout, 1337);
    m.attention = o.attention;
    gpt_init_random(m, 1337);
    const double state_gb = (double)m.n_params * (4 + 4 + 4 + 4 + (dt == DType::F32 ? 0 : dtype_size(dt))) / 1e9;
    printf("init  : %.1f s; weights + gradients + AdamW state %.3g GB", wall_s() - t0, state_gb);
    if (device == Device::CUDA) printf("; device memory in use %.2f GB of %.2f GB", device_used_gb(device), device_total_gb(device));
    printf("\n");

    // Synthetic data: uniform random tokens (host [B, S], as the loader gives them); targets likewise.
    std::vector<int32_t> inputs((size_t)o.batch * o.seq), targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); i++) {
        inputs[i] = (int32_t)(dropout_random(99, 1, i) % (uint32_t)cfg.vocab);
        targets[i] = (int32_t)(dropout_random(99, 2, i) % (uint32_t)cfg.vocab);
    }

    OptimConfig oc;
    std::vector<PolicyResult> results;
    for (Recompute rc : policies) {
        PolicyResult r;
        r.policy = rc;
        // What the paper's formulas say the activations need (§4.3: layers + outside; plus one layer's
        // recomputed tensors during backward), against the free device memory.
        const ModelFormulaInput fi = formula_input(o.seq, o.batch, cfg.channels, cfg.heads, cfg.layers, cfg.padded_vocab,
                                                   /*tp=*/1, /*sp=*/false, rc, (int)dtype_size(dt), o.attention);
        r.act_estimate_gb = (first_stage_activation_bytes(fi) + recompute_transient_bytes(fi.layer())) / 1e9;
        double free_gb = device_free_gb(device);
        if (device == Device::CUDA && r.act_estimate_gb > 0.97 * free_gb) {
            char why[256];
            snprintf(why, sizeof why, "skipped: the paper's formulas need %.1f GB of activations, only %.1f GB free (lower --batch)",
                     r.act_estimate_gb, free_gb);
            r.status = why;
            printf("policy %-9s: %s\n", recompute_name(rc), why);
            results.push_back(r);
            write_json(o, dev_name, cfg, gemm_rate, state_gb, results);
            continue;
        }
        printf("policy %-9s: running (activations by the paper's formulas %.3g GB%s)\n", recompute_name(rc),
               r.act_estimate_gb, device == Device::CUDA ? "; an 'out of memory' error below means it did not fit" : "");
        fflush(stdout);

        ActivationAllocator alloc(device);  // this policy's own: its peaks are this policy's
        m.alloc = &alloc;
        m.recompute = rc;
        for (int step = 1; step <= o.warmup + o.steps; step++) {
            double s0 = wall_s();
            StepStats st = train_step(m, inputs.data(), targets.data(), o.batch, o.seq, oc, step, o.lr);
            ctx_sync(ctx);
            double ms = (wall_s() - s0) * 1e3;
            if (!std::isfinite(st.loss)) mm_fatal("policy %s, step %d: the loss is not finite", recompute_name(rc), step);
            if (step == 1) r.first_loss = st.loss;
            r.last_loss = st.loss;
            if (step > o.warmup) r.step_ms.push_back(ms);
        }
        r.median_ms = median_of(r.step_ms);
        const double sec = r.median_ms * 1e-3;
        r.tokens_per_s = tokens / sec;
        r.model_flops = model_flops(o.batch, cfg.layers, o.seq, cfg.channels, cfg.padded_vocab);  // Eq. 7
        // Flash attention's backward recomputes QKᵀ and the softmax, what selective recomputation reruns: its
        // hardware FLOPs are counted as Eq. 8's unless full recompute reruns the whole layer.
        const Recompute hw_rc = o.attention == Attention::Flash && rc == Recompute::None ? Recompute::Selective : rc;
        r.hw_flops = hardware_flops(hw_rc, o.batch, cfg.layers, o.seq, cfg.channels, cfg.padded_vocab);  // Eq. 8 / full
        if (device == Device::CUDA) {
            r.mfu_peak = flops_utilization(r.model_flops, sec, o.peak, 1);
            r.hfu_peak = flops_utilization(r.hw_flops, sec, o.peak, 1);
        }
        r.mfu_gemm = flops_utilization(r.model_flops, sec, gemm_rate, 1);
        r.hfu_gemm = flops_utilization(r.hw_flops, sec, gemm_rate, 1);
        r.act_peak_live_gb = alloc.peak_live_bytes() / 1e9;
        r.act_peak_reserved_gb = alloc.peak_reserved_bytes() / 1e9;
        r.device_used_gb = device_used_gb(device);  // while this policy's allocator still holds its blocks
        r.status = "ok";
        printf("policy %-9s: %.1f ms/step, %.0f tokens/s, loss %.3f -> %.3f\n", recompute_name(rc), r.median_ms,
               r.tokens_per_s, r.first_loss, r.last_loss);
        results.push_back(r);
        ctx_sync(ctx);
        m.alloc = &first_alloc;  // `alloc` goes away with its blocks; nothing of the model lives in it
        write_json(o, dev_name, cfg, gemm_rate, state_gb, results);
    }

    // ---- summary -----------------------------------------------------------------------------------------------
    printf("\n%-10s %10s %11s %8s %8s %9s %9s %9s %9s %9s\n", "recompute", "ms/step", "tokens/s", "MFU", "HFU", "MFU", "HFU",
           "act GB", "act GB", "device");
    char peak_label[32];
    snprintf(peak_label, sizeof peak_label, "%.0fT", o.peak / 1e12);
    printf("%-10s %10s %11s %8s %8s %9s %9s %9s %9s %9s\n", "", "(median)", "", peak_label, peak_label, "gemm", "gemm",
           "formula", "peak", "used GB");
    for (const PolicyResult& r : results) {
        if (r.status != "ok") {
            printf("%-10s %s\n", recompute_name(r.policy), r.status.c_str());
            continue;
        }
        auto pct = [](double x) {
            static char b[4][16];
            static int k = 0;
            char* s = b[k++ % 4];
            if (std::isfinite(x)) snprintf(s, 16, "%.1f%%", 100 * x);
            else snprintf(s, 16, "n/a");
            return s;
        };
        printf("%-10s %10.1f %11.0f %8s %8s %9s %9s %9.3g %9.3g %9.3g\n", recompute_name(r.policy), r.median_ms,
               r.tokens_per_s, pct(r.mfu_peak), pct(r.hfu_peak), pct(r.mfu_gemm), pct(r.hfu_gemm), r.act_estimate_gb,
               r.act_peak_reserved_gb, r.device_used_gb);
    }
    // Table 5's "throughput gain" column: selective (+ SP in the paper) over full recompute.
    const PolicyResult *full = nullptr, *sel = nullptr;
    for (const PolicyResult& r : results) {
        if (r.status != "ok") continue;
        if (r.policy == Recompute::Full) full = &r;
        if (r.policy == Recompute::Selective) sel = &r;
    }
    if (full && sel)
        printf("selective vs full recompute: %.1f%% more throughput (paper Table 5, 22B-1T with SP: 29-32%%)\n",
               100.0 * (full->median_ms / sel->median_ms - 1));
    if (o.gemm_size > 0)
        printf("peaks: datasheet %.0f TFLOP/s%s; measured %d^3 GEMM %.4g TFLOP/s\n", o.peak / 1e12,
               device == Device::CUDA ? "" : " (not applicable on CPU)", o.gemm_size, gemm_rate / 1e12);
    if (!o.json.empty()) printf("wrote %s\n", o.json.c_str());

    m.alloc = &first_alloc;
    gpt_release_activations(m);
    gpt_destroy(m);
    bench_grid_destroy(mpi, grid);
    ctx_destroy(ctx);
    bench_mpi_finalize(mpi);
    return 0;
}
