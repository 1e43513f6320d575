// layer_bench.cu — the paper's Table 4 on one device: forward and backward time of ONE transformer layer of
// the 22B model (h = 6144, a = 64, s = 2048, micro-batch b = 4, t = 8), under the five settings of the table:
// baseline (no recompute), sequence parallel, full recompute, selective recompute, selective + SP.
//
// What runs. The real layer code: layer_forward / layer_backward (model/transformer_layer.cu) with the
// recompute policies of recompute/recompute.cu, on the shapes ONE of the paper's 8 tensor-parallel ranks
// sees: 64/8 = 8 local heads of head dim 96 (C_loc = 768), MLP width F_loc = 4·6144/8 = 3072, the full
// hidden size C = 6144 for the replicated parts (layer norms, residual stream, dropouts), all s·b = 8192
// rows inside the tensor-parallel regions.
//
// What does not run. There is one GPU, so there is no tensor-parallel group: the Region's tp Comm has one
// rank and every collective is a no-op (parallel/comm.cu). The times below contain NO communication, while
// the paper's contain the 2 + 2 all-reduces per layer (or SP's all-gathers and reduce-scatters) over
// NVLink. Both the baseline and every other row lack them, so the overheads compare like with like, but the
// absolute times are compute only.
//
// Sequence parallelism (paper §4.2.2) makes the layer norms, dropouts and residual adds run on the rank's
// s/t shard of rows; g / ḡ (all-gather / reduce-scatter) connect the shards to the tensor-parallel regions.
// The layer code cannot run S_loc = S/t rows on a ONE-rank group: comm.cu checks that a gathered tensor is
// exactly group-size × its shard. Two emulations, both reported:
//  1. "fake-comm" (measured): the layer runs its real SP path with a communicator that SAYS it has t ranks
//     but is a one-rank NCCL communicator on this GPU (on CPU: a one-rank MPI communicator). Every kernel of
//     the SP layer runs at its true per-rank shape; each all-gather / reduce-scatter degenerates into a
//     local copy of one shard (the other t−1 shards of a gathered buffer keep what the caching allocator
//     last put there: real activations from earlier runs, never zeros). This is SP minus its network time,
//     as the baseline is TP minus its network time.
//  2. "derived": baseline (resp. selective) minus the element-wise work SP removes, i.e. the same
//     layer-norm / bias-dropout-residual / dropout-backward / bias-gradient / layer-norm-backward kernels
//     timed on s·b rows and on s·b/t rows. No change of the layer code is involved at all.
// The table shows the fake-comm rows when they ran (GPU: NCCL; CPU: under MPI), else the derived ones.
//
//   build/layer_bench                                  # the paper's 22B per-rank shape, bf16, on the GPU
//   build/layer_bench --device cpu --hidden 64 --heads 8 --seq 64 --batch 2 --reps 3 --warmup 1
#include <nccl.h>
#include "bench_common.h"

#include "../layers/dropout.h"
#include "../layers/gelu.h"
#include "../layers/layernorm.h"
#include "../layers/linear.h"
#include "../layers/matmul.h"
#include "../model/transformer_layer.h"
#include "../recompute/formulas.h"

// ---- options ---------------------------------------------------------------------------------------------
struct Options {
    int hidden = 6144, heads = 64, seq = 2048, batch = 4, tp = 8;  // Table 3, 22B; t = 8
    int reps = 10, warmup = 3;
    float dropout = 0.1f;
    std::string dtype = "bf16", device = "auto", json, mpi = "auto", sp_emulation = "auto";
    bool breakdown = true;  // time every op of the layer alone as well (--breakdown off to skip)
};

static void usage() {
    printf(
        "layer_bench: one transformer layer, forward and backward, the five settings of the paper's Table 4\n"
        "  --hidden H       hidden size h (6144: 22B)          --heads A     attention heads a (64)\n"
        "  --seq S          sequence length s (2048)           --batch B     micro-batch b (4)\n"
        "  --tp-emulated T  tensor-parallel size whose per-rank shape is run (8)\n"
        "  --reps N         timed repetitions, median reported (10)   --warmup W  untimed runs first (3)\n"
        "  --dtype bf16|f32 activation and weight storage (bf16)      --dropout P (0.1)\n"
        "  --device auto|cpu|cuda (auto)   --json FILE  write every number as JSON\n"
        "  --sp-emulation auto|fake-comm|derived   how sequence parallelism is emulated (auto: both)\n"
        "  --mpi auto|on|off   bring MPI up (auto: only under mpirun; one process either way)\n"
        "  --breakdown on|off  also time each op of the baseline layer alone: where the time goes (on)\n");
}

static Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(); exit(0); }
        else if (bench_flag(argc, argv, i, "--hidden", v)) o.hidden = bench_int(v, "--hidden", 1);
        else if (bench_flag(argc, argv, i, "--heads", v)) o.heads = bench_int(v, "--heads", 1);
        else if (bench_flag(argc, argv, i, "--seq", v)) o.seq = bench_int(v, "--seq", 1);
        else if (bench_flag(argc, argv, i, "--batch", v)) o.batch = bench_int(v, "--batch", 1);
        else if (bench_flag(argc, argv, i, "--tp-emulated", v)) o.tp = bench_int(v, "--tp-emulated", 1);
        else if (bench_flag(argc, argv, i, "--reps", v)) o.reps = bench_int(v, "--reps", 1);
        else if (bench_flag(argc, argv, i, "--warmup", v)) o.warmup = bench_int(v, "--warmup", 0);
        else if (bench_flag(argc, argv, i, "--dropout", v)) o.dropout = (float)bench_double(v, "--dropout");
        else if (bench_flag(argc, argv, i, "--dtype", v)) o.dtype = v;
        else if (bench_flag(argc, argv, i, "--device", v)) o.device = v;
        else if (bench_flag(argc, argv, i, "--json", v)) o.json = v;
        else if (bench_flag(argc, argv, i, "--mpi", v)) o.mpi = v;
        else if (bench_flag(argc, argv, i, "--sp-emulation", v)) o.sp_emulation = v;
        else if (bench_flag(argc, argv, i, "--breakdown", v)) {
            if (v != "on" && v != "off") {
                fprintf(stderr, "error: --breakdown expects on or off, got '%s'\n", v.c_str());
                exit(2);
            }
            o.breakdown = v == "on";
        }
        else {
            fprintf(stderr, "error: unknown flag '%s' (--help lists them)\n", argv[i]);
            exit(2);
        }
    }
    bench_dtype(o.dtype);  // validates
    auto refuse = [](const char* m) { fprintf(stderr, "error: %s\n", m); exit(2); };
    if (o.hidden % o.heads) refuse("--heads must divide --hidden");
    if (o.heads % o.tp) refuse("--tp-emulated must divide --heads (tensor parallelism splits heads)");
    if ((4 * o.hidden) % o.tp) refuse("--tp-emulated must divide the MLP width 4*hidden");
    if (o.seq % o.tp) refuse("--tp-emulated must divide --seq (sequence parallelism splits the sequence)");
    if (o.dropout < 0 || o.dropout >= 1) refuse("--dropout must be in [0, 1)");
    if (o.sp_emulation != "auto" && o.sp_emulation != "fake-comm" && o.sp_emulation != "derived")
        refuse("--sp-emulation expects auto, fake-comm or derived");
    return o;
}

// ---- the paper's Table 4 (ms, A100, with NVLink communication) ------------------------------------------
struct PaperRow { const char* name; double fwd, bwd, combined, overhead_pct; };
static const PaperRow kTable4[5] = {
    {"baseline, no recompute", 7.7, 11.9, 19.6, 0},
    {"sequence parallel", 7.2, 11.8, 19.0, -3},
    {"full recompute", 7.7, 19.5, 27.2, 39},
    {"selective recompute", 7.7, 13.2, 20.9, 7},
    {"selective + sequence parallel", 7.2, 13.1, 20.3, 4},
};

// ---- one layer's weights, gradients and run description ------------------------------------------------
// Weights: one flat buffer of random values in the activation dtype (N(0, 0.02) matrices as GPT-2's
// initialization, gains near 1, small random biases), viewed as the 12 tensors of LayerWeights at this
// rank's shapes. Gradients: one flat f32 buffer.
struct BenchLayer {
    Tensor wflat, gflat;
    LayerContext run;
};

static BenchLayer make_layer(const Options& o, Ctx& ctx, ActivationAllocator& A, DType dt, uint64_t seed) {
    const int C = o.hidden, t = o.tp, nh = o.heads / t, hd = o.hidden / o.heads;
    const int C_loc = nh * hd, F_loc = 4 * C / t;
    // The 12 tensors in LayerWeights order, with the sizes a rank holds (parallel/tensor_parallel.h).
    const int64_t n[12] = {C, C, (int64_t)3 * C_loc * C, 3 * C_loc, (int64_t)C * C_loc, C,
                           C, C, (int64_t)F_loc * C,     F_loc,     (int64_t)C * F_loc, C};
    // 0 = gain (1 + noise), 1 = bias (small), 2 = matrix
    const int kind[12] = {0, 1, 2, 1, 2, 1, 0, 1, 2, 1, 2, 1};
    int64_t total = 0;
    for (int64_t x : n) total += x;

    BenchLayer L;
    L.wflat = tensor_alloc(ctx.device, dt, total);
    L.gflat = tensor_zeros(ctx.device, DType::F32, total);
    Tensor* w[12] = {&L.run.w.ln1w, &L.run.w.ln1b, &L.run.w.qkvw, &L.run.w.qkvb, &L.run.w.attprojw, &L.run.w.attprojb,
                     &L.run.w.ln2w, &L.run.w.ln2b, &L.run.w.fcw,  &L.run.w.fcb,  &L.run.w.fcprojw,  &L.run.w.fcprojb};
    Tensor* g[12] = {&L.run.g.ln1w, &L.run.g.ln1b, &L.run.g.qkvw, &L.run.g.qkvb, &L.run.g.attprojw, &L.run.g.attprojb,
                     &L.run.g.ln2w, &L.run.g.ln2b, &L.run.g.fcw,  &L.run.g.fcb,  &L.run.g.fcprojw,  &L.run.g.fcprojb};
    std::vector<float> host((size_t)total);
    int64_t off = 0;
    for (int i = 0; i < 12; i++) {
        float mean = kind[i] == 0 ? 1.f : 0.f, std = kind[i] == 2 ? 0.02f : 0.01f;
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < n[i]; j++) host[off + j] = mean + std * bench_normal(seed, 100 + i, (uint64_t)j);
        *w[i] = L.wflat.slice(off, n[i]);
        *g[i] = L.gflat.slice(off, n[i]);
        off += n[i];
    }
    tensor_from_host_f32(L.wflat, host.data());

    LayerContext& r = L.run;
    r.ctx = &ctx;
    r.alloc = &A;
    r.region.alloc = &A;
    r.region.layer = 0;
    r.dtype = dt;
    r.layer = 0;
    r.S = o.seq;
    r.B = o.batch;
    r.C = C;
    r.C_loc = C_loc;
    r.F_loc = F_loc;
    r.attn.S = o.seq;
    r.attn.B = o.batch;
    r.attn.NH = nh;
    r.attn.HD = hd;
    r.attn.b_offset = 0;
    r.attn.B_total = o.batch;
    r.attn.head_offset = 0;  // rank 0 of the emulated group: heads 0..nh-1
    r.attn.NH_total = o.heads;
    r.where.b_offset = 0;
    r.where.B_total = o.batch;
    r.where.s_offset = 0;  // rank 0's sequence shard under SP
    r.dropout = o.dropout;
    r.seed = seed;
    return L;
}

// Switch the run between plain TP (S_loc = S) and TP + SP (S_loc = S/t) on communicator `tp`.
static void set_region(LayerContext& r, Comm* tp, bool sp, int t) {
    r.region.tp = tp;
    r.region.sp = sp;
    r.S_loc = sp ? r.S / t : r.S;
}

// ---- timing one setting ------------------------------------------------------------------------------------
struct Result {
    std::string name, method;  // method: "measured", "fake-comm" or "derived"
    Recompute policy = Recompute::None;
    bool sp = false;
    double fwd_ms = NAN, bwd_ms = NAN;
    std::vector<double> fwd_all, bwd_all;
    double saved_bytes = NAN;    // measured: live activation bytes after the forward pass (incl. LN statistics)
    double formula_bytes = NAN;  // the paper's formula (Table 2 split per tensor) + the LN statistics
    double combined() const { return fwd_ms + bwd_ms; }
};

// One input x (the layer's input, [S_loc·B, C]) and one output gradient dy, random, reused by every run.
// Each repetition: copy them into fresh allocator buffers (untimed), then
//   mark 0 · layer_forward · mark 1 · layer_backward · mark 2.
// layer_backward includes what the policy recomputes (Table 4 puts recomputation in the backward column).
static Result time_layer(const Options& o, BenchLayer& L, Recompute policy, Tensor x_src, Tensor dy_src,
                         const char* name, const char* method) {
    LayerContext& run = L.run;
    Ctx& ctx = *run.ctx;
    ActivationAllocator& A = *run.alloc;
    const int64_t rows = (int64_t)run.S_loc * run.B;
    const int64_t n_act = rows * run.C;
    Tensor x = x_src.slice(0, n_act), dy = dy_src.slice(0, n_act);
    Result res;
    res.name = name;
    res.method = method;
    res.policy = policy;
    res.sp = run.region.sp;
    BenchTimer timer(ctx, 3);
    for (int it = 0; it < o.warmup + o.reps; it++) {
        SavedLayer s;
        s.ln1_in = A.alloc(run.dtype, n_act, 0, "ln1_in");
        tensor_convert(ctx, s.ln1_in, x);
        Tensor out = A.alloc(run.dtype, n_act, 1, "tmp:layer_out");
        Tensor dresid = A.alloc(run.dtype, n_act, kModelLevel, "tmp:dresidual");
        tensor_convert(ctx, dresid, dy);
        size_t before = A.live_bytes() - s.ln1_in.bytes();  // the output and its gradient: not saved state

        timer.mark(0);
        layer_forward(run, s, out, policy);
        timer.mark(1);
        double saved = (double)(A.live_bytes() - before);
        layer_backward(run, s, dresid, policy);
        timer.mark(2);

        double f = timer.ms(0, 1), b = timer.ms(1, 2);
        if (it >= o.warmup) {
            res.fwd_all.push_back(f);
            res.bwd_all.push_back(b);
        }
        res.saved_bytes = saved;
        A.release(out);
        A.release(dresid);
    }
    res.fwd_ms = median_of(res.fwd_all);
    res.bwd_ms = median_of(res.bwd_all);

    LayerFormulaInput fi;
    fi.s = o.seq; fi.b = o.batch; fi.h = o.hidden; fi.a = o.heads; fi.t = o.tp; fi.sp = res.sp; fi.rc = policy;
    fi.d = (int)dtype_size(run.dtype);
    // The paper ignores the layer norms' mean and rstd (2 LNs × 2 × f32 per row); the layer keeps them
    // unless it keeps only its input (full recompute).
    double ln_stats = policy == Recompute::Full ? 0.0 : 16.0 * (double)rows;
    res.formula_bytes = layer_bytes(fi) + ln_stats;
    return res;
}

// ---- the element-wise work that sequence parallelism shrinks by t (for the "derived" emulation) ------------
// Exactly the ops layer_forward / layer_backward run OUTSIDE the tensor-parallel regions, on `rows` rows:
//   forward : LN1, bias+dropout+residual (attention), LN2, bias+dropout+residual (MLP)
//   backward: dropout backward, bias gradient, LN backward — once per block.
struct ElemTiming { double fwd_ms = NAN, bwd_ms = NAN; };

static ElemTiming time_elementwise(const Options& o, BenchLayer& L, int64_t rows, Tensor x_src, Tensor dy_src) {
    LayerContext& run = L.run;
    Ctx& ctx = *run.ctx;
    ActivationAllocator& A = *run.alloc;
    const int C = run.C;
    const DType dt = run.dtype;
    const int64_t n = rows * C;
    const LayerWeights& w = run.w;
    const LayerGrads& g = run.g;
    Tensor x = A.alloc(dt, n, 0, "tmp:x"), y = A.alloc(dt, n, 0, "tmp:y"), r1 = A.alloc(dt, n, 0, "tmp:r1");
    Tensor h = A.alloc(dt, n, 0, "tmp:h"), out = A.alloc(dt, n, 0, "tmp:out"), dres = A.alloc(dt, n, 0, "tmp:dres");
    Tensor d1 = A.alloc(dt, n, 0, "tmp:d1"), d2 = A.alloc(dt, n, 0, "tmp:d2");
    Tensor m1 = A.alloc(DType::U8, n, 0, "tmp:m1"), m2 = A.alloc(DType::U8, n, 0, "tmp:m2");
    Tensor mean1 = A.alloc(DType::F32, rows, 0, "tmp:mean1"), rstd1 = A.alloc(DType::F32, rows, 0, "tmp:rstd1");
    Tensor mean2 = A.alloc(DType::F32, rows, 0, "tmp:mean2"), rstd2 = A.alloc(DType::F32, rows, 0, "tmp:rstd2");
    tensor_convert(ctx, x, x_src.slice(0, n));
    tensor_convert(ctx, y, dy_src.slice(0, n));  // stands for a row-parallel output (random, like the real one)
    const int S_rows = (int)(rows / run.B);
    std::vector<double> fwd, bwd;
    BenchTimer timer(ctx, 3);
    for (int it = 0; it < o.warmup + o.reps; it++) {
        tensor_convert(ctx, dres, dy_src.slice(0, n));
        timer.mark(0);
        layernorm_forward(ctx, h, mean1, rstd1, x, w.ln1w, w.ln1b, (int)rows, C);
        bias_dropout_residual_forward(ctx, r1, m1, y, w.attprojb, x, run.dropout, run.seed, 1, S_rows, run.B, C, run.where);
        layernorm_forward(ctx, h, mean2, rstd2, r1, w.ln2w, w.ln2b, (int)rows, C);
        bias_dropout_residual_forward(ctx, out, m2, y, w.fcprojb, r1, run.dropout, run.seed, 2, S_rows, run.B, C, run.where);
        timer.mark(1);
        dropout_backward(ctx, d1, dres, m2, run.dropout, n);
        bias_backward(ctx, g.fcprojb, d1, (int)rows, C);
        layernorm_backward(ctx, dres, g.ln2w, g.ln2b, y, r1, w.ln2w, mean2, rstd2, (int)rows, C);
        dropout_backward(ctx, d2, dres, m1, run.dropout, n);
        bias_backward(ctx, g.attprojb, d2, (int)rows, C);
        layernorm_backward(ctx, dres, g.ln1w, g.ln1b, y, x, w.ln1w, mean1, rstd1, (int)rows, C);
        timer.mark(2);
        double f = timer.ms(0, 1), b = timer.ms(1, 2);
        if (it >= o.warmup) {
            fwd.push_back(f);
            bwd.push_back(b);
        }
    }
    Tensor* all[] = {&x, &y, &r1, &h, &out, &dres, &d1, &d2, &m1, &m2, &mean1, &rstd1, &mean2, &rstd2};
    for (Tensor* t : all) A.release(*t);
    return ElemTiming{median_of(fwd), median_of(bwd)};
}

// ---- where the time of one layer goes: every op timed on its own (--breakdown) -----------------------------
// The op sequence of layer_forward / layer_backward (model/transformer_layer.cu) for the baseline policy at
// plain TP shapes, written out here with a timer point after each op. It is a copy of the layer's sequence,
// so the report prints its sum next to the measured layer time: if the two drift apart, the layer changed
// and this list must follow. Recomputation adds no new op: selective reruns "attention probs" (QKᵀ GEMM +
// softmax + dropout), full reruns the whole forward column.
struct OpTime {
    const char* name;
    bool backward;
    double flops;  // matmul FLOPs of the op (0: element-wise)
    std::vector<double> all_ms;
    double ms() const { return median_of(all_ms); }
};

static std::vector<OpTime> time_ops(const Options& o, BenchLayer& L, Tensor x_src, Tensor dy_src, double& qk_gemm_ms) {
    LayerContext& run = L.run;
    Ctx& ctx = *run.ctx;
    ActivationAllocator& A = *run.alloc;
    const int C = run.C, N = run.S * run.B, rows = N, S = run.S, B = run.B;
    const int NH = run.attn.NH, HD = run.attn.HD, C_loc = run.C_loc, F_loc = run.F_loc;
    const DType dt = run.dtype;
    const LayerWeights& w = run.w;
    const LayerGrads& g = run.g;
    const int64_t n_act = (int64_t)rows * C, s2 = (int64_t)B * NH * S * S;
    const double attn_gemm = 2.0 * B * NH * (double)S * S * HD;  // one of the core-attention GEMMs
    std::vector<OpTime> ops = {
        {"LN1", false, 0},
        {"QKV linear (+bias epilogue)", false, 2.0 * N * C * 3.0 * C_loc},
        {"attention probs (QK^T + softmax + dropout)", false, attn_gemm},
        {"attention context (P_d V)", false, attn_gemm},
        {"attention proj linear", false, 2.0 * N * (double)C_loc * C},
        {"bias + dropout + residual", false, 0},
        {"LN2", false, 0},
        {"fc1 linear (+bias epilogue)", false, 2.0 * N * (double)C * F_loc},
        {"GeLU", false, 0},
        {"fc2 linear", false, 2.0 * N * (double)F_loc * C},
        {"bias + dropout + residual", false, 0},
        {"dropout backward (MLP)", true, 0},
        {"bias grad fc2", true, 0},
        {"fc2 backward (dX, dW)", true, 4.0 * N * (double)F_loc * C},
        {"GeLU backward", true, 0},
        {"fc1 backward (dX, dW, db)", true, 4.0 * N * (double)C * F_loc},
        {"LN2 backward", true, 0},
        {"dropout backward (attn)", true, 0},
        {"bias grad proj", true, 0},
        {"attention proj backward (dX, dW)", true, 4.0 * N * (double)C_loc * C},
        {"attention backward (4 GEMMs + softmax bwd)", true, 4 * attn_gemm},
        {"QKV backward (dX, dW, db)", true, 4.0 * N * C * 3.0 * C_loc},
        {"LN1 backward", true, 0},
    };
    const int points = (int)ops.size() + 1;
    BenchTimer timer(ctx, points);
    std::vector<double> qk_all;
    for (int it = 0; it < o.warmup + o.reps; it++) {
        Tensor x = A.alloc(dt, n_act, 0, "tmp:x"), dres = A.alloc(dt, n_act, 0, "tmp:dres");
        tensor_convert(ctx, x, x_src.slice(0, n_act));
        tensor_convert(ctx, dres, dy_src.slice(0, n_act));
        Tensor mean1 = A.alloc(DType::F32, rows, 0, "tmp:mean1"), rstd1 = A.alloc(DType::F32, rows, 0, "tmp:rstd1");
        Tensor mean2 = A.alloc(DType::F32, rows, 0, "tmp:mean2"), rstd2 = A.alloc(DType::F32, rows, 0, "tmp:rstd2");
        Tensor h1 = A.alloc(dt, n_act, 0, "tmp:h1"), qkv = A.alloc(dt, (int64_t)N * 3 * C_loc, 0, "tmp:qkv");
        Tensor probs = A.alloc(dt, s2, 0, "tmp:probs"), mask = A.alloc(DType::U8, s2, 0, "tmp:mask");
        Tensor pdrop = A.alloc(dt, s2, 0, "tmp:pdrop"), ctxo = A.alloc(dt, (int64_t)N * C_loc, 0, "tmp:ctx");
        Tensor y = A.alloc(dt, n_act, 0, "tmp:y"), m1 = A.alloc(DType::U8, n_act, 0, "tmp:m1");
        Tensor r1 = A.alloc(dt, n_act, 0, "tmp:r1"), h2 = A.alloc(dt, n_act, 0, "tmp:h2");
        Tensor f1 = A.alloc(dt, (int64_t)N * F_loc, 0, "tmp:f1"), f2 = A.alloc(dt, (int64_t)N * F_loc, 0, "tmp:f2");
        Tensor m2 = A.alloc(DType::U8, n_act, 0, "tmp:m2"), out = A.alloc(dt, n_act, 0, "tmp:out");
        int k = 0;
        timer.mark(k++);
        layernorm_forward(ctx, h1, mean1, rstd1, x, w.ln1w, w.ln1b, rows, C);
        timer.mark(k++);
        column_parallel_forward(run.region, ctx, qkv, h1, w.qkvw, w.qkvb, N, C, 3 * C_loc);
        timer.mark(k++);
        attention_probs_forward(ctx, probs, mask, pdrop, qkv, run.attn, run.dropout, run.seed, 0);
        timer.mark(k++);
        attention_context_forward(ctx, ctxo, pdrop, qkv, run.attn);
        timer.mark(k++);
        row_parallel_forward(run.region, ctx, y, ctxo, w.attprojw, N, C_loc, C);
        timer.mark(k++);
        bias_dropout_residual_forward(ctx, r1, m1, y, w.attprojb, x, run.dropout, run.seed, 1, S, B, C, run.where);
        timer.mark(k++);
        layernorm_forward(ctx, h2, mean2, rstd2, r1, w.ln2w, w.ln2b, rows, C);
        timer.mark(k++);
        column_parallel_forward(run.region, ctx, f1, h2, w.fcw, w.fcb, N, C, F_loc);
        timer.mark(k++);
        gelu_forward(ctx, f2, f1, (int64_t)N * F_loc);
        timer.mark(k++);
        row_parallel_forward(run.region, ctx, y, f2, w.fcprojw, N, F_loc, C);
        timer.mark(k++);
        bias_dropout_residual_forward(ctx, out, m2, y, w.fcprojb, r1, run.dropout, run.seed, 2, S, B, C, run.where);
        timer.mark(k++);
        // backward (y is reused for the dropout gradients once its forward value is consumed)
        Tensor dy2 = y, dh = A.alloc(dt, (int64_t)N * F_loc, 0, "tmp:dh"), dln = A.alloc(dt, n_act, 0, "tmp:dln");
        dropout_backward(ctx, dy2, dres, m2, run.dropout, n_act);
        timer.mark(k++);
        bias_backward(ctx, g.fcprojb, dy2, rows, C);
        timer.mark(k++);
        row_parallel_backward(run.region, ctx, dh, g.fcprojw, dy2, f2, w.fcprojw, N, F_loc, C);
        timer.mark(k++);
        gelu_backward(ctx, dh, f1, dh, (int64_t)N * F_loc);
        timer.mark(k++);
        column_parallel_backward(run.region, ctx, dln, g.fcw, g.fcb, dh, h2, w.fcw, N, C, F_loc);
        timer.mark(k++);
        layernorm_backward(ctx, dres, g.ln2w, g.ln2b, dln, r1, w.ln2w, mean2, rstd2, rows, C);
        timer.mark(k++);
        dropout_backward(ctx, dy2, dres, m1, run.dropout, n_act);
        timer.mark(k++);
        bias_backward(ctx, g.attprojb, dy2, rows, C);
        timer.mark(k++);
        Tensor dctx = A.alloc(dt, (int64_t)N * C_loc, 0, "tmp:dctx"), dqkv = A.alloc(dt, (int64_t)N * 3 * C_loc, 0, "tmp:dqkv");
        Tensor dprobs = A.alloc(dt, s2, 0, "tmp:dprobs");
        row_parallel_backward(run.region, ctx, dctx, g.attprojw, dy2, ctxo, w.attprojw, N, C_loc, C);
        timer.mark(k++);
        attention_backward(ctx, dqkv, dctx, qkv, probs, mask, pdrop, dprobs, run.attn, run.dropout);
        timer.mark(k++);
        column_parallel_backward(run.region, ctx, dln, g.qkvw, g.qkvb, dqkv, h1, w.qkvw, N, C, 3 * C_loc);
        timer.mark(k++);
        layernorm_backward(ctx, dres, g.ln1w, g.ln1b, dln, x, w.ln1w, mean1, rstd1, rows, C);
        timer.mark(k++);
        // The QKᵀ GEMMs alone (the same calls as attention_probs_forward), to split "attention probs".
        BenchTimer qk(ctx, 2);
        qk.mark(0);
        const int64_t R = (int64_t)B * 3 * NH * HD, SS = (int64_t)S * S;
        for (int b = 0; b < B; b++) {
            const char* q0 = static_cast<const char*>(qkv.data) + (size_t)b * 3 * NH * HD * dtype_size(dt);
            gemm(ctx, false, true, S, S, HD, 1.f, GemmOperand{q0, R, HD},
                 GemmOperand{q0 + (size_t)NH * HD * dtype_size(dt), R, HD}, 0.f,
                 static_cast<char*>(probs.data) + (size_t)b * NH * SS * dtype_size(dt), S, SS, dt, dt, NH);
        }
        qk.mark(1);
        if (it >= o.warmup) {
            for (size_t i = 0; i < ops.size(); i++) ops[i].all_ms.push_back(timer.ms((int)i, (int)i + 1));
            qk_all.push_back(qk.ms(0, 1));
        }
        Tensor* all[] = {&x, &dres, &mean1, &rstd1, &mean2, &rstd2, &h1, &qkv, &probs, &mask, &pdrop, &ctxo,
                         &y, &m1, &r1, &h2, &f1, &f2, &m2, &out, &dh, &dln, &dctx, &dqkv, &dprobs};
        for (Tensor* t : all) A.release(*t);
    }
    qk_gemm_ms = median_of(qk_all);
    return ops;
}

static void print_ops(const std::vector<OpTime>& ops, double qk_ms, double layer_fwd, double layer_bwd) {
    double fwd = 0, bwd = 0;
    for (const OpTime& op : ops) (op.backward ? bwd : fwd) += op.ms();
    printf("\nwhere one layer's time goes (baseline, each op timed alone; median of the runs):\n");
    printf("  %-44s %9s %7s %11s\n", "op", "ms", "share", "matmul TF/s");
    for (const OpTime& op : ops) {
        char rate[32] = "";
        if (op.flops > 0) snprintf(rate, sizeof rate, "%.3g", op.flops / (op.ms() * 1e-3) / 1e12);
        printf("  %s %-42s %9.3f %6.1f%% %11s\n", op.backward ? "B" : "F", op.name, op.ms(), 100 * op.ms() / (fwd + bwd), rate);
        if (!strcmp(op.name, "attention probs (QK^T + softmax + dropout)"))
            printf("      of which the QK^T GEMMs %.3f ms (%.3g TF/s), softmax + dropout kernel %.3f ms\n", qk_ms,
                   op.flops / (qk_ms * 1e-3) / 1e12, op.ms() - qk_ms);
    }
    printf("  sum of ops: fwd %.3f ms, bwd %.3f ms; the layer measured as a whole: fwd %.3f, bwd %.3f ms\n", fwd,
           bwd, layer_fwd, layer_bwd);
}

static void json_ops(JsonOut& j, const std::vector<OpTime>& ops, double qk_ms) {
    j.key("breakdown");
    j.open('{');
    j.kv("qk_gemm_ms", qk_ms);
    j.key("ops");
    j.open('[');
    for (const OpTime& op : ops) {
        j.open('{');
        j.kv("name", op.name);
        j.kv("phase", op.backward ? "backward" : "forward");
        j.kv("ms", op.ms());
        j.kv("matmul_flops", op.flops);
        j.close('}');
    }
    j.close(']');
    j.close('}');
}

// ---- the fake t-rank communicator (the "fake-comm" emulation of SP) -----------------------------------------
// A Comm whose `size` says t but whose backend is a ONE-rank group: on GPU a NCCL communicator over this
// device alone (ncclCommInitAll, no MPI needed), on CPU a one-rank MPI communicator (MPI_COMM_SELF). The
// shape checks of comm.cu then hold for S/t-row shards, and each collective moves only one shard locally.
// The byte counters count what a real t-rank ring would send (comm.h), which the report prints.
static bool make_fake_comm(Comm& c, int t, const Ctx& ctx, bool mpi, std::string& why) {
    if (ctx.device == Device::CUDA) {
        ncclComm_t nc = nullptr;
        int dev = ctx.cuda_device;
        ncclResult_t r = ncclCommInitAll(&nc, 1, &dev);
        if (r != ncclSuccess) {
            why = std::string("NCCL could not create a one-GPU communicator: ") + ncclGetErrorString(r);
            return false;
        }
        c = Comm();
        c.backend = CommBackend::NCCL;
        c.nccl = nc;
        CUDA_CHECK(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    } else {
        if (!mpi) {
            why = "on CPU the fake communicator needs MPI (run under mpirun -np 1, or --mpi on)";
            return false;
        }
        c = comm_create(MPI_COMM_SELF, 0, 0, CommBackend::MPI, ctx);
    }
    c.rank = 0;
    c.size = t;  // the lie that makes comm.cu accept shards of S/t rows
    return true;
}

// ---- output --------------------------------------------------------------------------------------------
static void print_row(const char* label, const Result& r, double base, const PaperRow* p) {
    char ov[32] = "      -";
    if (base > 0 && r.name.rfind("baseline", 0) != 0) snprintf(ov, sizeof ov, "%+6.1f%%", 100.0 * (r.combined() / base - 1));
    char pov[32] = "   -";
    if (p && p->overhead_pct != 0) snprintf(pov, sizeof pov, "%+3.0f%%", p->overhead_pct);
    printf("%-32s %-9s %9.3f %9.3f %9.3f %8s  |", label, r.method.c_str(), r.fwd_ms, r.bwd_ms, r.combined(), ov);
    if (p) printf(" %5.1f %5.1f %5.1f %5s\n", p->fwd, p->bwd, p->combined, pov);
    else printf("\n");
}

static void json_result(JsonOut& j, const Result& r, double base, const PaperRow* p) {
    j.open('{');
    j.kv("name", r.name);
    j.kv("method", r.method);
    j.kv("recompute", recompute_name(r.policy));
    j.kvb("sequence_parallel", r.sp);
    j.kv("forward_ms", r.fwd_ms);
    j.kv("backward_ms", r.bwd_ms);
    j.kv("combined_ms", r.combined());
    j.kv("overhead_pct", base > 0 ? 100.0 * (r.combined() / base - 1) : NAN);
    j.kv("forward_all_ms", r.fwd_all);
    j.kv("backward_all_ms", r.bwd_all);
    j.kv("saved_bytes_measured", r.saved_bytes);
    j.kv("saved_bytes_formula", r.formula_bytes);
    if (p) {
        j.key("paper");
        j.open('{');
        j.kv("forward_ms", p->fwd);
        j.kv("backward_ms", p->bwd);
        j.kv("combined_ms", p->combined);
        j.kv("overhead_pct", p->overhead_pct);
        j.close('}');
    }
    j.close('}');
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file: a run killed by a timeout keeps its lines
    Options o = parse(argc, argv);
    bool mpi = bench_mpi_init(o.mpi, &argc, &argv);
    Device device = bench_device(o.device);
    DType dt = bench_dtype(o.dtype);
    Ctx ctx = ctx_create(device, 0);
    ProcessGrid grid = bench_single_rank_grid(mpi, ctx);  // tp = 1: tp_comm has one rank, collectives are no-ops
    ActivationAllocator A(device);

    const int t = o.tp, C = o.hidden, S = o.seq, B = o.batch;
    const int hd = C / o.heads, nh = o.heads / t;
    const std::string dev_name = bench_device_name(device);
    printf("layer_bench: one transformer layer, paper Table 4 (Korthikanti et al. 2022)\n");
    printf("device: %s | dtype %s | dropout %.2f | %d warm-up + %d timed runs, median | MPI %s\n", dev_name.c_str(),
           dtype_name(dt), o.dropout, o.warmup, o.reps, mpi ? "on" : "off (one process, no MPI calls)");
    printf("model : h=%d a=%d s=%d b=%d; per-rank shape of t=%d: %d heads x %d (C_loc=%d), F_loc=%d, "
           "SP shard S/t=%d rows of s\n", C, o.heads, S, B, t, nh, hd, nh * hd, 4 * C / t, S / t);
    if (device == Device::CPU && (double)S * B * C > (double)(1 << 24))
        printf("note  : a paper-scale shape on the CPU takes a long time; for a smoke test use e.g.\n"
               "        --hidden 64 --heads 8 --seq 64 --batch 2 --reps 3 --warmup 1\n");
    printf("NOTE  : ONE device, no tensor-parallel group: the tp communicator has 1 rank, so every all-reduce /\n"
           "        all-gather / reduce-scatter of the paper is ABSENT from these times (compute only).\n");

    // Inputs: random, [S·B, C] (the SP runs use the first S/t·B rows: rank 0's shard).
    Tensor x_src = tensor_alloc(device, dt, (int64_t)S * B * C), dy_src = tensor_alloc(device, dt, (int64_t)S * B * C);
    bench_fill_normal(x_src, 7, 1, 0.f, 1.f);
    bench_fill_normal(dy_src, 7, 2, 0.f, 1e-2f);
    BenchLayer L = make_layer(o, ctx, A, dt, 1234);

    // ---- measured directly: baseline, full recompute, selective recompute (plain TP shapes) ----------------
    std::vector<Result> rows(5);
    set_region(L.run, &grid.tp_comm, false, t);
    // Each result is printed as soon as it exists, so a run cut short still shows what it measured.
    auto progress = [](const Result& r) {
        printf("  done: %-30s %-9s fwd %9.3f ms  bwd %9.3f ms\n", r.name.c_str(), r.method.c_str(), r.fwd_ms, r.bwd_ms);
    };
    rows[0] = time_layer(o, L, Recompute::None, x_src, dy_src, kTable4[0].name, "measured");
    progress(rows[0]);
    rows[2] = time_layer(o, L, Recompute::Full, x_src, dy_src, kTable4[2].name, "measured");
    progress(rows[2]);
    rows[3] = time_layer(o, L, Recompute::Selective, x_src, dy_src, kTable4[3].name, "measured");
    progress(rows[3]);
    const double base = rows[0].combined();
    std::vector<OpTime> ops;
    double qk_ms = NAN;
    if (o.breakdown) {
        ops = time_ops(o, L, x_src, dy_src, qk_ms);
        printf("  done: per-op breakdown of the baseline layer (%zu ops)\n", ops.size());
    }

    // ---- SP, derived: subtract the element-wise work SP removes -------------------------------------------
    ElemTiming e_full = time_elementwise(o, L, (int64_t)S * B, x_src, dy_src);
    ElemTiming e_shard = time_elementwise(o, L, (int64_t)S / t * B, x_src, dy_src);
    const double dfwd = e_full.fwd_ms - e_shard.fwd_ms, dbwd = e_full.bwd_ms - e_shard.bwd_ms;
    auto derived = [&](const Result& from, const PaperRow& p) {
        Result r;
        r.name = p.name;
        r.method = "derived";
        r.policy = from.policy;
        r.sp = true;
        r.fwd_ms = from.fwd_ms - dfwd;
        r.bwd_ms = from.bwd_ms - dbwd;
        LayerFormulaInput fi;
        fi.s = S; fi.b = B; fi.h = C; fi.a = o.heads; fi.t = t; fi.sp = true; fi.rc = from.policy;
        fi.d = (int)dtype_size(dt);
        r.formula_bytes = layer_bytes(fi) + 16.0 * S / t * B;
        return r;
    };
    Result sp_derived = derived(rows[0], kTable4[1]), selsp_derived = derived(rows[3], kTable4[4]);
    progress(sp_derived);
    progress(selsp_derived);

    // ---- SP, fake-comm: the real SP path of the layer at per-rank shapes -----------------------------------
    bool fake_ran = false;
    std::string fake_why;
    Result sp_fake, selsp_fake;
    Comm fake;
    CommCounters per_layer;
    if (o.sp_emulation != "derived" && make_fake_comm(fake, t, ctx, mpi, fake_why)) {
        // The gathered buffers are only 1/t written by a one-rank all-gather. Fill the allocator's cache for
        // that size with random data first, so the GEMMs never read uninitialized memory or zeros.
        std::vector<Tensor> prime;
        for (int i = 0; i < 6; i++) {
            prime.push_back(A.alloc(dt, (int64_t)S * B * C, 0, "tmp:prime"));
            tensor_convert(ctx, prime.back(), x_src);
        }
        for (auto& p : prime) A.release(p);
        set_region(L.run, &fake, true, t);
        sp_fake = time_layer(o, L, Recompute::None, x_src, dy_src, kTable4[1].name, "fake-comm");
        progress(sp_fake);
        fake.counters.reset();
        selsp_fake = time_layer(o, L, Recompute::Selective, x_src, dy_src, kTable4[4].name, "fake-comm");
        progress(selsp_fake);
        per_layer = fake.counters;  // warm-up + timed runs of one setting
        for (int k = 0; k < kNumCollectives; k++) {
            per_layer.calls[k] /= (uint64_t)(o.warmup + o.reps);
            per_layer.bytes[k] /= (uint64_t)(o.warmup + o.reps);
        }
        ctx_sync(ctx);
        comm_destroy(fake);
        fake_ran = true;
    } else if (o.sp_emulation == "fake-comm") {
        mm_fatal("--sp-emulation fake-comm: %s", fake_why.c_str());
    }
    rows[1] = fake_ran ? sp_fake : sp_derived;
    rows[4] = fake_ran ? selsp_fake : selsp_derived;
    ctx_sync(ctx);

    // ---- report -----------------------------------------------------------------------------------------------
    double fwd_flops = (24.0 * B * S * (double)C * C + 4.0 * B * (double)S * S * C) / t;  // Appendix A, per rank
    printf("\n%-32s %-9s %9s %9s %9s %8s  | %5s %5s %5s %5s\n", "experiment (Table 4)", "method", "fwd ms", "bwd ms",
           "total ms", "overhd", "paper", "fwd", "bwd", "total");
    printf("%-32s %-9s %9s %9s %9s %8s  | %5s %5s %5s %5s\n", "", "", "", "", "", "", "A100:", "", "", "ovh");
    for (int i = 0; i < 5; i++) print_row(kTable4[i].name, rows[i], base, &kTable4[i]);
    if (fake_ran) {
        printf("cross-check, SP derived = measured - elementwise(s*b rows) + elementwise(s*b/t rows):\n");
        print_row("  sequence parallel", sp_derived, base, nullptr);
        print_row("  selective + sequence parallel", selsp_derived, base, nullptr);
    } else {
        printf("fake-comm SP emulation not run: %s\n", o.sp_emulation == "derived" ? "--sp-emulation derived" : fake_why.c_str());
    }
    if (o.breakdown) print_ops(ops, qk_ms, rows[0].fwd_ms, rows[0].bwd_ms);
    printf("element-wise work outside the TP regions: fwd %.3f ms / bwd %.3f ms on %d rows, %.3f / %.3f ms on %d rows\n",
           e_full.fwd_ms, e_full.bwd_ms, S * B, e_shard.fwd_ms, e_shard.bwd_ms, S / t * B);
    printf("baseline layer: %.4g model TFLOP/s (3 x forward matmul FLOPs %.3g per rank / combined time)\n",
           3 * fwd_flops / (base * 1e-3) / 1e12, fwd_flops);
    printf("saved activations after forward (MB, measured vs paper formula + LN stats):");
    for (int i = 0; i < 5; i++)
        if (rows[i].method != "derived") printf(" %s %.4g/%.4g;", i == 0 ? "base" : i == 1 ? "SP" : i == 2 ? "full" : i == 3 ? "sel" : "sel+SP",
                                               rows[i].saved_bytes / 1e6, rows[i].formula_bytes / 1e6);
    printf("\n");
    if (fake_ran)
        printf("fake-comm: per layer fwd+bwd, a real %d-rank ring would send %.1f MB all-gather (%llu calls) + %.1f MB "
               "reduce-scatter (%llu calls) per rank; here they were local copies\n", t,
               per_layer.bytes[kAllGather] / 1e6, (unsigned long long)per_layer.calls[kAllGather],
               per_layer.bytes[kReduceScatter] / 1e6, (unsigned long long)per_layer.calls[kReduceScatter]);
    if (device == Device::CUDA)
        printf("device memory in use: %.2f GB of %.2f GB; activation allocator peak reserved %.2f GB\n",
               device_used_gb(device), device_total_gb(device), A.peak_reserved_bytes() / 1e9);
    printf("paper: A100 80GB with NVLink communication included; here: %s without communication.\n", dev_name.c_str());

    if (!o.json.empty()) {
        JsonOut j;
        j.open('{');
        j.kv("benchmark", "layer_bench");
        j.kv("device", dev_name);
        j.kv("dtype", dtype_name(dt));
        j.key("config");
        j.open('{');
        j.kv("hidden", C); j.kv("heads", o.heads); j.kv("seq", S); j.kv("batch", B); j.kv("tp_emulated", t);
        j.kv("local_heads", nh); j.kv("head_dim", hd); j.kv("C_loc", nh * hd); j.kv("F_loc", 4 * C / t);
        j.kv("S_loc_sp", S / t); j.kv("dropout", o.dropout); j.kv("reps", o.reps); j.kv("warmup", o.warmup);
        j.close('}');
        j.kv("communication", "absent: one device, tp communicator of size 1 (collectives are no-ops)");
        j.kv("sp_emulation", fake_ran ? "fake-comm (measured), derived as cross-check" : "derived");
        if (!fake_ran) j.kv("fake_comm_not_run", o.sp_emulation == "derived" ? "--sp-emulation derived" : fake_why);
        j.kv("forward_matmul_flops_per_rank", fwd_flops);
        j.kv("baseline_model_tflops", 3 * fwd_flops / (base * 1e-3) / 1e12);
        j.key("experiments");
        j.open('[');
        for (int i = 0; i < 5; i++) json_result(j, rows[i], base, &kTable4[i]);
        j.close(']');
        j.key("derived_sp");
        j.open('[');
        json_result(j, sp_derived, base, &kTable4[1]);
        json_result(j, selsp_derived, base, &kTable4[4]);
        j.close(']');
        j.key("elementwise");
        j.open('{');
        j.kv("rows_full", (double)S * B); j.kv("fwd_ms_full", e_full.fwd_ms); j.kv("bwd_ms_full", e_full.bwd_ms);
        j.kv("rows_shard", (double)S / t * B); j.kv("fwd_ms_shard", e_shard.fwd_ms); j.kv("bwd_ms_shard", e_shard.bwd_ms);
        j.close('}');
        if (fake_ran) {
            j.key("fake_comm_ring_bytes_per_layer");
            j.open('{');
            j.kv("all_gather_bytes", (double)per_layer.bytes[kAllGather]);
            j.kv("all_gather_calls", (double)per_layer.calls[kAllGather]);
            j.kv("reduce_scatter_bytes", (double)per_layer.bytes[kReduceScatter]);
            j.kv("reduce_scatter_calls", (double)per_layer.calls[kReduceScatter]);
            j.close('}');
        }
        if (o.breakdown) json_ops(j, ops, qk_ms);
        j.kv("device_used_gb", device_used_gb(device));
        j.kv("allocator_peak_reserved_gb", A.peak_reserved_bytes() / 1e9);
        j.close('}');
        if (!j.write(o.json)) mm_fatal("could not write %s", o.json.c_str());
        printf("wrote %s\n", o.json.c_str());
    }

    tensor_free(x_src);
    tensor_free(dy_src);
    tensor_free(L.wflat);
    tensor_free(L.gflat);
    bench_grid_destroy(mpi, grid);
    ctx_destroy(ctx);
    bench_mpi_finalize(mpi);
    return 0;
}
