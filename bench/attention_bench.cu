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
// No rate without a check. Before a path is timed at a sequence length, one call of it (forward and backward,
// at the timed shape, with the timed dropout) is checked: the last sequence and the last head of its out, lse
// and dqkv against a second computation of that slice. On a GPU that is the CPU path of the same kind
// (flash against layers/flash_attention.cu's CPU path, unfused against layers/attention.cu's), on the CPU the
// float64 reference (layers/reference/flash_attention.h; the CPU path is then the timed code itself). The slice
// keeps its global batch and head coordinates (AttnShape's offsets), so its dropout bits are the timed call's.
// A path that fails its check gets "WRONG" in place of its rate, and the program exits 1 after the table.
//
//   build/attention_bench                              # bf16, 16 heads of 128, 16384 tokens, s 1024..8192
//   build/attention_bench --device cpu --heads 2 --head-dim 16 --tokens 256 --seq 64,128 --reps 1 --warmup 0
#include "bench_common.h"

#include <sstream>
#include "../layers/attention.h"
#include "../layers/flash_attention.h"
#include "../layers/reference/flash_attention.h"

struct Options {
    int heads = 16, head_dim = 128, tokens = 16384, reps = 5, warmup = 2;
    std::vector<int> seqs = {1024, 2048, 4096, 8192};
    float dropout = 0.f;
    std::string dtype = "bf16", device = "auto", paths = "flash,unfused";
    std::string plant_zeros;  // a path whose checked outputs are overwritten with zeros (the negative control)
};

static void usage() {
    printf(
        "attention_bench: core attention alone, flash against unfused, forward and backward: ms and TFLOP/s\n"
        "  --heads NH (16)  --head-dim HD (128)  --tokens T: sequences x length per call (16384)\n"
        "  --seq LIST       comma-separated sequence lengths, each dividing --tokens (1024,2048,4096,8192)\n"
        "  --paths LIST     flash,unfused (both)   --dropout P (0)   --dtype bf16|f32 (bf16)\n"
        "  --reps N (5)  --warmup W (2)  --device auto|cpu|cuda\n"
        "  --plant-zeros flash|unfused  the negative control of the check: that path's checked outputs are\n"
        "                overwritten with zeros (a kernel that writes nothing); the path must get no rate\n"
        "Each path is checked at each length before it is timed; a wrong one prints WRONG and the exit is 1.\n");
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
        else if (bench_flag(argc, argv, i, "--plant-zeros", v)) o.plant_zeros = v;
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
    if (!o.plant_zeros.empty() && o.plant_zeros != "flash" && o.plant_zeros != "unfused") {
        fprintf(stderr, "error: --plant-zeros expects flash or unfused, got '%s'\n", o.plant_zeros.c_str());
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

// One path's buffers at one shape, and its forward and backward as the layer runs them. Flash: out, lse and
// dqkv. Unfused: the probabilities, mask and dropped probabilities ([B, NH, S, S]), then ·V; the backward from
// them with its s×s scratch.
struct PathRun {
    bool flash;
    Tensor out, lse, dqkv, probs, mask, pd, scratch;
    PathRun(Device d, DType dt, const AttnShape& sh, bool is_flash) : flash(is_flash) {
        const int64_t rows = (int64_t)sh.S * sh.B, C = (int64_t)sh.NH * sh.HD;
        out = tensor_alloc(d, dt, rows * C, "attention out");
        dqkv = tensor_alloc(d, dt, rows * 3 * C, "attention dqkv");
        if (flash) {
            lse = tensor_alloc(d, DType::F32, (int64_t)sh.B * sh.NH * sh.S, "flash lse");
        } else {
            const int64_t SS = (int64_t)sh.B * sh.NH * sh.S * sh.S;
            probs = tensor_alloc(d, dt, SS, "attention probs");
            mask = tensor_alloc(d, DType::U8, SS, "attention mask");
            pd = tensor_alloc(d, dt, SS, "attention dropped probs");
            scratch = tensor_alloc(d, dt, SS, "attention backward scratch");
        }
    }
    void forward(Ctx& ctx, Tensor qkv, const AttnShape& sh, float p) {
        if (flash) {
            flash_attention_forward(ctx, out, lse, qkv, sh, p, 7, 0);
        } else {
            attention_probs_forward(ctx, probs, mask, pd, qkv, sh, p, 7, 0);
            attention_context_forward(ctx, out, pd, qkv, sh);
        }
    }
    void backward(Ctx& ctx, Tensor qkv, Tensor dout, const AttnShape& sh, float p) {
        if (flash) flash_attention_backward(ctx, dqkv, dout, out, lse, qkv, sh, p, 7, 0);
        else attention_backward(ctx, dqkv, dout, qkv, probs, mask, pd, scratch, sh, p);
    }
    PathRun(const PathRun&) = delete;
    PathRun& operator=(const PathRun&) = delete;
    ~PathRun() {
        for (Tensor* x : {&out, &lse, &dqkv, &probs, &mask, &pd, &scratch})
            if (x->data) tensor_free(*x);
    }
};

// ---- the check --------------------------------------------------------------------------------------------------
// One (sequence, head) of the tensors of a call: Q, K, V and their gradients [S, 3·HD], out and dout [S, HD],
// lse [S] (rows of sequence b, columns of head n; lse of (b, n)).
struct Slice {
    std::vector<float> qkv, dout, out, lse, dqkv;
};
static std::vector<float> rows_of(const std::vector<float>& t, const AttnShape& sh, int parts, int b, int n) {
    const int64_t C = (int64_t)sh.NH * sh.HD, W = parts * C;
    std::vector<float> r((size_t)sh.S * parts * sh.HD);
    for (int64_t s = 0; s < sh.S; s++)
        for (int part = 0; part < parts; part++)
            for (int d = 0; d < sh.HD; d++)
                r[((size_t)s * parts + part) * sh.HD + d] = t[(size_t)(s * sh.B + b) * W + part * C + n * sh.HD + d];
    return r;
}
static double norm_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;  // an element never written (or an overflow) fails
        const double d = (double)got[i] - want[i];
        num += d * d, den += (double)want[i] * want[i];
    }
    return got.size() != want.size() ? INFINITY : std::sqrt(num / (den > 0 ? den : 1e-300));
}

// The slice again, computed apart: on the CPU path of the same kind (a GPU run) or by the float64 reference (a
// CPU run), at the slice's own shape with the timed call's global coordinates.
static Slice expected_slice(Ctx& cpu, DType dt, bool flash, const Slice& in, const AttnShape& full, int b, int n,
                            float p, bool by_reference) {
    AttnShape sh = full;
    sh.B = 1, sh.NH = 1, sh.b_offset = full.b_offset + b, sh.head_offset = full.head_offset + n;
    Slice e;
    if (by_reference) {  // the plain math in double (the unfused path's out and dqkv are the same function)
        std::vector<double> out((size_t)sh.S * sh.HD), lse(sh.S), dqkv(in.qkv.size());
        ref_flash_attention_forward(out.data(), lse.data(), in.qkv.data(), sh, p, 7, 0);
        ref_flash_attention_backward(dqkv.data(), in.dout.data(), out.data(), lse.data(), in.qkv.data(), sh, p, 7, 0);
        e.out.assign(out.begin(), out.end()), e.lse.assign(lse.begin(), lse.end()), e.dqkv.assign(dqkv.begin(), dqkv.end());
        return e;
    }
    Tensor qkv = tensor_alloc(Device::CPU, dt, (int64_t)in.qkv.size()), dout = tensor_alloc(Device::CPU, dt, (int64_t)in.dout.size());
    tensor_from_host_f32(qkv, in.qkv.data());
    tensor_from_host_f32(dout, in.dout.data());
    PathRun run(Device::CPU, dt, sh, flash);
    run.forward(cpu, qkv, sh, p);
    run.backward(cpu, qkv, dout, sh, p);
    e.out = tensor_to_host_f32(run.out), e.dqkv = tensor_to_host_f32(run.dqkv);
    if (flash) e.lse = tensor_to_host_f32(run.lse);
    tensor_free(qkv);
    tensor_free(dout);
    return e;
}

// One checked call of a path at the timed shape: true when its last (sequence, head) slice matches. Tolerances
// (norm-relative, ‖got − want‖/‖want‖): bf16 flash those of test_flash_attention --gpu-tc (out 6e-3, dqkv 8e-3:
// P and dS enter the tensor-core products as bf16), bf16 unfused those of the GPU op tests (2e-2: the s×s
// tensors are stored in bf16), f32 1e-4; the lse within 1e-5·(1 + rms). A wrong fragment layout, tile index or
// dropout bit moves the slice by O(1).
static bool check_path(Ctx& ctx, Ctx& cpu, const Options& o, DType dt, const AttnShape& sh, bool flash,
                       PathRun& run, Tensor qkv, Tensor dout, const std::vector<float>& qkv_h,
                       const std::vector<float>& dout_h) {
    run.forward(ctx, qkv, sh, o.dropout);
    run.backward(ctx, qkv, dout, sh, o.dropout);
    const char* name = flash ? "flash" : "unfused";
    if (o.plant_zeros == name) {  // the negative control: what a kernel that wrote nothing would leave
        tensor_fill_f32(run.out, 0.f);
        tensor_fill_f32(run.dqkv, 0.f);
    }
    const int b = sh.B - 1, n = sh.NH - 1;
    Slice got, in;
    in.qkv = rows_of(qkv_h, sh, 3, b, n), in.dout = rows_of(dout_h, sh, 1, b, n);
    got.out = rows_of(tensor_to_host_f32(run.out), sh, 1, b, n);
    got.dqkv = rows_of(tensor_to_host_f32(run.dqkv), sh, 3, b, n);
    const bool by_reference = ctx.device == Device::CPU;
    const Slice want = expected_slice(cpu, dt, flash, in, sh, b, n, o.dropout, by_reference);
    const bool bf16 = dt == DType::BF16;
    const double out_tol = !bf16 ? 1e-4 : flash ? 6e-3 : 2e-2, dqkv_tol = !bf16 ? 1e-4 : flash ? 8e-3 : 2e-2;
    const double e_out = norm_rel_err(got.out, want.out), e_dqkv = norm_rel_err(got.dqkv, want.dqkv);
    double e_lse = 0, lse_tol = 0;
    if (flash) {
        const std::vector<float> lse = tensor_to_host_f32(run.lse);
        double rms = 0;
        for (int s = 0; s < sh.S; s++) {
            const float g = lse[((size_t)b * sh.NH + n) * sh.S + s];
            e_lse = std::isfinite(g) ? std::fmax(e_lse, std::fabs((double)g - want.lse[s])) : INFINITY;
            rms += (double)want.lse[s] * want.lse[s];
        }
        lse_tol = 1e-5 * (1 + std::sqrt(rms / sh.S));
    }
    const bool ok = e_out < out_tol && e_dqkv < dqkv_tol && e_lse <= lse_tol;
    printf("check s %d, %s: sequence %d, head %d of the timed call against %s: out %.2e (< %.0e), dqkv %.2e (< %.0e)",
           sh.S, name, b, n, by_reference ? "the float64 reference" : "the CPU path", e_out, out_tol, e_dqkv, dqkv_tol);
    if (flash) printf(", lse %.2e (<= %.1e)", e_lse, lse_tol);
    printf(": %s\n", ok ? "ok" : "WRONG");
    fflush(stdout);
    return ok;
}

struct PathTimes {
    double fwd_ms = NAN, bwd_ms = NAN;
    bool checked = false, wrong = false;
};

// A path at one shape: checked first, timed only when the check passed.
static PathTimes check_and_time(Ctx& ctx, Ctx& cpu, const Options& o, DType dt, const AttnShape& sh, bool flash,
                                Tensor qkv, Tensor dout, const std::vector<float>& qkv_h,
                                const std::vector<float>& dout_h) {
    PathRun run(ctx.device, dt, sh, flash);
    PathTimes t;
    t.checked = true;
    t.wrong = !check_path(ctx, cpu, o, dt, sh, flash, run, qkv, dout, qkv_h, dout_h);
    if (t.wrong) return t;
    t.fwd_ms = median_ms(ctx, o, [&] { run.forward(ctx, qkv, sh, o.dropout); });
    t.bwd_ms = median_ms(ctx, o, [&] { run.backward(ctx, qkv, dout, sh, o.dropout); });
    return t;
}

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const Device device = bench_device(o.device);
    const DType dt = bench_dtype(o.dtype);
    Ctx ctx = ctx_create(device, 0);
    Ctx cpu = device == Device::CPU ? ctx : ctx_create(Device::CPU);
    printf("attention_bench: %s, %s, %d heads of %d, %d tokens per call, causal, dropout %g, median of %d (after %d)\n",
           bench_device_name(device).c_str(), dtype_name(dt), o.heads, o.head_dim, o.tokens, o.dropout, o.reps,
           o.warmup);
    printf("each path checked before it is timed: the last sequence and head of the timed call, against %s\n",
           device == Device::CPU ? "the float64 reference" : "the CPU path");
    const bool flash = o.paths.find("flash") != std::string::npos;
    const bool unfused = o.paths.find("unfused") != std::string::npos;
    std::vector<std::string> rows;
    int wrong = 0;
    for (int S : o.seqs) {
        AttnShape sh;
        sh.S = S, sh.B = o.tokens / S, sh.NH = o.heads, sh.HD = o.head_dim;
        sh.B_total = sh.B, sh.NH_total = sh.NH;
        const int64_t rows_n = (int64_t)S * sh.B, C = (int64_t)sh.NH * sh.HD;
        Tensor qkv = tensor_alloc(device, dt, rows_n * 3 * C), dout = tensor_alloc(device, dt, rows_n * C);
        bench_fill_normal(qkv, 11, 1, 0.f, 1.f);
        bench_fill_normal(dout, 11, 2, 0.f, 1.f);
        const std::vector<float> qkv_h = tensor_to_host_f32(qkv), dout_h = tensor_to_host_f32(dout);  // as stored
        const double fwd_flops = 2.0 * sh.B * sh.NH * (double)S * S * sh.HD, bwd_flops = 2.5 * fwd_flops;
        PathTimes f, u;
        if (flash) f = check_and_time(ctx, cpu, o, dt, sh, true, qkv, dout, qkv_h, dout_h);
        if (unfused) u = check_and_time(ctx, cpu, o, dt, sh, false, qkv, dout, qkv_h, dout_h);
        wrong += f.wrong + u.wrong;
        auto cell = [](const PathTimes& t, double ms, double flops) {
            char s[40];
            if (t.wrong) snprintf(s, sizeof s, "WRONG (no rate)");
            else if (!t.checked || std::isnan(ms)) snprintf(s, sizeof s, "-");
            else snprintf(s, sizeof s, "%9.3f ms %7.1f TF/s", ms, flops / (ms * 1e-3) / 1e12);
            return std::string(s);
        };
        char row[256];
        snprintf(row, sizeof row, "%7d %6d | %-25s | %-25s | %-25s | %-25s", S, sh.B,
                 cell(f, f.fwd_ms, fwd_flops).c_str(), cell(u, u.fwd_ms, fwd_flops).c_str(),
                 cell(f, f.bwd_ms, bwd_flops).c_str(), cell(u, u.bwd_ms, bwd_flops).c_str());
        rows.push_back(row);
        tensor_free(qkv);
        tensor_free(dout);
    }
    // The table last, after every check line, so that a reader (and bench/gpu_suite.sh's summary) takes it whole.
    printf("TFLOP/s of the useful work: forward 2*B*NH*S^2*HD (the causal half of QK^T and P.V), backward 2.5x\n");
    printf("%7s %6s | %-25s | %-25s | %-25s | %-25s\n", "seq", "batch", "flash forward", "unfused forward",
           "flash backward", "unfused backward");
    for (const std::string& r : rows) printf("%s\n", r.c_str());
    if (wrong)
        printf("WRONG: %d checked call(s) did not match (the check lines above); their rates are not printed\n", wrong);
    else
        printf("checked: every rate above is of a path whose timed call matched %s\n",
               device == Device::CPU ? "the float64 reference" : "the CPU path");
    if (device != Device::CPU) ctx_destroy(cpu);
    ctx_destroy(ctx);
    return wrong ? 1 : 0;
}
