// test_gelu.cu — GeLU, tanh form (layers/gelu.cu): the fast CPU path (--cpu, label unit) and the CUDA
// kernels (--gpu, label gpu) against its plain math, layers/reference/gelu.h.
//
// CPU checks: the forward and the backward against the reference (including |x| up to 100, where 1 + tanh
// cancels); the backward against central finite differences per element; the backward in place (din
// aliasing dout, as the MLP backward calls it) gives the same bits; bf16 storage against fp32 storage within
// bf16 tolerance; the same bits with 1, 2 and 3 threads.
// GPU checks, f32 and bf16, shapes that are not multiples of any block size: forward and backward against
// the CPU and the reference, outputs poisoned with NaN first.
#include "layers/gelu.h"
#include "layers/reference/gelu.h"
#include <omp.h>
#include "test/layers/reference_check.h"
#include "test/test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu, g_gpu;

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/gelu.h
// =========================================================================================================

static vf gelu_fwd(DType dt, const vf& x) {
    Tensor tx = cpu_tensor(dt, x), to = tensor_alloc(Device::CPU, dt, (int64_t)x.size());
    gelu_forward(g_cpu, to, tx, (int64_t)x.size());
    vf r = to_host(to);
    free_all({&tx, &to});
    return r;
}
static vf gelu_bwd(DType dt, const vf& x, const vf& dout, bool in_place) {
    Tensor tx = cpu_tensor(dt, x), tdo = cpu_tensor(dt, dout);
    Tensor tdi = in_place ? tdo : tensor_alloc(Device::CPU, dt, (int64_t)x.size());
    gelu_backward(g_cpu, tdi, tx, tdo, (int64_t)x.size());
    vf r = to_host(tdi);
    if (!in_place) tensor_free(tdi);
    free_all({&tx, &tdo});
    return r;
}

static void test_gelu(std::mt19937& rng) {
    vf x = random_vec(1000, rng, -4.f, 4.f);
    for (float e : {-100.f, -50.f, -10.f, -0.75f, 0.f, 10.f, 50.f, 100.f}) x.push_back(e);
    const size_t n = x.size();
    // forward against the reference (layers/reference/gelu.h: the tanh formula in double)
    vf y = gelu_fwd(DType::F32, x);
    std::vector<double> want(n);
    ref_gelu_forward(want.data(), x.data(), (int64_t)n);
    double worst = 0;
    // 1 + tanh(u) cancels for x << 0, so judge errors against O(1) there: 1e-5 relative + 1e-6 absolute
    for (size_t i = 0; i < n; i++) worst = std::fmax(worst, std::fabs(y[i] - want[i]) / (1e-5 * std::fabs(want[i]) + 1e-6));
    CHECK(worst <= 1, "gelu forward vs the reference: error / allowed = %.3g", worst);
    // backward against the reference's gelu'(x) · dout, with the forward's bound
    vf w = random_vec(n, rng);
    vf g = gelu_bwd(DType::F32, x, w, false);
    std::vector<double> want_d(n);
    ref_gelu_backward(want_d.data(), x.data(), w.data(), (int64_t)n);
    worst = 0;
    for (size_t i = 0; i < n; i++) worst = std::fmax(worst, std::fabs(g[i] - want_d[i]) / (1e-5 * std::fabs(want_d[i]) + 1e-6));
    CHECK(worst <= 1, "gelu backward vs the reference: error / allowed = %.3g", worst);
    // and against central differences of the forward, per element
    const float h = 1e-2f;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        vf p = {x[i] + h}, m = {x[i] - h};
        double num = w[i] * ((double)gelu_fwd(DType::F32, p)[0] - (double)gelu_fwd(DType::F32, m)[0]) / (2.0 * h);
        if (!std::isfinite(g[i]) || !fd_close(num, g[i], 0.1)) {
            bad++;
            if (bad < 5) fprintf(stderr, "  gelu x=%g: numeric %.6f analytic %.6f\n", x[i], num, g[i]);
        }
    }
    CHECK(bad == 0, "gelu finite differences: %d mismatches of %zu", bad, n);
    // in place (din aliases dout) gives the same result
    CHECK(bitwise_equal(gelu_bwd(DType::F32, x, w, true), g), "gelu backward in place differs");
    // bf16 storage vs f32 storage, same values
    vf xb = round_bf16(x), wb = round_bf16(w);
    CHECK(max_rel_err(gelu_fwd(DType::BF16, xb), gelu_fwd(DType::F32, xb), 1e-2) < 1e-2, "gelu bf16 forward");
    CHECK(max_rel_err(gelu_bwd(DType::BF16, xb, wb, false), gelu_bwd(DType::F32, xb, wb, false), 1e-2) < 1e-2,
          "gelu bf16 backward");
}

static void test_gelu_threads(std::mt19937& rng) {
    vf x = random_vec(10007, rng, -8.f, 8.f), w = random_vec(10007, rng);
    const int saved = omp_get_max_threads();
    std::vector<vf> fwd, bwd;
    for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        fwd.push_back(gelu_fwd(DType::F32, x));
        bwd.push_back(gelu_bwd(DType::F32, x, w, false));
    }
    omp_set_num_threads(saved);
    for (int k = 1; k < 3; k++) {
        CHECK(bitwise_equal(fwd[k], fwd[0]), "gelu forward: %d threads differ from 1 thread", k + 1);
        CHECK(bitwise_equal(bwd[k], bwd[0]), "gelu backward: %d threads differ from 1 thread", k + 1);
    }
}

static void cpu_checks() {
    std::mt19937 rng(1234);
    test_gelu(rng);
    test_gelu_threads(rng);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

static void test_gelu_gpu(DType dt, int N, int C, std::mt19937& rng) {
    const ElementwiseTol tol = elementwise_tol(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)N * C;
    vf xv = random_vec(n, rng, -5.f, 5.f);
    xv[0] = -100.f, xv[1] = 100.f, xv[2] = 0.f;
    const vf dv = random_vec(n, rng);
    TensorPair x = on_both(dt, xv), dout = on_both(dt, dv);
    TensorPair y = poisoned_pair(dt, n), dx = poisoned_pair(dt, n);
    gelu_forward(g_cpu, y.c, x.c, n);
    gelu_forward(g_gpu, y.g, x.g, n);
    check_close(to_host(y.g), to_host(y.c), tol.rtol, tol.atol, "gelu_forward", dn, N, C);
    // The reference (layers/reference/gelu.h) on the same rounded inputs.
    const vf xr = round_to(dt, xv), dr = round_to(dt, dv);
    vf ry(n), rdx(n);
    ref_gelu_forward(ry.data(), xr.data(), n);
    ref_gelu_backward(rdx.data(), xr.data(), dr.data(), n);
    check_close_vs_reference("gelu_forward", dt, to_host(y.g), to_host(y.c), ry, tol.rtol, tol.atol, N, C);
    gelu_backward(g_cpu, dx.c, x.c, dout.c, n);
    gelu_backward(g_gpu, dx.g, x.g, dout.g, n);
    check_close(to_host(dx.g), to_host(dx.c), tol.rtol, tol.atol, "gelu_backward", dn, N, C);
    check_close_vs_reference("gelu_backward", dt, to_host(dx.g), to_host(dx.c), rdx, tol.rtol, tol.atol, N, C);
    free_all({&x, &dout, &y, &dx});
}

static void gpu_checks() {
    std::mt19937 rng(4321);
    const int shapes[][2] = {{37, 129}, {1000, 768}, {5, 1}, {3, 2500}};
    for (DType dt : {DType::F32, DType::BF16})
        for (auto& s : shapes) test_gelu_gpu(dt, s[0], s[1], rng);
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_gelu", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
