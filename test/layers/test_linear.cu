// test_linear.cu — the linear layer y = x·Wᵀ + b and its backward (layers/linear.cu): the fast CPU path
// (--cpu, label unit) and the GPU path (--gpu, label gpu) against its plain math, layers/reference/linear.h.
//
// CPU checks: the forward against the reference with and without bias; the backward against it with
// prefilled accumulators (dweight and dbias always accumulate, din when asked); directional finite
// differences of L = Σ G ⊙ linear(x, W, b); empty gradients skipped; bf16 storage against fp32 within bf16
// precision; GradWrite::Overwrite into NaN-filled dweight / dbias gives the bits of accumulating into zeros
// (the first write of a step), for dW GEMMs of one and of several output tiles, and zeros for zero rows; the
// bias gradient over 8192 rows against the reference's double sums within 4e-7 (a running sum down the rows
// fails it).
// GPU checks, f32 and bf16, the shapes of test/layers/gpu_shapes.h (N=37, IC=129, OC=67 unpinned and pinned
// to the broadcast path; 64×128×256 pinned to cuBLASLt's fused bias), with and without bias and din
// accumulation: out, din, dweight, dbias against the CPU and the reference (outputs poisoned first), the path
// a pin names is the one taken, the backward twice gives identical bits; GradWrite::Overwrite into poisoned
// dweight / dbias against the CPU's accumulation into zeros and the reference; the LM head's bf16 -> f32
// logits, with a bias (the broadcast path) and without; bias_backward over 1500 rows (the two-stage GPU
// reduction; C = 67 and 776: the element-by-element and the 16-byte paths), twice bitwise, against the CPU
// and the reference; over 33,554,432 rows (more row chunks than a grid's y dimension holds: the capped
// grid's stride loop) against the CPU and the exact sum.
#include <algorithm>
#include "layers/linear.h"
#include "layers/reference/linear.h"
#include "test/layers/gpu_shapes.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/linear.h
// =========================================================================================================

static void test_linear(Ctx& ctx) {
    const int N = 5, IC = 7, OC = 6;
    std::vector<float> x = random_vec(N * IC, g_rng), W = random_vec(OC * IC, g_rng), b = random_vec(OC, g_rng);
    std::vector<float> G = random_vec(N * OC, g_rng);  // dL/dout for L = Σ G ⊙ out
    std::vector<float> out(N * OC, NAN);
    Tensor none;
    // Forward against a double reference, with and without bias.
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        linear_forward(ctx, cpu_view(out), cpu_view(x), cpu_view(W), with_bias ? cpu_view(b) : none, N, IC, OC);
        std::vector<float> ref(N * OC);
        ref_linear_forward(ref.data(), x.data(), W.data(), with_bias ? b.data() : nullptr, N, IC, OC);
        CHECK(max_rel_err(out, ref) < 1e-5, "linear_forward bias=%d", with_bias);
    }
    // Backward with accumulating outputs prefilled: dW and dbias always accumulate; din when asked.
    std::vector<float> din0 = random_vec(N * IC, g_rng), dW0 = random_vec(OC * IC, g_rng), db0 = random_vec(OC, g_rng);
    for (int acc = 0; acc < 2; acc++) {
        std::vector<float> din = acc ? din0 : std::vector<float>(N * IC, NAN), dW = dW0, db = db0;
        linear_backward(ctx, cpu_view(din), cpu_view(dW), cpu_view(db), cpu_view(G), cpu_view(x), cpu_view(W), N, IC, OC,
                        acc == 1);
        std::vector<float> rdin = acc ? din0 : std::vector<float>(N * IC, 0.f), rdW = dW0, rdb = db0;
        ref_linear_backward(rdin.data(), rdW.data(), rdb.data(), G.data(), x.data(), W.data(), N, IC, OC, acc == 1);
        CHECK(max_rel_err(din, rdin) < 1e-5, "linear din (accumulate_din=%d)", acc);
        CHECK(max_rel_err(dW, rdW) < 1e-5, "linear dweight accumulates (acc=%d)", acc);
        CHECK(max_rel_err(db, rdb) < 1e-5, "linear dbias accumulates (acc=%d)", acc);
    }
    // Finite differences of L = Σ G ⊙ linear(x, W, b) along random directions.
    std::vector<float> din(N * IC), dW(OC * IC, 0.f), db(OC, 0.f);
    linear_backward(ctx, cpu_view(din), cpu_view(dW), cpu_view(db), cpu_view(G), cpu_view(x), cpu_view(W), N, IC, OC);
    auto loss = [&]() {
        linear_forward(ctx, cpu_view(out), cpu_view(x), cpu_view(W), cpu_view(b), N, IC, OC);
        return dot(G, out);
    };
    std::vector<float> dx = random_vec(x.size(), g_rng), dw = random_vec(W.size(), g_rng), dbb = random_vec(OC, g_rng);
    check_fd("linear din", fd_directional(x, dx, 1e-2f, loss), dot(din, dx), 1e-3);
    check_fd("linear dweight", fd_directional(W, dw, 1e-2f, loss), dot(dW, dw), 1e-3);
    check_fd("linear dbias", fd_directional(b, dbb, 1e-2f, loss), dot(db, dbb), 1e-3);
    // Empty gradients are skipped.
    std::vector<float> only_db(OC, 0.f);
    linear_backward(ctx, none, none, cpu_view(only_db), cpu_view(G), cpu_view(x), cpu_view(W), N, IC, OC);
    std::vector<double> want_db(OC, 0.0);
    ref_bias_backward(want_db.data(), G.data(), N, OC);
    for (int o = 0; o < OC; o++) CHECK(std::fabs(only_db[o] - want_db[o]) < 1e-5, "bias-only backward col %d", o);
}

// bf16 storage vs fp32: inputs rounded to bf16; results agree within bf16 precision.
static void test_linear_bf16(Ctx& ctx) {
    const int N = 9, IC = 33, OC = 17;
    std::vector<float> x = round_bf16(random_vec(N * IC, g_rng)), W = round_bf16(random_vec(OC * IC, g_rng)),
                       b = round_bf16(random_vec(OC, g_rng)), G = round_bf16(random_vec(N * OC, g_rng));
    std::vector<float> res[2][4];
    for (int k = 0; k < 2; k++) {
        DType dt = k ? DType::BF16 : DType::F32;
        Tensor tx = make_tensor(Device::CPU, dt, x), tw = make_tensor(Device::CPU, dt, W),
               tb = make_tensor(Device::CPU, dt, b), tg = make_tensor(Device::CPU, dt, G),
               out = tensor_alloc(Device::CPU, dt, N * OC), din = tensor_alloc(Device::CPU, dt, N * IC),
               dW = tensor_zeros(Device::CPU, DType::F32, OC * IC), db = tensor_zeros(Device::CPU, DType::F32, OC);
        linear_forward(ctx, out, tx, tw, tb, N, IC, OC);
        linear_backward(ctx, din, dW, db, tg, tx, tw, N, IC, OC);
        res[k][0] = tensor_to_host_f32(out);
        res[k][1] = tensor_to_host_f32(din);
        res[k][2] = tensor_to_host_f32(dW);
        res[k][3] = tensor_to_host_f32(db);
        free_all({&tx, &tw, &tb, &tg, &out, &din, &dW, &db});
    }
    const char* names[4] = {"out", "din", "dweight", "dbias"};
    for (int i = 0; i < 4; i++)
        CHECK(norm_rel_err(res[1][i], res[0][i]) < 1e-2, "bf16 linear %s: norm rel err %.3g", names[i],
              norm_rel_err(res[1][i], res[0][i]));
}

// The first write of a step (GradWrite::Overwrite): dweight and dbias come out as if they had been zeroed and
// accumulated into, bit for bit, without being read (they start as NaN). OC = 300 cuts the dW GEMM into two
// output tiles of the CPU GEMM (matmul.cu); bf16 activations widen A and B first.
static void test_linear_overwrite(Ctx& ctx) {
    for (DType dt : {DType::F32, DType::BF16})
        for (int OC : {67, 300}) {
            const int N = 37, IC = 129;
            std::vector<float> x = round_to(dt, random_vec(N * IC, g_rng)), G = round_to(dt, random_vec(N * OC, g_rng));
            Tensor tx = make_tensor(Device::CPU, dt, x), tg = make_tensor(Device::CPU, dt, G), none;
            std::vector<float> res[2][2];
            for (int over = 0; over < 2; over++) {
                Tensor dW = over ? poisoned_tensor(Device::CPU, DType::F32, (int64_t)OC * IC)
                                 : tensor_zeros(Device::CPU, DType::F32, (int64_t)OC * IC);
                Tensor db = over ? poisoned_tensor(Device::CPU, DType::F32, OC) : tensor_zeros(Device::CPU, DType::F32, OC);
                linear_backward(ctx, none, dW, db, tg, tx, none, N, IC, OC, false,
                                over ? GradWrite::Overwrite : GradWrite::Accumulate);
                res[over][0] = tensor_to_host_f32(dW);
                res[over][1] = tensor_to_host_f32(db);
                free_all({&dW, &db});
            }
            CHECK(bitwise_equal(res[1][0], res[0][0]), "Overwrite dweight == zeros + accumulate, bitwise [%s OC=%d]",
                  dtype_name(dt), OC);
            CHECK(bitwise_equal(res[1][1], res[0][1]), "Overwrite dbias == zeros + accumulate, bitwise [%s OC=%d]",
                  dtype_name(dt), OC);
            free_all({&tx, &tg});
        }
    // No rows: the sums are empty, so an overwritten gradient is zero (and an accumulated one unchanged).
    Tensor dW = poisoned_tensor(Device::CPU, DType::F32, 6 * 7), db = poisoned_tensor(Device::CPU, DType::F32, 6);
    Tensor empty_in = tensor_zeros(Device::CPU, DType::F32, 0), empty_out = tensor_zeros(Device::CPU, DType::F32, 0);
    linear_backward(ctx, Tensor(), dW, db, empty_out, empty_in, Tensor(), 0, 7, 6, false, GradWrite::Overwrite);
    for (float v : tensor_to_host_f32(dW)) CHECK(v == 0.f, "Overwrite with N = 0: dweight %g, expected 0", v);
    for (float v : tensor_to_host_f32(db)) CHECK(v == 0.f, "Overwrite with N = 0: dbias %g, expected 0", v);
    free_all({&dW, &db, &empty_in, &empty_out});
}

// The bias gradient is a sum over all the step's rows (batch × sequence: thousands). Summed down the rows in
// one running float, its error grows with N; the pairwise order (vec8.h, cpu_pairwise_row_sums) keeps it near
// one rounding. Terms in [0.5, 1.5] (a sum that only grows: the running sum's worst case), N = 8192: the
// running sum's error was 2e-6 relative (bench/PERF_NOTES.md "Accuracy"), the bound here is 4e-7.
static void test_bias_backward_accuracy(Ctx& ctx) {
    const int N = 8192, C = 67;
    std::vector<float> G = random_vec((size_t)N * C, g_rng, 0.5f, 1.5f), db(C);
    bias_backward(ctx, cpu_view(db), cpu_view(G), N, C, GradWrite::Overwrite);
    std::vector<double> want(C, 0.0);  // the reference's sums kept in double: the bound is below fp32's rounding
    ref_bias_backward(want.data(), G.data(), N, C);
    double worst = 0;
    for (int c = 0; c < C; c++) worst = std::max(worst, std::fabs(db[c] - want[c]) / want[c]);
    CHECK(worst < 4e-7, "bias_backward over %d rows vs double: relative error %.3g (bound 4e-7)", N, worst);
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_linear(g_cpu);
    test_linear_bf16(g_cpu);
    test_linear_overwrite(g_cpu);
    test_bias_backward_accuracy(g_cpu);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

struct LinearOut {
    std::vector<float> out, din, dW, db;
};

static LinearOut linear_run(Device dev, DType dt, DType out_dt, const std::vector<float>& x, const std::vector<float>& W,
                            const std::vector<float>& b, const std::vector<float>& G, const std::vector<float>& din0,
                            const std::vector<float>& dW0, const std::vector<float>& db0, int N, int IC, int OC,
                            bool acc_din, int repeats = 1, bool* repeat_bitwise = nullptr,
                            GradWrite grads = GradWrite::Accumulate) {
    Ctx& ctx = ctx_of(dev);
    Tensor tx = make_tensor(dev, dt, x), tw = make_tensor(dev, dt, W);
    Tensor tb = b.empty() ? Tensor() : make_tensor(dev, dt, b), tg = make_tensor(dev, dt, G);
    Tensor out = poisoned_tensor(dev, out_dt, (int64_t)N * OC);
    linear_forward(ctx, out, tx, tw, tb, N, IC, OC);
    LinearOut r;
    r.out = to_host(out);
    for (int rep = 0; rep < repeats; rep++) {
        Tensor din = acc_din ? make_tensor(dev, dt, din0) : poisoned_tensor(dev, dt, (int64_t)N * IC);
        // Overwrite: the gradients start as NaN, which must not be read.
        const bool over = grads == GradWrite::Overwrite;
        Tensor dW = over ? poisoned_tensor(dev, DType::F32, (int64_t)OC * IC) : make_tensor(dev, DType::F32, dW0);
        Tensor db = over ? poisoned_tensor(dev, DType::F32, OC) : make_tensor(dev, DType::F32, db0);
        linear_backward(ctx, din, dW, b.empty() ? Tensor() : db, tg, tx, tw, N, IC, OC, acc_din, grads);
        LinearOut cur{{}, to_host(din), to_host(dW), to_host(db)};
        if (rep == 0) {
            r.din = cur.din;
            r.dW = cur.dW;
            r.db = cur.db;
        } else if (repeat_bitwise) {
            *repeat_bitwise &= bitwise_equal(cur.din, r.din) && bitwise_equal(cur.dW, r.dW) && bitwise_equal(cur.db, r.db);
        }
        tensor_free(din);
        tensor_free(dW);
        tensor_free(db);
    }
    free_all({&tx, &tw, &tb, &tg, &out});
    return r;
}

// The reference's out, din (accumulated onto din0 when asked), dweight and dbias (onto dW0, db0).
static LinearOut linear_reference(const std::vector<float>& x, const std::vector<float>& W, const std::vector<float>& b,
                                  const std::vector<float>& G, const std::vector<float>& din0,
                                  const std::vector<float>& dW0, const std::vector<float>& db0, int N, int IC, int OC,
                                  bool acc_din) {
    LinearOut r;
    r.out.resize((size_t)N * OC);
    ref_linear_forward(r.out.data(), x.data(), W.data(), b.empty() ? nullptr : b.data(), N, IC, OC);
    r.din = acc_din ? din0 : std::vector<float>((size_t)N * IC, 0.f);
    r.dW = dW0;
    r.db = db0;
    ref_linear_backward(r.din.data(), r.dW.data(), r.db.data(), G.data(), x.data(), W.data(), N, IC, OC, acc_din);
    return r;
}

// The forward path a pinned case must have taken (linear_forward_pin; NoBias: not pinned, nothing to check).
static void check_pinned_path(const LinearGpuCase& cs, bool with_bias, DType dt) {
    if (cs.pin == LinearForwardPath::NoBias || !with_bias) return;
    CHECK(linear_forward_last_path() == cs.pin, "linear N=%d IC=%d OC=%d pinned to %s ran %s [%s]", cs.N, cs.IC,
          cs.OC, linear_forward_path_name(cs.pin), linear_forward_path_name(linear_forward_last_path()),
          dtype_name(dt));
}

static void test_linear_gpu_case(const LinearGpuCase& cs) {
    const int N = cs.N, IC = cs.IC, OC = cs.OC;
    linear_forward_pin(cs.pin);
    for (DType dt : {DType::F32, DType::BF16})
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int acc = 0; acc < 2; acc++) {
                if (!runs_in(cs.dtypes, dt)) continue;
                std::vector<float> x = round_to(dt, random_vec(N * IC, g_rng)), W = round_to(dt, random_vec(OC * IC, g_rng)),
                                   b = with_bias ? round_to(dt, random_vec(OC, g_rng)) : std::vector<float>(),
                                   G = round_to(dt, random_vec(N * OC, g_rng)),
                                   din0 = round_to(dt, random_vec(N * IC, g_rng)), dW0 = random_vec(OC * IC, g_rng),
                                   db0 = random_vec(OC, g_rng);
                bool bitwise = true;
                LinearOut c = linear_run(Device::CPU, dt, dt, x, W, b, G, din0, dW0, db0, N, IC, OC, acc);
                LinearOut g = linear_run(Device::CUDA, dt, dt, x, W, b, G, din0, dW0, db0, N, IC, OC, acc, 2, &bitwise);
                check_pinned_path(cs, with_bias, dt);
                char what[160];
                snprintf(what, sizeof what, "linear N=%d IC=%d OC=%d path=%s bias=%d acc_din=%d", N, IC, OC,
                         linear_forward_path_name(cs.pin), with_bias, acc);
                std::string w(what);
                check_close_norm((w + " out").c_str(), dt, g.out, c.out);
                check_close_norm((w + " din").c_str(), dt, g.din, c.din);
                // dW and dbias are f32 buffers: their error comes from the inputs' dtype only.
                check_close_norm((w + " dweight").c_str(), dt, g.dW, c.dW);
                if (with_bias) check_close_norm((w + " dbias").c_str(), dt, g.db, c.db);
                // Both against the reference (layers/reference/linear.h) on the same rounded inputs.
                LinearOut r = linear_reference(x, W, b, G, din0, dW0, db0, N, IC, OC, acc != 0);
                check_norm_vs_reference(w + " out", dt, g.out, c.out, r.out);
                check_norm_vs_reference(w + " din", dt, g.din, c.din, r.din);
                check_norm_vs_reference(w + " dweight", dt, g.dW, c.dW, r.dW);
                if (with_bias) check_norm_vs_reference(w + " dbias", dt, g.db, c.db, r.db);
                CHECK(bitwise, "%s: backward twice gives identical bits [%s]", what, dtype_name(dt));
            }
    linear_forward_pin(LinearForwardPath::NoBias);
}

// The LM head's dtypes: bf16 input and weight, f32 output; with a bias (the broadcast kernel <f32, bf16>: the
// fused GEMM takes one dtype only) and without.
static void test_linear_gpu_f32_out(const LinearGpuCase& cs) {
    const int N = cs.N, IC = cs.IC, OC = cs.OC;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        std::vector<float> x = round_bf16(random_vec(N * IC, g_rng)), W = round_bf16(random_vec(OC * IC, g_rng));
        std::vector<float> b = with_bias ? round_bf16(random_vec(OC, g_rng)) : std::vector<float>();
        std::vector<float> G(N * OC, 0.f), zW(OC * IC, 0.f), zb(OC, 0.f);
        LinearOut c = linear_run(Device::CPU, DType::BF16, DType::F32, x, W, b, G, {}, zW, zb, N, IC, OC, false);
        LinearOut g = linear_run(Device::CUDA, DType::BF16, DType::F32, x, W, b, G, {}, zW, zb, N, IC, OC, false);
        if (with_bias)
            CHECK(linear_forward_last_path() == LinearForwardPath::Broadcast, "linear bf16 -> f32 with a bias ran %s",
                  linear_forward_path_name(linear_forward_last_path()));
        check_close_norm(with_bias ? "linear bf16 -> f32 logits, bias" : "linear bf16 -> f32 logits", DType::F32,
                         g.out, c.out, 1e-5);
        check_norm_vs_reference(with_bias ? "linear bf16 -> f32 logits, bias" : "linear bf16 -> f32 logits",
                                DType::F32, g.out, c.out, linear_reference(x, W, b, G, {}, zW, zb, N, IC, OC, false).out,
                                1e-5);
    }
}

static void test_linear_gpu() {
    // The shapes (test/layers/gpu_shapes.h, where test_kernel_coverage reads them too): each forward path
    // pinned, and the trainer's own choice at an odd shape.
    for (const LinearGpuCase& cs : kLinearGpuCases) {
        if (cs.out_f32) test_linear_gpu_f32_out(cs);
        else test_linear_gpu_case(cs);
    }
    const int N = 37, IC = 129, OC = 67;
    // The first write of a step: the GPU overwriting poisoned gradients against the CPU accumulating into zeros.
    for (DType dt : {DType::F32, DType::BF16}) {
        std::vector<float> x = round_to(dt, random_vec(N * IC, g_rng)), W = round_to(dt, random_vec(OC * IC, g_rng)),
                           b = round_to(dt, random_vec(OC, g_rng)), G = round_to(dt, random_vec(N * OC, g_rng));
        const std::vector<float> zW(OC * IC, 0.f), zb(OC, 0.f);
        LinearOut c = linear_run(Device::CPU, dt, dt, x, W, b, G, {}, zW, zb, N, IC, OC, false);
        bool bitwise = true;
        LinearOut g = linear_run(Device::CUDA, dt, dt, x, W, b, G, {}, zW, zb, N, IC, OC, false, 2, &bitwise,
                                 GradWrite::Overwrite);
        check_close_norm("linear Overwrite dweight", dt, g.dW, c.dW);
        check_close_norm("linear Overwrite dbias", dt, g.db, c.db);
        LinearOut r = linear_reference(x, W, b, G, {}, zW, zb, N, IC, OC, false);
        check_norm_vs_reference("linear Overwrite dweight", dt, g.dW, c.dW, r.dW);
        check_norm_vs_reference("linear Overwrite dbias", dt, g.db, c.db, r.db);
        CHECK(bitwise, "linear Overwrite: backward twice gives identical bits [%s]", dtype_name(dt));
    }
    // bias_backward over many rows (several row chunks in the two-stage GPU reduction), twice: same bits.
    // C = 67: packs of 8 columns loaded element by element (rows not 16-byte aligned), a partial last pack;
    // C = 776: 16-byte loads, three full column tiles of 256 and one of a single pack.
    for (int C : {67, 776})
    for (DType dt : {DType::F32, DType::BF16}) {
        const int NR = 1500;
        std::vector<float> dout = round_to(dt, random_vec((size_t)NR * C, g_rng)), db0 = random_vec(C, g_rng);
        std::vector<float> res[2], again;
        for (Device dev : {Device::CPU, Device::CUDA}) {
            for (int rep = 0; rep < (dev == Device::CUDA ? 2 : 1); rep++) {
                Tensor td = make_tensor(dev, dt, dout), db = make_tensor(dev, DType::F32, db0);
                bias_backward(ctx_of(dev), db, td, NR, C);
                (rep ? again : res[dev == Device::CUDA]) = to_host(db);
                tensor_free(td);
                tensor_free(db);
            }
        }
        check_close_norm(C == 67 ? "bias_backward N=1500 C=67" : "bias_backward N=1500 C=776", dt, res[1], res[0], 1e-5);
        std::vector<float> ref = db0;
        ref_bias_backward(ref.data(), dout.data(), NR, C);
        check_norm_vs_reference(C == 67 ? "bias_backward N=1500 C=67" : "bias_backward N=1500 C=776", dt, res[1], res[0],
                                ref, 1e-5);
        CHECK(bitwise_equal(res[1], again), "bias_backward twice: identical bits [%s C=%d]", dtype_name(dt), C);
    }
    // More row chunks (of 512) than a grid's y dimension takes (65535): the capped grid strides over them.
    // Rows hold r % 3 - 1 (exact in bf16), so every partial sum is an integer below 2^24, exact in fp32 in any
    // order: the GPU and the CPU must give the same bits, and 2^25 rows sum to -1.
    {
        const int NR = 1 << 25;
        std::vector<float> dout((size_t)NR);
        for (int r = 0; r < NR; r++) dout[(size_t)r] = (float)(r % 3 - 1);
        std::vector<float> res[2];
        for (Device dev : {Device::CPU, Device::CUDA}) {
            Tensor td = make_tensor(dev, DType::BF16, dout), db = make_tensor(dev, DType::F32, {0.f});
            bias_backward(ctx_of(dev), db, td, NR, 1);
            res[dev == Device::CUDA] = to_host(db);
            tensor_free(td);
            tensor_free(db);
        }
        CHECK(res[0][0] == -1.f && res[1][0] == -1.f, "bias_backward over %d rows (65536 chunks): CPU %g, GPU %g, want -1",
              NR, res[0][0], res[1][0]);
    }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_linear_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_linear", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
