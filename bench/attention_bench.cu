// attention_bench.cu — core attention alone, on one device: flash attention (layers/flash_attention.cu; in bf16 on
// a GPU the tensor-core kernels of layers/flash_attention_tc.cu) against the unfused path (layers/attention.cu:
// QKᵀ, softmax and ·V with the s×s tensors in memory), forward and backward, at several sequence lengths with
// the tokens per call fixed (the batch shrinks as s grows). Prints the median ms of each pass and its TFLOP/s.
//
// FLOPs (the FlashAttention papers' count, the same for both paths so that TFLOP/s compares times): the
// causal half of the square, forward 4·B·NH·S²·HD/2 (QKᵀ and P·V), backward 2.5 times that (QKᵀ again, dV, dP,
// dQ, dK). The tensor-core backward actually runs 7 products, not 5 (flash_attention_tc.cu: dQ has its own
// kernel): its rate here is the useful work's.
//
//   build/attention_bench                              # bf16, 16 heads of 128, 16384 tokens, s 1024..8192
//   build/attention_bench --device cpu --heads 2 --head-dim 16 --tokens 256 --seq 64,128 --reps 1 --warmup 0
#include "bench_common.h"

#include <sstream>
#include "../layers/attention.h"
#include "../layers/flash_attention.h"

struct Options {
    int heads = 16, head_dim = 128, tokens = 16384, reps = 5, warmup = 2;
    std::vector<int> seqs = {1024, 2048, 4096, 8192};
    float dropout = 0.f;
    std::string dtype = "bf16", device = "auto", paths = "flash,unfused";
};

static void usage() {
    printf(
        "attention_bench: core attention alone, flash against unfused, forward and backward: ms and TFLOP/s\n"
        "  --heads NH (16)  --head-dim HD (128)  --tokens T: sequences x length per call (16384)\n"
        "  --seq LIST       comma-separated sequence lengths, each dividing --tokens (1024,2048,4096,8192)\n"
        "  --paths LIST     flash,unfused (both)   --dropout P (0)   --dtype bf16|f32 (bf16)\n"
        "  --reps N (5)  --warmup W (2)  --device auto|cpu|cuda\n");
}

static std::vector<int> parse_list(const std::string& v, const char* flag) {
    std::vector<int> out;
    std::stringstream ss(v);
    for (std::string x; std::getline(ss, x, ',');) out.push_back(bench_int(x, flag, 1));
    if (out.empty()) {
        fprintf(stderr, "error: %s expects a comma-separated list of integers\n", flag);
        exit(2);
    }
    return out;
}

static Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(); exit(0); }
        else if (bench_flag(argc, argv, i, "--heads", v)) o.heads = bench_int(v, "--heads", 1);
        else if (bench_flag(argc, argv, i, "--head-dim", v)) o.head_dim = bench_int(v, "--head-dim", 1);
        else if (bench_flag(argc, argv, i, "--tokens", v)) o.tokens = bench_int(v, "--tokens", 1);
        else if (bench_flag(argc, argv, i, "--seq", v)) o.seqs = parse_list(v, "--seq");
        else if (bench_flag(argc, argv, i, "--paths", v)) o.paths = v;
        else if (bench_flag(argc, argv, i, "--dropout", v)) o.dropout = (float)bench_double(v, "--dropout");
        else if (bench_flag(argc, argv, i, "--dtype", v)) o.dtype = v;
        else if (bench_flag(argc, argv, i, "--reps", v)) o.reps = bench_int(v, "--reps", 1);
        else if (bench_flag(argc, argv, i, "--warmup", v)) o.warmup = bench_int(v, "--warmup", 0);
        else if (bench_flag(argc, argv, i, "--device", v)) o.device = v;
        else {
            fprintf(stderr, "error: unknown flag '%s' (--help lists them)\n", argv[i]);
            exit(2);
        }
    }
    for (int s : o.seqs)
        if (o.tokens % s) {
            fprintf(stderr, "error: --seq %d does not divide --tokens %d\n", s, o.tokens);
            exit(2);
        }
    if (o.paths != "flash,unfused" && o.paths != "flash" && o.paths != "unfused") {
        fprintf(stderr, "error: --paths expects flash, unfused or flash,unfused, got '%s'\n", o.paths.c_str());
        exit(2);
    }
    if (!(o.dropout >= 0.f && o.dropout < 1.f)) {
        fprintf(stderr, "error: --dropout expects a probability in [0, 1), got %g\n", o.dropout);
        exit(2);
    }
    return o;
}

// The median ms of `pass` over reps runs, after warmup runs (bench_common.h's timer: GPU time on a GPU).
template <class Pass>
static double median_ms(Ctx& ctx, const Options& o, Pass&& pass) {
    for (int i = 0; i < o.warmup; i++) pass();
    std::vector<double> t;
    BenchTimer timer(ctx, 2);
    for (int i = 0; i < o.reps; i++) {
        timer.mark(0);
        pass();
        timer.mark(1);
        t.push_back(timer.ms(0, 1));
    }
    return median_of(t);
}

struct PathTimes {
    double fwd_ms = NAN, bwd_ms = NAN;
};

static PathTimes time_flash(Ctx& ctx, const Options& o, DType dt, const AttnShape& sh, Tensor qkv, Tensor dout) {
    const int64_t rows = (int64_t)sh.S * sh.B, C = (int64_t)sh.NH * sh.HD;
    Tensor out = tensor_alloc(ctx.device, dt, rows * C);
    Tensor lse = tensor_alloc(ctx.device, DType::F32, (int64_t)sh.B * sh.NH * sh.S);
    Tensor dqkv = tensor_alloc(ctx.device, dt, qkv.n);
    PathTimes t;
    t.fwd_ms = median_ms(ctx, o, [&] { flash_attention_forward(ctx, out, lse, qkv, sh, o.dropout, 7, 0); });
    t.bwd_ms =
        median_ms(ctx, o, [&] { flash_attention_backward(ctx, dqkv, dout, out, lse, qkv, sh, o.dropout, 7, 0); });
    for (Tensor* x : {&out, &lse, &dqkv}) tensor_free(*x);
    return t;
}

// The unfused path as the layer runs it: probabilities, mask and dropped probabilities ([B, NH, S, S]), then ·V;
// the backward from them with its s×s scratch.
static PathTimes time_unfused(Ctx& ctx, const Options& o, DType dt, const AttnShape& sh, Tensor qkv, Tensor dout) {
    const int64_t rows = (int64_t)sh.S * sh.B, C = (int64_t)sh.NH * sh.HD;
    const int64_t SS = (int64_t)sh.B * sh.NH * sh.S * sh.S;
    Tensor probs = tensor_alloc(ctx.device, dt, SS), mask = tensor_alloc(ctx.device, DType::U8, SS);
    Tensor pd = tensor_alloc(ctx.device, dt, SS), scratch = tensor_alloc(ctx.device, dt, SS);
    Tensor out = tensor_alloc(ctx.device, dt, rows * C), dqkv = tensor_alloc(ctx.device, dt, qkv.n);
    PathTimes t;
    t.fwd_ms = median_ms(ctx, o, [&] {
        attention_probs_forward(ctx, probs, mask, pd, qkv, sh, o.dropout, 7, 0);
        attention_context_forward(ctx, out, pd, qkv, sh);
    });
    t.bwd_ms =
        median_ms(ctx, o, [&] { attention_backward(ctx, dqkv, dout, qkv, probs, mask, pd, scratch, sh, o.dropout); });
    for (Tensor* x : {&probs, &mask, &pd, &scratch, &out, &dqkv}) tensor_free(*x);
    return t;
}

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const Device device = bench_device(o.device);
    const DType dt = bench_dtype(o.dtype);
    Ctx ctx = ctx_create(device, 0);
    printf("attention_bench: %s, %s, %d heads of %d, %d tokens per call, causal, dropout %g, median of %d (after %d)\n",
           bench_device_name(device).c_str(), dtype_name(dt), o.heads, o.head_dim, o.tokens, o.dropout, o.reps,
           o.warmup);
    printf("TFLOP/s of the useful work: forward 2*B*NH*S^2*HD (the causal half of QK^T and P.V), backward 2.5x\n");
    printf("%7s %6s | %-25s | %-25s | %-25s | %-25s\n", "seq", "batch", "flash forward", "unfused forward",
           "flash backward", "unfused backward");
    const bool flash = o.paths.find("flash") != std::string::npos;
    const bool unfused = o.paths.find("unfused") != std::string::npos;
    for (int S : o.seqs) {
        AttnShape sh;
        sh.S = S, sh.B = o.tokens / S, sh.NH = o.heads, sh.HD = o.head_dim;
        sh.B_total = sh.B, sh.NH_total = sh.NH;
        const int64_t rows = (int64_t)S * sh.B, C = (int64_t)sh.NH * sh.HD;
        Tensor qkv = tensor_alloc(device, dt, rows * 3 * C), dout = tensor_alloc(device, dt, rows * C);
        bench_fill_normal(qkv, 11, 1, 0.f, 1.f);
        bench_fill_normal(dout, 11, 2, 0.f, 1.f);
        const double fwd_flops = 2.0 * sh.B * sh.NH * (double)S * S * sh.HD, bwd_flops = 2.5 * fwd_flops;
        PathTimes f, u;
        if (flash) f = time_flash(ctx, o, dt, sh, qkv, dout);
        if (unfused) u = time_unfused(ctx, o, dt, sh, qkv, dout);
        auto cell = [](double ms, double flops) {
            char s[32];
            if (std::isnan(ms)) snprintf(s, sizeof s, "-");
            else snprintf(s, sizeof s, "%9.3f ms %7.1f TF/s", ms, flops / (ms * 1e-3) / 1e12);
            return std::string(s);
        };
        printf("%7d %6d | %-25s | %-25s | %-25s | %-25s\n", S, sh.B, cell(f.fwd_ms, fwd_flops).c_str(),
               cell(u.fwd_ms, fwd_flops).c_str(), cell(f.bwd_ms, bwd_flops).c_str(), cell(u.bwd_ms, bwd_flops).c_str());
        fflush(stdout);
        tensor_free(qkv);
        tensor_free(dout);
    }
    ctx_destroy(ctx);
    return 0;
}
