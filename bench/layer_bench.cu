// layer_bench.cu — the paper's Table 4 on one device: forward and backward time of ONE transformer layer of
// the 22B model (h = 6144, a = 64, s = 2048, micro-batch b = 4, t = 8), under the five settings of the table:
// baseline (no recompute), sequence parallel, full recompute, selective recompute, selective + SP.
//
// What runs. The real layer code: layer_forward / layer_backward (model/transformer_layer.cu) with the
// recompute policies of recompute/recompute.cu, on the shapes ONE of the paper's 8 tensor-parallel ranks
// sees: 64/8 = 8 local heads of head dim 96 (C_loc = 768), MLP width F_loc = 4·6144/8 = 3072, the full
// hidden size C = 6144 for the replicated parts (layer norms, residual stream, dropouts), all s·b = 8192
// rows inside the tensor-parallel regions. The layer is the model's own: a one-layer GPT built by gpt_create
// for rank 0 of a t-way group, its LayerContext from gpt_layer_context (model/gpt.h).
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
//  2. "derived": baseline (resp. selective) minus the element-wise work SP removes: the layer-norm,
//     bias-dropout-residual, dropout-backward, bias-gradient and layer-norm-backward ops, as the op timer
//     (layers/op_timer.h) saw them in the baseline layer on s·b rows and in the same layer on s/t tokens
//     (s·b/t rows). No change of the layer code is involved at all.
// The table shows the fake-comm rows when they ran (GPU: NCCL; CPU: under MPI), else the derived ones.
//
// Where the time goes (--breakdown, on by default): the baseline layer once more with the op timer on, which
// times every public op the layer calls (and the QKᵀ GEMMs and the softmax kernel inside the attention-probs
// op); the sum of the ops is printed next to the layer timed as a whole. --breakdown calls also times each call
// on its own (the QKV linear apart from fc1, and so on), with each GEMM's rate.
//
//   build/layer_bench                                  # the paper's 22B per-rank shape, bf16, on the GPU
//   build/layer_bench --device cpu --hidden 64 --heads 8 --seq 64 --batch 2 --reps 3 --warmup 1
#include <nccl.h>
#include "bench_common.h"
#include "lt_survey.h"

#include "../layers/op_timer.h"
#include "../model/gpt.h"
#include "../model/transformer_layer.h"
#include "../recompute/formulas.h"

// ---- options ---------------------------------------------------------------------------------------------
struct Options {
    int hidden = 6144, heads = 64, seq = 2048, batch = 4, tp = 8;  // Table 3, 22B; t = 8
    int reps = 10, warmup = 3;
    float dropout = 0.1f;
    std::string dtype = "bf16", device = "auto", json, mpi = "auto", sp_emulation = "auto";
    Attention attention = Attention::Unfused;  // --attention: core attention's form in every row
    bool breakdown = true;  // print every op of the baseline layer (--breakdown off to skip)
    bool per_call = false;  // --breakdown calls: every call of an op on its own row as well
    bool lt_survey = false; // --lt-survey on: time the cuBLASLt heuristic's candidates per fused-bias shape
};

static void usage() {
    printf(
        "layer_bench: one transformer layer, forward and backward, the five settings of the paper's Table 4\n"
        "  --hidden H       hidden size h (6144: 22B)          --heads A     attention heads a (64)\n"
        "  --seq S          sequence length s (2048)           --batch B     micro-batch b (4)\n"
        "  --tp-emulated T  tensor-parallel size whose per-rank shape is run (8)\n"
        "  --reps N         timed repetitions, median reported (10)   --warmup W  untimed runs first (3)\n"
        "  --dtype bf16|f32 activation and weight storage (bf16)      --dropout P (0.1)\n"
        "  --attention unfused|flash  core attention in every row (unfused: the paper's, default)\n"
        "  --device auto|cpu|cuda (auto)   --json FILE  write every number as JSON\n"
        "  --sp-emulation auto|fake-comm|derived   how sequence parallelism is emulated (auto: both)\n"
        "  --mpi auto|on|off   bring MPI up (auto: only under mpirun; one process either way)\n"
        "  --breakdown on|off|calls  print the time of every op of the baseline layer: where the time goes (on);\n"
        "                   calls: also every call on its own (QKV, projection, fc1, fc2 apart)\n"
        "  --lt-survey on|off  GPU: time each candidate algorithm of cuBLASLt's heuristic for the fused-bias\n"
        "                   GEMMs the layer ran, first choice against the fastest (off)\n");
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
        else if (bench_flag(argc, argv, i, "--attention", v)) o.attention = bench_attention(v);
        else if (bench_flag(argc, argv, i, "--device", v)) o.device = v;
        else if (bench_flag(argc, argv, i, "--json", v)) o.json = v;
        else if (bench_flag(argc, argv, i, "--mpi", v)) o.mpi = v;
        else if (bench_flag(argc, argv, i, "--sp-emulation", v)) o.sp_emulation = v;
        else if (bench_flag(argc, argv, i, "--lt-survey", v)) {
            if (v != "on" && v != "off") {
                fprintf(stderr, "error: --lt-survey expects on or off, got '%s'\n", v.c_str());
                exit(2);
            }
            o.lt_survey = v == "on";
        }
        else if (bench_flag(argc, argv, i, "--breakdown", v)) {
            if (v != "on" && v != "off" && v != "calls") {
                fprintf(stderr, "error: --breakdown expects on, off or calls, got '%s'\n", v.c_str());
                exit(2);
            }
            o.breakdown = v != "off";
            o.per_call = v == "calls";
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

// ---- the layer, built by the model's own code ----------------------------------------------------------------
// A one-layer GPT (model/gpt.h) whose process grid says it is rank 0 of a t-way tensor-parallel group:
// gpt_create then holds exactly that rank's slices of the weights (parallel/tensor_parallel.h), initialized
// as the trainer initializes them, and gpt_layer_context describes layer 0 at those shapes. The grid's
// communicator is the bench's one-rank one (every collective a no-op); the fake-comm SP runs pass the fake
// t-rank communicator instead (below). The vocabulary is a token 128·t rows: the embedding never runs here.
struct BenchModel {
    ProcessGrid grid;  // tp = t, tp_rank = 0; shares the communicators of the bench's grid (destroyed with it)
    GPT m;
};

static void bench_model_create(BenchModel& bm, const Options& o, const ProcessGrid& single, Ctx& ctx,
                               ActivationAllocator& A, DType dt, uint64_t seed) {
    GPTConfig cfg;
    cfg.layers = 1;
    cfg.heads = o.heads;
    cfg.channels = o.hidden;
    cfg.max_seq = o.seq;
    cfg.vocab = 128 * o.tp;
    cfg.padded_vocab = padded_vocab_for(cfg.vocab);
    bm.grid = single;
    bm.grid.tp = o.tp;
    bm.grid.tp_rank = 0;  // heads 0..a/t-1, MLP columns 0..4h/t-1; sequence shard 0 under SP
    gpt_create(bm.m, cfg, bm.grid, ctx, A, dt, Recompute::None, o.dropout, seed);
    bm.m.attention = o.attention;
    gpt_init_random(bm.m, seed);
}

// Layer 0 for a batch of B sequences of S tokens, with sequence parallelism on or off, on communicator `tp`.
static LayerContext bench_layer(BenchModel& bm, int S, int B, bool sp, Comm* tp) {
    bm.grid.sp = sp;
    bm.m.shape = gpt_step_shape(bm.m, B, S);  // the step in flight, as gpt_forward sets it
    LayerContext run = gpt_layer_context(bm.m, 0);
    run.region.tp = tp;
    return run;
}

// ---- timing one setting ------------------------------------------------------------------------------------
// Per-op times from the op timer (layers/op_timer.h): one row per op name and phase, medians over the runs.
struct OpStat {
    std::string name;  // the op's scope name; "op/part" for a part (attention_probs_forward/qk_gemm)
    bool backward = false;
    int depth = 1;     // 1: an op the layer called; 2: a part of one
    int calls = 0;
    double flops = 0;  // matmul FLOPs of all calls (0: element-wise)
    std::vector<double> all_ms;
    double ms() const { return median_of(all_ms); }
};

struct Result {
    std::string name, method;  // method: "measured", "fake-comm" or "derived"
    Recompute policy = Recompute::None;
    bool sp = false;
    double fwd_ms = NAN, bwd_ms = NAN;
    std::vector<double> fwd_all, bwd_all;
    double saved_bytes = NAN;    // measured: live activation bytes after the forward pass (incl. LN statistics)
    double formula_bytes = NAN;  // the paper's formula (Table 2 split per tensor) + the LN statistics
    std::vector<OpStat> ops;     // with the op timer on only
    double combined() const { return fwd_ms + bwd_ms; }
};

// Fold one run's op-timer totals into the per-op rows. Scopes are "forward/<op>[/<part>]" and
// "backward/<op>[/<part>]" (the two phase scopes of time_layer).
static void add_op_times(std::vector<OpStat>& ops, const std::vector<OpTime>& run) {
    for (const OpTime& t : run) {
        if (t.depth == 0) continue;  // the phase itself: the layer as a whole
        const bool bwd = t.name.rfind("backward/", 0) == 0;
        const std::string name = t.name.substr(t.name.find('/') + 1);
        OpStat* row = nullptr;
        for (OpStat& s : ops)
            if (s.name == name && s.backward == bwd) row = &s;
        if (!row) {
            ops.push_back(OpStat());
            row = &ops.back();
            row->name = name;
            row->backward = bwd;
            row->depth = t.depth;
            row->calls = t.calls;
            row->flops = t.flops;
        }
        row->all_ms.push_back(t.ms);
    }
}

// One input x (the layer's input, [S_loc·B, C]) and one output gradient dy, random, reused by every run.
// Each repetition: copy them into fresh allocator buffers (untimed), then
//   mark 0 · layer_forward · mark 1 · layer_backward · mark 2.
// layer_backward includes what the policy recomputes (Table 4 puts recomputation in the backward column).
// With `per_op`, the op timer is on as well and every op of the two passes is timed (its events sit between
// the marks, so the Table 4 rows are timed with it off).
static Result time_layer(const Options& o, LayerContext& run, Recompute policy, Tensor x_src, Tensor dy_src,
                         const char* name, const char* method, bool per_op = false, bool split_calls = false) {
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
    if (per_op) op_timer_start(split_calls);
    for (int it = 0; it < o.warmup + o.reps; it++) {
        SavedLayer s;
        s.ln1_in = A.alloc(run.dtype, n_act, 0, "ln1_in");
        tensor_convert(ctx, s.ln1_in, x);
        Tensor out = A.alloc(run.dtype, n_act, 1, "tmp:layer_out");
        Tensor dresid = A.alloc(run.dtype, n_act, kModelLevel, "tmp:dresidual");
        tensor_convert(ctx, dresid, dy);
        size_t before = A.live_bytes() - s.ln1_in.bytes();  // the output and its gradient: not saved state

        timer.mark(0);
        {
            OpScope phase(ctx, "forward");
            layer_forward(run, s, out, policy);
        }
        timer.mark(1);
        double saved = (double)(A.live_bytes() - before);
        {
            OpScope phase(ctx, "backward");
            layer_backward(run, s, dresid, policy);
        }
        timer.mark(2);

        double f = timer.ms(0, 1), b = timer.ms(1, 2);
        if (per_op) {
            std::vector<OpTime> t = op_timer_collect();
            if (it >= o.warmup) add_op_times(res.ops, t);
        }
        if (it >= o.warmup) {
            res.fwd_all.push_back(f);
            res.bwd_all.push_back(b);
        }
        res.saved_bytes = saved;
        A.release(out);
        A.release(dresid);
    }
    if (per_op) op_timer_stop();
    res.fwd_ms = median_of(res.fwd_all);
    res.bwd_ms = median_of(res.bwd_all);

    // One layer's part of the formulas only: the vocabulary (0 here) does not enter it.
    const LayerFormulaInput fi = formula_input(run.S, run.B, o.hidden, o.heads, 1, 0, o.tp, res.sp, policy,
                                               (int)dtype_size(run.dtype), o.attention).layer();
    // The paper ignores the layer norms' mean and rstd (2 LNs × 2 × f32 per row); the layer keeps them
    // unless it keeps only its input (full recompute).
    double ln_stats = policy == Recompute::Full ? 0.0 : 16.0 * (double)rows;
    res.formula_bytes = layer_bytes(fi) + ln_stats;
    return res;
}

// ---- the element-wise work that sequence parallelism shrinks by t (for the "derived" emulation) ------------
// The ops layer_forward / layer_backward run OUTSIDE the tensor-parallel regions, on S_loc·B rows:
//   forward : layer norms, bias + dropout + residual;   backward: dropout backward, bias gradient, LN backward.
// Their op-timer times in a layer run on s·b rows and in one on s·b/t rows give what SP saves.
struct ElemTiming { double fwd_ms = NAN, bwd_ms = NAN; };

static bool outside_tp_regions(const OpStat& op) {
    static const char* names[] = {"layernorm_forward", "bias_dropout_residual_forward", "dropout_backward",
                                  "bias_backward", "layernorm_backward"};
    if (op.depth != 1) return false;  // e.g. linear_backward/bias_backward is inside a TP region
    for (const char* n : names)
        if (op.name == n) return true;
    return false;
}

static ElemTiming elementwise_of(const std::vector<OpStat>& ops) {
    ElemTiming e{0.0, 0.0};
    for (const OpStat& op : ops)
        if (outside_tp_regions(op)) (op.backward ? e.bwd_ms : e.fwd_ms) += op.ms();
    return e;
}

// ---- where the time of one layer goes (--breakdown) ---------------------------------------------------------
// Every op layer_forward / layer_backward called, as the op timer saw it in the baseline run; parts of an op
// (the QKᵀ GEMMs and the softmax + dropout kernel of attention_probs_forward) under it. Their sum is printed
// next to the layer timed as a whole (timer off): the difference is launch gaps and the timer's own events.
static double part_ms(const std::vector<OpStat>& ops, const char* name) {
    for (const OpStat& op : ops)
        if (op.name == name) return op.ms();
    return NAN;
}

// With --breakdown calls the rows are single calls, "linear_forward#3"; the four linear calls of a layer
// without SP are named after their weight (layer_forward's order, and layer_backward's reverse one).
static std::string call_label(const std::string& name, bool backward) {
    static const char* fwd[] = {"QKV", "attention projection", "fc1", "fc2"};
    static const char* bwd[] = {"fc2", "fc1", "attention projection", "QKV"};
    const std::string base = backward ? "linear_backward#" : "linear_forward#";
    if (name.rfind(base, 0) != 0 || name.size() != base.size() + 1) return name;
    const int k = name.back() - '1';
    if (k < 0 || k > 3) return name;
    return name + " (" + (backward ? bwd : fwd)[k] + ")";
}

static void print_ops(const std::vector<OpStat>& ops, double layer_fwd, double layer_bwd, bool per_call = false) {
    double fwd = 0, bwd = 0;
    for (const OpStat& op : ops)
        if (op.depth == 1) (op.backward ? bwd : fwd) += op.ms();
    if (per_call)
        printf("\nthe same, call by call (a second run of the baseline; op#k is the op's k-th call in the pass):\n");
    else
        printf("\nwhere one layer's time goes (baseline; every op of layer_forward / layer_backward, op timer on;\n"
               "median of the runs, summed over an op's calls):\n");
    printf("  %-44s %5s %9s %7s %12s\n", "op", "calls", "ms", "share", "matmul TF/s");
    auto rate = [](const OpStat& op) {
        char r[32] = "";
        if (op.flops > 0) snprintf(r, sizeof r, "%.3g", op.flops / (op.ms() * 1e-3) / 1e12);
        return std::string(r);
    };
    for (const OpStat& op : ops) {
        if (op.depth != 1) continue;
        const std::string label = per_call ? call_label(op.name, op.backward) : op.name;
        printf("  %s %-42s %5d %9.3f %6.1f%% %12s\n", op.backward ? "B" : "F", label.c_str(), op.calls, op.ms(),
               100 * op.ms() / (fwd + bwd), rate(op).c_str());
        const std::string prefix = op.name + "/";
        for (const OpStat& part : ops)  // its parts, right under it
            if (part.depth == 2 && part.backward == op.backward && part.name.rfind(prefix, 0) == 0)
                printf("      of which %-31s %5d %9.3f %7s %12s\n", part.name.substr(prefix.size()).c_str(), part.calls,
                       part.ms(), "", rate(part).c_str());
    }
    printf("  sum of ops: fwd %.3f ms, bwd %.3f ms; the layer measured as a whole: fwd %.3f, bwd %.3f ms\n", fwd,
           bwd, layer_fwd, layer_bwd);
}

static void json_ops(JsonOut& j, const std::vector<OpStat>& ops) {
    j.key("breakdown");
    j.open('{');
    j.kv("qk_gemm_ms", part_ms(ops, "attention_probs_forward/qk_gemm"));
    j.key("ops");
    j.open('[');
    for (const OpStat& op : ops) {
        j.open('{');
        j.kv("name", op.name);
        j.kv("phase", op.backward ? "backward" : "forward");
        j.kv("calls", op.calls);
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
    printf("device: %s | dtype %s | dropout %.2f | attention %s | %d warm-up + %d timed runs, median | MPI %s\n",
           dev_name.c_str(), dtype_name(dt), o.dropout, attention_name(o.attention), o.warmup, o.reps,
           mpi ? "on" : "off (one process, no MPI calls)");
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
    BenchModel bm;
    bench_model_create(bm, o, grid, ctx, A, dt, 1234);
    LayerContext tp_layer = bench_layer(bm, S, B, /*sp=*/false, &grid.tp_comm);

    // ---- measured directly: baseline, full recompute, selective recompute (plain TP shapes) ----------------
    std::vector<Result> rows(5);
    // Each result is printed as soon as it exists, so a run cut short still shows what it measured.
    auto progress = [](const Result& r) {
        printf("  done: %-30s %-9s fwd %9.3f ms  bwd %9.3f ms\n", r.name.c_str(), r.method.c_str(), r.fwd_ms, r.bwd_ms);
    };
    rows[0] = time_layer(o, tp_layer, Recompute::None, x_src, dy_src, kTable4[0].name, "measured");
    progress(rows[0]);
    rows[2] = time_layer(o, tp_layer, Recompute::Full, x_src, dy_src, kTable4[2].name, "measured");
    progress(rows[2]);
    rows[3] = time_layer(o, tp_layer, Recompute::Selective, x_src, dy_src, kTable4[3].name, "measured");
    progress(rows[3]);
    const double base = rows[0].combined();

    // ---- the baseline again, op by op: the breakdown, and the element-wise ops at s·b and at s·b/t rows ------
    // The second run is the same layer on a sequence of s/t tokens: its layer norms, dropouts and bias
    // gradients see exactly the rows an SP rank's do.
    const Result per_op = time_layer(o, tp_layer, Recompute::None, x_src, dy_src, "per-op", "measured", true);
    LayerContext short_layer = bench_layer(bm, S / t, B, /*sp=*/false, &grid.tp_comm);
    const Result per_op_short = time_layer(o, short_layer, Recompute::None, x_src, dy_src, "per-op", "measured", true);
    printf("  done: the baseline layer op by op (%zu ops), at s=%d and at s/t=%d\n", per_op.ops.size(), S, S / t);
    Result per_call;
    if (o.per_call) {
        per_call = time_layer(o, tp_layer, Recompute::None, x_src, dy_src, "per-call", "measured", true, true);
        printf("  done: the baseline layer call by call (%zu calls)\n", per_call.ops.size());
    }

    // ---- SP, derived: subtract the element-wise work SP removes -------------------------------------------
    const ElemTiming e_full = elementwise_of(per_op.ops), e_shard = elementwise_of(per_op_short.ops);
    const double dfwd = e_full.fwd_ms - e_shard.fwd_ms, dbwd = e_full.bwd_ms - e_shard.bwd_ms;
    auto derived = [&](const Result& from, const PaperRow& p) {
        Result r;
        r.name = p.name;
        r.method = "derived";
        r.policy = from.policy;
        r.sp = true;
        r.fwd_ms = from.fwd_ms - dfwd;
        r.bwd_ms = from.bwd_ms - dbwd;
        const LayerFormulaInput fi =
            formula_input(S, B, C, o.heads, 1, 0, t, true, from.policy, (int)dtype_size(dt), o.attention).layer();
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
        LayerContext sp_layer = bench_layer(bm, S, B, /*sp=*/true, &fake);
        sp_fake = time_layer(o, sp_layer, Recompute::None, x_src, dy_src, kTable4[1].name, "fake-comm");
        progress(sp_fake);
        fake.counters.reset();
        selsp_fake = time_layer(o, sp_layer, Recompute::Selective, x_src, dy_src, kTable4[4].name, "fake-comm");
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
    if (o.breakdown) print_ops(per_op.ops, rows[0].fwd_ms, rows[0].bwd_ms);
    if (o.per_call) print_ops(per_call.ops, rows[0].fwd_ms, rows[0].bwd_ms, true);
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
        j.kv("attention", attention_name(o.attention));
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
        if (o.breakdown) json_ops(j, per_op.ops);
        j.kv("device_used_gb", device_used_gb(device));
        j.kv("allocator_peak_reserved_gb", A.peak_reserved_bytes() / 1e9);
        j.close('}');
        if (!j.write(o.json)) mm_fatal("could not write %s", o.json.c_str());
        printf("wrote %s\n", o.json.c_str());
    }
    // Last, after the JSON is written: a survey that fails cannot cost the measurements above.
    if (o.lt_survey) {
        if (device == Device::CUDA) linear_lt_survey(ctx);
        else printf("--lt-survey: cuBLASLt runs on the GPU only; nothing to survey on %s\n", device_name(device));
    }

    tensor_free(x_src);
    tensor_free(dy_src);
    gpt_destroy(bm.m);
    bench_grid_destroy(mpi, grid);
    ctx_destroy(ctx);
    bench_mpi_finalize(mpi);
    return 0;
}
