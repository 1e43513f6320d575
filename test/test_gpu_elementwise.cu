// test_gpu_elementwise.cu — every element-wise CUDA kernel against the CPU reference (label: gpu).
//
// For f32 and bf16 storage and for shapes that are not multiples of any block size: layernorm forward and
// backward, GeLU forward and backward, residual add and accumulate, bias+dropout+residual forward (masks bit
// for bit, with global-coordinate offsets), dropout backward, AdamW (3 steps), sum_of_squares (single and batched), scale_inplace.
// GPU outputs are poisoned with NaN before each call (and u8 masks with 7), so an element a kernel forgets
// to write fails the comparison; accumulating outputs (din, dweight, dbias, accumulate's dst) are prefilled
// with the same random values on both devices. Determinism: layernorm_backward and sum_of_squares run twice
// give bitwise identical results.
// Tolerances: f32 1e-5 relative (+1e-5·rms absolute; reductions over rows 1e-4·rms, since the two devices add
// in different orders); bf16 storage 1e-2.
#include <cstdint>
#include "../layers/adamw.h"
#include "../layers/dropout.h"
#include "../layers/gelu.h"
#include "../layers/layernorm.h"
#include "../layers/philox.h"
#include "../layers/residual.h"
#include "test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu, g_gpu;

// The same values on both devices.
struct Pair {
    Tensor c, g;
};
static Pair both(DType dt, const vf& v) {
    return {make_tensor(Device::CPU, dt, v), make_tensor(Device::CUDA, dt, v)};
}
// Output buffers: both poisoned (NaN for activations, 7 for u8 masks), so unwritten elements show.
static Pair make_poisoned(DType dt, int64_t n) {
    Pair p{tensor_alloc(Device::CPU, dt, n), tensor_alloc(Device::CUDA, dt, n)};
    float poison = dt == DType::U8 ? 7.0f : NAN;
    tensor_fill_f32(p.c, poison);
    tensor_fill_f32(p.g, poison);
    return p;
}
static void free_pairs(std::initializer_list<Pair*> ps) {
    for (Pair* p : ps) {
        tensor_free(p->c);
        tensor_free(p->g);
    }
}
static vf get(Tensor t) { return tensor_to_host_f32(t); }
static double rms(const vf& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (v.empty() ? 1 : (double)v.size()));
}

// Every element: |got - want| <= rtol·|want| + atol·rms(want), and no NaN anywhere. Prints the worst.
static void check_close(const vf& got, const vf& want, double rtol, double atol, const char* what,
                        const char* dt, int N, int C) {
    bool ok = got.size() == want.size();
    double worst = 0;
    size_t worst_i = 0;
    const double scale = rms(want);
    for (size_t i = 0; ok && i < got.size(); i++) {
        double err = std::fabs((double)got[i] - (double)want[i]);
        double allowed = rtol * std::fabs((double)want[i]) + atol * scale;
        if (std::isnan(got[i]) || std::isnan(want[i])) {
            ok = false, worst_i = i, worst = INFINITY;
            break;
        }
        double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
        if (ratio > worst) worst = ratio, worst_i = i;
    }
    if (worst > 1) ok = false;
    CHECK(ok, "%s [%s, N=%d C=%d]: worst element %zu: gpu %.8g cpu %.8g (error / allowed = %.3g)", what, dt, N, C,
          worst_i, worst_i < got.size() ? got[worst_i] : 0.f, worst_i < want.size() ? want[worst_i] : 0.f, worst);
}

struct Tol {
    double rtol, atol, atol_reduce;
};
static Tol tol_for(DType dt) { return dt == DType::F32 ? Tol{1e-5, 1e-5, 1e-4} : Tol{1e-2, 1e-2, 1e-2}; }

// ---------------------------------------------------------------------------------------------------------
static void test_layernorm(DType dt, int N, int C, std::mt19937& rng) {
    const Tol tol = tol_for(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)N * C;
    vf xv = random_vec(n, rng, -2.f, 2.f);
    for (int r = 0; r < N; r++)  // per-row offsets, as in the residual stream
        for (int c = 0; c < C; c++) xv[(size_t)r * C + c] += 0.1f * (r % 7);
    Pair x = both(dt, xv), w = both(dt, random_vec(C, rng, 0.5f, 1.5f)), b = both(dt, random_vec(C, rng));
    Pair out = make_poisoned(dt, n), mean = make_poisoned(DType::F32, N), rstd = make_poisoned(DType::F32, N);
    layernorm_forward(g_cpu, out.c, mean.c, rstd.c, x.c, w.c, b.c, N, C);
    layernorm_forward(g_gpu, out.g, mean.g, rstd.g, x.g, w.g, b.g, N, C);
    vf out_g = get(out.g);
    check_close(out_g, get(out.c), tol.rtol, tol.atol, "layernorm_forward out", dn, N, C);
    check_close(get(mean.g), get(mean.c), 1e-5, 1e-5, "layernorm_forward mean", dn, N, C);
    check_close(get(rstd.g), get(rstd.c), 1e-5, 1e-5, "layernorm_forward rstd", dn, N, C);
    // without mean/rstd (a caller that does not keep them): the same output bits
    Pair out2 = make_poisoned(dt, n);
    layernorm_forward(g_gpu, out2.g, Tensor(), Tensor(), x.g, w.g, b.g, N, C);
    CHECK(bitwise_equal(get(out2.g), out_g), "layernorm_forward without mean/rstd differs [%s N=%d C=%d]", dn, N, C);

    // backward: both devices get the CPU's mean/rstd, so only the backward is compared
    Tensor mean_g2 = make_tensor(Device::CUDA, DType::F32, get(mean.c));
    Tensor rstd_g2 = make_tensor(Device::CUDA, DType::F32, get(rstd.c));
    vf din0 = random_vec(n, rng), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
    Pair dout = both(dt, random_vec(n, rng));
    Pair din = both(dt, din0), dw = both(DType::F32, dw0), db = both(DType::F32, db0);
    layernorm_backward(g_cpu, din.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N, C);
    layernorm_backward(g_gpu, din.g, dw.g, db.g, dout.g, x.g, w.g, mean_g2, rstd_g2, N, C);
    vf din_1 = get(din.g), dw_1 = get(dw.g), db_1 = get(db.g);
    check_close(din_1, get(din.c), tol.rtol, tol.atol, "layernorm_backward din (accumulated)", dn, N, C);
    check_close(dw_1, get(dw.c), tol.rtol, tol.atol_reduce, "layernorm_backward dweight (accumulated)", dn, N, C);
    check_close(db_1, get(db.c), tol.rtol, tol.atol_reduce, "layernorm_backward dbias (accumulated)", dn, N, C);
    // determinism: the same call again from the same prefilled values gives the same bits
    tensor_from_host_f32(din.g, din0.data());
    tensor_from_host_f32(dw.g, dw0.data());
    tensor_from_host_f32(db.g, db0.data());
    layernorm_backward(g_gpu, din.g, dw.g, db.g, dout.g, x.g, w.g, mean_g2, rstd_g2, N, C);
    CHECK(bitwise_equal(get(dw.g), dw_1) && bitwise_equal(get(db.g), db_1) && bitwise_equal(get(din.g), din_1),
          "layernorm_backward is not bitwise reproducible [%s N=%d C=%d]", dn, N, C);
    tensor_free(mean_g2);
    tensor_free(rstd_g2);
    free_pairs({&x, &w, &b, &out, &mean, &rstd, &out2, &dout, &din, &dw, &db});
}

// ---------------------------------------------------------------------------------------------------------
static void test_gelu_residual(DType dt, int N, int C, std::mt19937& rng) {
    const Tol tol = tol_for(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)N * C;
    vf xv = random_vec(n, rng, -5.f, 5.f);
    xv[0] = -100.f, xv[1] = 100.f, xv[2] = 0.f;
    Pair x = both(dt, xv), dout = both(dt, random_vec(n, rng));
    Pair y = make_poisoned(dt, n), dx = make_poisoned(dt, n);
    gelu_forward(g_cpu, y.c, x.c, n);
    gelu_forward(g_gpu, y.g, x.g, n);
    check_close(get(y.g), get(y.c), tol.rtol, tol.atol, "gelu_forward", dn, N, C);
    gelu_backward(g_cpu, dx.c, x.c, dout.c, n);
    gelu_backward(g_gpu, dx.g, x.g, dout.g, n);
    check_close(get(dx.g), get(dx.c), tol.rtol, tol.atol, "gelu_backward", dn, N, C);

    Pair a = both(dt, random_vec(n, rng)), b = both(dt, random_vec(n, rng)), s = make_poisoned(dt, n);
    residual_forward(g_cpu, s.c, a.c, b.c, n);
    residual_forward(g_gpu, s.g, a.g, b.g, n);
    check_close(get(s.g), get(s.c), tol.rtol, tol.atol, "residual_forward", dn, N, C);
    accumulate(g_cpu, a.c, b.c, n);  // a was prefilled with the same random values on both devices
    accumulate(g_gpu, a.g, b.g, n);
    check_close(get(a.g), get(a.c), tol.rtol, tol.atol, "accumulate", dn, N, C);
    free_pairs({&x, &dout, &y, &dx, &a, &b, &s});
}

// ---------------------------------------------------------------------------------------------------------
// Bias + dropout + residual on a block [S, B, C] placed at (s_offset, b_offset) of a global batch B_total.
static void test_dropout(DType dt, int S, int B, int C, float p, bool with_bias, bool with_resid,
                         std::mt19937& rng) {
    const Tol tol = tol_for(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)S * B * C;
    DropoutCoords where;
    where.s_offset = 11, where.b_offset = 1, where.B_total = B + 3;
    const uint64_t seed = 0x5eed0000beefull + (uint64_t)n;
    const uint32_t stream = dropout_stream(5, kSiteAttnOut);
    Pair x = both(dt, random_vec(n, rng)), bias = both(dt, random_vec(C, rng));
    Pair resid = both(dt, random_vec(n, rng));
    Pair out = make_poisoned(dt, n), mask = make_poisoned(DType::U8, n);
    Tensor no;
    bias_dropout_residual_forward(g_cpu, out.c, mask.c, x.c, with_bias ? bias.c : no, with_resid ? resid.c : no, p,
                                  seed, stream, S, B, C, where);
    bias_dropout_residual_forward(g_gpu, out.g, mask.g, x.g, with_bias ? bias.g : no, with_resid ? resid.g : no, p,
                                  seed, stream, S, B, C, where);
    vf mc = get(mask.c), mg = get(mask.g);
    int64_t kept = 0;
    bool only01 = true;
    for (float m : mg) {
        if (m == 1.0f) kept++;
        if (m != 0.0f && m != 1.0f) only01 = false;
    }
    CHECK(bitwise_equal(mg, mc), "dropout masks differ between GPU and CPU [%s S=%d B=%d C=%d p=%.2f]", dn, S, B, C, p);
    CHECK(only01, "GPU mask holds bytes other than 0/1 (unwritten?) [%s S=%d B=%d C=%d]", dn, S, B, C);
    if (p == 0.0f) CHECK(kept == n, "p = 0: GPU mask not all ones (%lld of %lld)", (long long)kept, (long long)n);
    check_close(get(out.g), get(out.c), tol.rtol, tol.atol, "bias_dropout_residual_forward", dn, S * B, C);

    // dropout_backward with the mask just made
    Pair dout = both(dt, random_vec(n, rng)), dx = make_poisoned(dt, n);
    dropout_backward(g_cpu, dx.c, dout.c, mask.c, p, n);
    dropout_backward(g_gpu, dx.g, dout.g, mask.g, p, n);
    check_close(get(dx.g), get(dx.c), tol.rtol, tol.atol, "dropout_backward", dn, S * B, C);
    free_pairs({&x, &bias, &resid, &out, &mask, &dout, &dx});
}

// ---------------------------------------------------------------------------------------------------------
static void test_adamw_and_reductions(DType grad_dt, int64_t n, std::mt19937& rng) {
    const char* dn = dtype_name(grad_dt);
    Pair p = both(DType::F32, random_vec(n, rng));
    Pair m = both(DType::F32, vf(n, 0.0f)), v = both(DType::F32, vf(n, 0.0f));
    for (int t = 1; t <= 3; t++) {
        Pair g = both(grad_dt, random_vec(n, rng));
        adamw_update(g_cpu, p.c, g.c, m.c, v.c, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        adamw_update(g_gpu, p.g, g.g, m.g, v.g, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        free_pairs({&g});
    }
    check_close(get(p.g), get(p.c), 1e-5, 1e-6, "adamw param", dn, (int)n, 1);
    check_close(get(m.g), get(m.c), 1e-5, 1e-6, "adamw m", dn, (int)n, 1);
    check_close(get(v.g), get(v.c), 1e-5, 1e-6, "adamw v", dn, (int)n, 1);

    // sum of squares (of an f32 or bf16 tensor): fp64 accumulation on both devices, different order
    Pair x = both(grad_dt, random_vec(n, rng, -3.f, 3.f));
    double sc = sum_of_squares(g_cpu, x.c), sg1 = sum_of_squares(g_gpu, x.g), sg2 = sum_of_squares(g_gpu, x.g);
    CHECK(std::fabs(sg1 - sc) <= 1e-12 * sc, "sum_of_squares [%s n=%lld]: gpu %.17g cpu %.17g", dn, (long long)n, sg1, sc);
    CHECK(memcmp(&sg1, &sg2, sizeof(double)) == 0, "sum_of_squares not bitwise reproducible on GPU");
    // the batched form (one synchronization for the step's gradient norm): each sum bit-identical to the
    // single-tensor call, an empty tensor giving 0, mixed dtypes and sizes in one call
    Pair small = both(DType::F32, random_vec(1000, rng));
    Tensor empty = tensor_alloc(Device::CUDA, grad_dt, 0);
    std::vector<double> batch = sums_of_squares(g_gpu, {x.g, empty, small.g, x.g});
    const double s_small = sum_of_squares(g_gpu, small.g);
    CHECK(batch.size() == 4 && memcmp(&batch[0], &sg1, sizeof(double)) == 0 && batch[1] == 0.0 &&
              memcmp(&batch[2], &s_small, sizeof(double)) == 0 && memcmp(&batch[3], &sg1, sizeof(double)) == 0,
          "sums_of_squares [%s n=%lld]: batched sums differ from single calls", dn, (long long)n);
    tensor_free(empty);
    free_pairs({&small});
    // scale_inplace (f32 parameters/gradients)
    scale_inplace(g_cpu, p.c, 0.3f);
    scale_inplace(g_gpu, p.g, 0.3f);
    check_close(get(p.g), get(p.c), 1e-5, 1e-6, "scale_inplace", "f32", (int)n, 1);
    free_pairs({&p, &m, &v, &x});
}

int main() {
    require_gpu_or_skip("test_gpu_elementwise");
    g_cpu = ctx_create(Device::CPU);
    g_gpu = ctx_create(Device::CUDA, 0);
    std::mt19937 rng(4321);
    const int shapes[][2] = {{37, 129}, {1000, 768}, {5, 1}, {3, 2500}};
    for (DType dt : {DType::F32, DType::BF16}) {
        for (auto& s : shapes) {
            test_layernorm(dt, s[0], s[1], rng);
            test_gelu_residual(dt, s[0], s[1], rng);
        }
        // dropout: small odd block; GPT-sized block; p = 0; no bias / no residual; more rows than
        // gridDim.y can hold (70001 rows), so the kernel's row loop is exercised
        test_dropout(dt, 37, 3, 129, 0.1f, true, true, rng);
        test_dropout(dt, 250, 4, 768, 0.1f, true, true, rng);
        test_dropout(dt, 37, 3, 129, 0.0f, true, true, rng);
        test_dropout(dt, 37, 3, 129, 0.3f, false, false, rng);
        test_dropout(dt, 70001, 1, 3, 0.5f, true, false, rng);
        test_adamw_and_reductions(dt, 37 * 129, rng);
        test_adamw_and_reductions(dt, 1000 * 768 + 13, rng);
    }
    ctx_destroy(g_gpu);
    ctx_destroy(g_cpu);
    return test_finish("test_gpu_elementwise");
}
