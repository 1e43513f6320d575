// test_adamw.cu — the optimizer step and the gradient-norm reductions (layers/adamw.cu): the fast CPU path
// (--cpu, label unit) and the CUDA kernels against it (--gpu, label gpu).
//
// The plain math both paths are held to: layers/reference/adamw.h.
// CPU checks: AdamW against the reference (its state in double) for 3 steps, with f32 and bf16 gradients (a
// zero gradient on the first step: only weight decay moves it); no common-factor error in the step over
// t = 1..64 at β2 = 0.999 (the bias corrections in double, check_bias_correction; also on the GPU);
// sum_of_squares against the reference's double sum over several of the CPU's fixed chunks and a ragged end,
// the batched sums_of_squares giving the same bits as one call per tensor, scale_inplace, add_inplace (bitwise
// the reference); sum_of_squares gives the same bits with 1 and 3 OpenMP threads (so the gradient clipping of a
// run does not depend on the machine).
// The fused update (adamw_update_fused: AdamW plus the bf16 compute copy in one pass) against adamw_update
// followed by tensor_convert, bitwise, on the CPU and on the GPU (where it is also checked against the CPU).
// GPU checks, f32 and bf16 gradients: 3 AdamW steps and sum_of_squares (fp64 accumulation, bitwise
// reproducible; single and batched) against the CPU and the reference, scale_inplace against the CPU, add_inplace
// bitwise the CPU.
#include <omp.h>
#include <cstdint>
#include "layers/adamw.h"
#include "layers/reference/adamw.h"
#include "test/layers/gpu_shapes.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu, g_gpu;

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/adamw.h
// =========================================================================================================

static void test_adamw(std::mt19937& rng) {
    const int64_t n = 777;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    vf p0 = random_vec(n, rng);
    std::vector<vf> grads;
    for (int t = 0; t < 3; t++) grads.push_back(random_vec(n, rng));
    grads[0][0] = 0.0f;  // a zero gradient on the first step: only weight decay moves it
    // the reference (layers/reference/adamw.h), its state kept in double across the 3 steps
    std::vector<double> P(p0.begin(), p0.end()), M(n, 0.0), V(n, 0.0);
    for (int t = 1; t <= 3; t++)
        ref_adamw_step(P.data(), grads[t - 1].data(), M.data(), V.data(), n, lr, b1, b2, eps, wd, t, gs);
    for (DType gdt : {DType::F32, DType::BF16}) {
        Tensor tp = cpu_tensor(DType::F32, p0), tm = tensor_zeros(Device::CPU, DType::F32, n);
        Tensor tv = tensor_zeros(Device::CPU, DType::F32, n);
        for (int t = 1; t <= 3; t++) {
            Tensor tg = cpu_tensor(gdt, grads[t - 1]);
            adamw_update(g_cpu, tp, tg, tm, tv, n, lr, b1, b2, eps, wd, t, gs);
            tensor_free(tg);
        }
        vf ref_p(P.begin(), P.end()), ref_m(M.begin(), M.end()), ref_v(V.begin(), V.end());
        double tol = gdt == DType::F32 ? 1e-5 : 1e-2;
        CHECK(max_rel_err(to_host(tp), ref_p) < tol, "adamw (%s grads) params: %.3g", dtype_name(gdt),
              max_rel_err(to_host(tp), ref_p));
        CHECK(norm_rel_err(to_host(tm), ref_m) < tol, "adamw (%s grads) m: %.3g", dtype_name(gdt),
              norm_rel_err(to_host(tm), ref_m));
        CHECK(norm_rel_err(to_host(tv), ref_v) < tol, "adamw (%s grads) v: %.3g", dtype_name(gdt),
              norm_rel_err(to_host(tv), ref_v));
        free_all({&tp, &tm, &tv});
    }
}

static void test_sum_of_squares_and_scale(std::mt19937& rng) {
    const int64_t n = 200003;  // several of the CPU's fixed chunks, and a ragged end
    vf x = random_vec(n, rng, -3.f, 3.f);
    const double want = ref_sum_of_squares(x.data(), n);
    Tensor t = cpu_tensor(DType::F32, x);
    double got = sum_of_squares(g_cpu, t);
    CHECK(std::fabs(got - want) <= 1e-12 * want, "sum_of_squares %.17g vs %.17g", got, want);
    scale_inplace(g_cpu, t, 0.25f);
    vf s = to_host(t);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (s[i] != x[i] * 0.25f) bad++;
    CHECK(bad == 0, "scale_inplace: %d wrong", bad);
    // add_inplace: one float addition per element, bitwise the reference's.
    vf addend = random_vec(n, rng, -3.f, 3.f), want_sum = s;
    ref_add(want_sum.data(), addend.data(), n);
    Tensor u = cpu_tensor(DType::F32, addend);
    add_inplace(g_cpu, t, u);
    CHECK(memcmp(to_host(t).data(), want_sum.data(), n * sizeof(float)) == 0, "add_inplace differs from the reference");
    tensor_free(u);
    tensor_free(t);
    Tensor e = tensor_alloc(Device::CPU, DType::F32, 0);
    CHECK(sum_of_squares(g_cpu, e) == 0.0, "sum_of_squares of an empty tensor");
    // Batched (the gradient norm's form): the same bits as one call per tensor, mixed dtypes, empty ones 0.
    vf y = random_vec(70001, rng);
    Tensor ty = cpu_tensor(DType::F32, y), tyb = cpu_tensor(DType::BF16, y), tx = cpu_tensor(DType::F32, x);
    const double s_x = sum_of_squares(g_cpu, tx), s_y = sum_of_squares(g_cpu, ty), s_yb = sum_of_squares(g_cpu, tyb);
    std::vector<double> batch = sums_of_squares(g_cpu, {tx, e, ty, tyb});
    CHECK(batch.size() == 4 && memcmp(&batch[0], &s_x, sizeof(double)) == 0 && batch[1] == 0.0 &&
              memcmp(&batch[2], &s_y, sizeof(double)) == 0 && memcmp(&batch[3], &s_yb, sizeof(double)) == 0,
          "sums_of_squares: batched sums differ from single calls");
    CHECK(s_yb != s_y, "bf16 storage rounds (the batched check saw two different dtypes)");
    tensor_free(ty);
    tensor_free(tyb);
    tensor_free(tx);
}

// The bias corrections 1 − β^t: at β2 = 0.999 and small t they cancel (1 − 0.999² = 0.002), and a float
// β^t left its rounding in them whole: 1 − powf(0.999f, 2) is 6.7e-6 too small, and every element's step
// was 3.3e-6 too short, all alike (issue 41). The update Δ of t = 1..64, from the same float moments,
// against the reference's in double: the mean of Δ/Δref − 1 over 4096 elements (the rounding noise of each
// element averages out to ~1e-9; a common factor does not) within 2e-7. The float bias corrections gave up
// to 3.4e-6.
static void check_bias_correction(Ctx& ctx, std::mt19937& rng) {
    const int64_t n = 4096;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    double worst = 0;
    int worst_t = 0;
    for (int t = 1; t <= 64; t++) {
        const vf g = random_vec(n, rng, -1e-3f, 1e-3f), m = random_vec(n, rng, -1e-3f, 1e-3f);
        vf v = random_vec(n, rng, 0.5e-6f, 1.5e-6f);
        std::vector<double> P(n, 0.0), M(m.begin(), m.end()), V(v.begin(), v.end());
        ref_adamw_step(P.data(), g.data(), M.data(), V.data(), n, lr, b1, b2, eps, 0.f, t, 1.f);
        Tensor tp = make_tensor(ctx.device, DType::F32, vf(n, 0.f)), tg = make_tensor(ctx.device, DType::F32, g);
        Tensor tm = make_tensor(ctx.device, DType::F32, m), tv = make_tensor(ctx.device, DType::F32, v);
        adamw_update(ctx, tp, tg, tm, tv, n, lr, b1, b2, eps, 0.f, t, 1.f);  // from 0: the new value is Δ
        const vf d = to_host(tp);
        double mean = 0;
        for (int64_t i = 0; i < n; i++) mean += ((double)d[i] / P[i] - 1) / n;
        if (std::fabs(mean) > std::fabs(worst)) worst = mean, worst_t = t;
        free_all({&tp, &tg, &tm, &tv});
    }
    CHECK(std::fabs(worst) < 2e-7, "adamw [%s]: the update is off by a common factor %+.3g at step %d (the bias "
          "corrections)", device_name(ctx.device), worst, worst_t);
}

// sum_of_squares gives the same bits with 1 and with 3 OpenMP threads (fixed order, not thread-count order).
static void test_thread_independence(std::mt19937& rng) {
    vf big = random_vec(300000, rng);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    Tensor tb = cpu_tensor(DType::F32, big);
    double s1 = sum_of_squares(g_cpu, tb);
    omp_set_num_threads(3);
    double s3 = sum_of_squares(g_cpu, tb);
    omp_set_num_threads(saved);
    CHECK(memcmp(&s1, &s3, sizeof(double)) == 0, "sum_of_squares depends on the number of threads");
    tensor_free(tb);
}

// adamw_update_fused on `ctx` == adamw_update + tensor_convert on `ctx`, bit for bit, over 3 steps (the new
// weight, both moments and the bf16 copy); a compute tensor poisoned first so an unwritten element shows.
static void check_fused_bitwise(Ctx& ctx, DType grad_dt, int64_t n, std::mt19937& rng) {
    const Device d = ctx.device;
    vf p0 = random_vec(n, rng);
    Tensor pa = tensor_alloc(d, DType::F32, n), pb = tensor_alloc(d, DType::F32, n);
    tensor_from_host_f32(pa, p0.data());
    tensor_from_host_f32(pb, p0.data());
    Tensor ma = tensor_zeros(d, DType::F32, n), va = tensor_zeros(d, DType::F32, n);
    Tensor mb = tensor_zeros(d, DType::F32, n), vb = tensor_zeros(d, DType::F32, n);
    Tensor ca = tensor_alloc(d, DType::BF16, n), cb = tensor_alloc(d, DType::BF16, n);
    vf poison((size_t)n, NAN);
    tensor_from_host_f32(ca, poison.data());
    for (int t = 1; t <= 3; t++) {
        vf g = random_vec(n, rng);
        Tensor tg = tensor_alloc(d, grad_dt, n);
        tensor_from_host_f32(tg, g.data());
        adamw_update(ctx, pb, tg, mb, vb, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        tensor_convert(ctx, cb, pb);
        adamw_update_fused(ctx, pa, ca, tg, ma, va, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        ctx_sync(ctx);
        tensor_free(tg);
    }
    auto same = [](Tensor a, Tensor b) {
        std::vector<float> x = tensor_to_host_f32(a), y = tensor_to_host_f32(b);
        return memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    CHECK(same(pa, pb) && same(ma, mb) && same(va, vb), "adamw_update_fused [%s, %s grads, n=%lld]: fp32 state differs",
          device_name(d), dtype_name(grad_dt), (long long)n);
    CHECK(same(ca, cb), "adamw_update_fused [%s, %s grads, n=%lld]: bf16 copy differs from tensor_convert", device_name(d),
          dtype_name(grad_dt), (long long)n);
    // No compute tensor (fp32 training): exactly adamw_update.
    {
        vf g = random_vec(n, rng);
        Tensor tg = tensor_alloc(d, grad_dt, n);
        tensor_from_host_f32(tg, g.data());
        adamw_update(ctx, pb, tg, mb, vb, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.7f);
        adamw_update_fused(ctx, pa, Tensor(), tg, ma, va, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.7f);
        ctx_sync(ctx);
        tensor_free(tg);
        CHECK(same(pa, pb) && same(ma, mb) && same(va, vb), "adamw_update_fused without a compute copy differs");
    }
    for (Tensor* x : {&pa, &pb, &ma, &va, &mb, &vb, &ca, &cb}) tensor_free(*x);
}

static void cpu_checks() {
    std::mt19937 rng(1235);
    test_adamw(rng);
    check_bias_correction(g_cpu, rng);
    test_sum_of_squares_and_scale(rng);
    test_thread_independence(rng);
    for (DType dt : {DType::F32, DType::BF16}) check_fused_bitwise(g_cpu, dt, 70001, rng);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

static void test_adamw_and_reductions(DType grad_dt, int64_t n, std::mt19937& rng) {
    const char* dn = dtype_name(grad_dt);
    const vf p0 = random_vec(n, rng);
    TensorPair p = on_both(DType::F32, p0);
    TensorPair m = on_both(DType::F32, vf(n, 0.0f)), v = on_both(DType::F32, vf(n, 0.0f));
    // the reference (layers/reference/adamw.h) on the same rounded gradients, its state in double
    std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
    for (int t = 1; t <= 3; t++) {
        const vf gv = random_vec(n, rng);
        TensorPair g = on_both(grad_dt, gv);
        adamw_update(g_cpu, p.c, g.c, m.c, v.c, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        adamw_update(g_gpu, p.g, g.g, m.g, v.g, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        ref_adamw_step(rp.data(), round_to(grad_dt, gv).data(), rm.data(), rv.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f,
                       0.1f, t, 0.7f);
        free_all({&g});
    }
    check_close(to_host(p.g), to_host(p.c), 1e-5, 1e-6, "adamw param", dn, (int)n, 1);
    check_close(to_host(m.g), to_host(m.c), 1e-5, 1e-6, "adamw m", dn, (int)n, 1);
    check_close(to_host(v.g), to_host(v.c), 1e-5, 1e-6, "adamw v", dn, (int)n, 1);
    check_close_vs_reference("adamw param", grad_dt, to_host(p.g), to_host(p.c), to_float(rp), 1e-5, 1e-6, (int)n, 1);
    check_close_vs_reference("adamw m", grad_dt, to_host(m.g), to_host(m.c), to_float(rm), 1e-5, 1e-6, (int)n, 1);
    check_close_vs_reference("adamw v", grad_dt, to_host(v.g), to_host(v.c), to_float(rv), 1e-5, 1e-6, (int)n, 1);

    // sum of squares (of an f32 or bf16 tensor): fp64 accumulation on both devices, different order
    const vf xv = random_vec(n, rng, -3.f, 3.f);
    TensorPair x = on_both(grad_dt, xv);
    double sc = sum_of_squares(g_cpu, x.c), sg1 = sum_of_squares(g_gpu, x.g), sg2 = sum_of_squares(g_gpu, x.g);
    CHECK(std::fabs(sg1 - sc) <= 1e-12 * sc, "sum_of_squares [%s n=%lld]: gpu %.17g cpu %.17g", dn, (long long)n, sg1, sc);
    const double sr = ref_sum_of_squares(round_to(grad_dt, xv).data(), n);  // the reference, same rounded values
    CHECK(std::fabs(sc - sr) <= 1e-12 * sr && std::fabs(sg1 - sr) <= 2.1e-12 * sr,
          "sum_of_squares [%s n=%lld] vs the reference %.17g: cpu %.17g gpu %.17g", dn, (long long)n, sr, sc, sg1);
    CHECK(memcmp(&sg1, &sg2, sizeof(double)) == 0, "sum_of_squares not bitwise reproducible on GPU");
    // the batched form (one synchronization for the step's gradient norm): each sum bit-identical to the
    // single-tensor call, an empty tensor giving 0, mixed dtypes and sizes in one call
    TensorPair small = on_both(DType::F32, random_vec(1000, rng));
    Tensor empty = tensor_alloc(Device::CUDA, grad_dt, 0);
    std::vector<double> batch = sums_of_squares(g_gpu, {x.g, empty, small.g, x.g});
    const double s_small = sum_of_squares(g_gpu, small.g);
    CHECK(batch.size() == 4 && memcmp(&batch[0], &sg1, sizeof(double)) == 0 && batch[1] == 0.0 &&
              memcmp(&batch[2], &s_small, sizeof(double)) == 0 && memcmp(&batch[3], &sg1, sizeof(double)) == 0,
          "sums_of_squares [%s n=%lld]: batched sums differ from single calls", dn, (long long)n);
    tensor_free(empty);
    free_all({&small});
    // scale_inplace (f32 parameters/gradients)
    scale_inplace(g_cpu, p.c, 0.3f);
    scale_inplace(g_gpu, p.g, 0.3f);
    check_close(to_host(p.g), to_host(p.c), 1e-5, 1e-6, "scale_inplace", "f32", (int)n, 1);
    // add_inplace (ZeRO-2's accumulation of gradient pieces): the same float additions, bitwise, from the same
    // values (the AdamW steps above agree only within their tolerance).
    TensorPair q = on_both(DType::F32, to_host(p.g));
    add_inplace(g_cpu, q.c, q.c);
    add_inplace(g_gpu, q.g, q.g);
    CHECK(to_host(q.g) == to_host(q.c), "add_inplace [n=%lld]: the GPU's sums differ from the CPU's", (long long)n);
    free_all({&p, &m, &v, &x, &q});
}

static void gpu_checks() {
    std::mt19937 rng(4321);
    check_bias_correction(g_gpu, rng);
    // The race mode's small shape (MM_GPU_TEST_SMALL, gpu_shapes.h): still many blocks and a ragged end.
    const int64_t big = gpu_test_small() ? 16 * 1024 + 13 : 1000 * 768 + 13;
    for (DType dt : {DType::F32, DType::BF16}) {
        test_adamw_and_reductions(dt, 37 * 129, rng);
        test_adamw_and_reductions(dt, big, rng);
        check_fused_bitwise(g_gpu, dt, big, rng);
        // GPU fused against the CPU fused: the bf16 copies agree as closely as the fp32 weights do
        const int64_t n = 4099;
        TensorPair p = on_both(DType::F32, random_vec(n, rng)), g = on_both(dt, random_vec(n, rng));
        TensorPair m = on_both(DType::F32, vf(n, 0.0f)), v = on_both(DType::F32, vf(n, 0.0f));
        TensorPair c = on_both(DType::BF16, vf(n, NAN));
        adamw_update_fused(g_cpu, p.c, c.c, g.c, m.c, v.c, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.7f);
        adamw_update_fused(g_gpu, p.g, c.g, g.g, m.g, v.g, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.7f);
        check_close(to_host(c.g), to_host(c.c), 1e-2, 1e-3, "adamw_update_fused bf16 copy", dtype_name(dt), (int)n, 1);
        free_all({&p, &g, &m, &v, &c});
    }
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_adamw", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
