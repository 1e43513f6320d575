// test_matmul.cu — the one GEMM every op calls (layers/matmul.cu): the CPU reference (OpenBLAS, --cpu, label
// unit) and cuBLAS/cuBLASLt against it (--gpu, label gpu).
//
// Every transpose combination, batched and not, leading dimensions and batch strides larger than the
// minimum, f32 and bf16 inputs with f32 or bf16 C, beta = 0 (C poisoned with NaN: BLAS semantics say C is
// not read) and beta = 1. CPU: against a naive triple loop in double, entries outside the M×N windows
// untouched, on a small shape and on two larger than the CPU GEMM's tiles; the same bits with 1, 2 and 3
// OpenMP threads. GPU: against the CPU on larger odd sizes (M=37, N=67, K=129), the gaps between rows and
// matrices untouched.
#include <omp.h>
#include <algorithm>
#include "layers/matmul.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the reference against math done by hand
// =========================================================================================================

static void test_gemm(Ctx& ctx, int M, int N, int K, double f32_tol) {
    const int PAD = 3;
    const float alpha = 0.75f;
    int cases = 0;
    for (int batch : {1, 3})
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (DType ab : {DType::F32, DType::BF16})
                    for (DType cd : {DType::F32, DType::BF16})
                        for (float beta : {0.f, 1.f}) {
                            if (ab == DType::F32 && cd == DType::BF16) continue;  // not a supported combination
                            // Stored shapes and leading dimensions larger than the minimum.
                            int a_rows = ta ? K : M, a_cols = ta ? M : K;
                            int b_rows = tb ? N : K, b_cols = tb ? K : N;
                            int64_t lda = a_cols + PAD, ldb = b_cols + PAD + 1, ldc = N + PAD;
                            int64_t sA = a_rows * lda + 5, sB = b_rows * ldb + 2, sC = M * ldc + 4;
                            std::vector<float> hA = random_vec(sA * batch, g_rng), hB = random_vec(sB * batch, g_rng),
                                               hC = random_vec(sC * batch, g_rng);
                            if (ab == DType::BF16) { hA = round_bf16(hA); hB = round_bf16(hB); }
                            if (cd == DType::BF16) hC = round_bf16(hC);
                            // beta = 0: C must not be read (BLAS semantics), so poison it.
                            if (beta == 0.f)
                                for (int64_t bt = 0; bt < batch; bt++)
                                    for (int i = 0; i < M; i++)
                                        for (int j = 0; j < N; j++) hC[bt * sC + i * ldc + j] = NAN;
                            Tensor A = make_tensor(Device::CPU, ab, hA), B = make_tensor(Device::CPU, ab, hB),
                                   C = make_tensor(Device::CPU, cd, hC);
                            gemm(ctx, ta, tb, M, N, K, alpha, GemmOperand{A.data, lda, sA}, GemmOperand{B.data, ldb, sB},
                                 beta, C.data, ldc, sC, ab, cd, batch);
                            std::vector<float> got = tensor_to_host_f32(C);
                            // Naive triple loop in double; entries outside the M×N windows must be untouched.
                            std::vector<float> ref = hC;
                            for (int bt = 0; bt < batch; bt++)
                                for (int i = 0; i < M; i++)
                                    for (int j = 0; j < N; j++) {
                                        double s = 0;
                                        for (int k = 0; k < K; k++) {
                                            double a = ta ? hA[bt * sA + k * lda + i] : hA[bt * sA + i * lda + k];
                                            double b = tb ? hB[bt * sB + j * ldb + k] : hB[bt * sB + k * ldb + j];
                                            s += a * b;
                                        }
                                        size_t at = bt * sC + i * ldc + j;
                                        ref[at] = (float)(alpha * s + (beta != 0.f ? beta * hC[at] : 0.0));
                                    }
                            // f32 C: summation-order noise only. bf16 C: one rounding of the fp32 result.
                            double tol = cd == DType::BF16 ? 8e-3 : f32_tol;
                            double err = max_rel_err(got, ref, 1e-2);
                            CHECK(err < tol, "gemm %dx%dx%d batch=%d tA=%d tB=%d ab=%s c=%s beta=%g: max rel err %.3g",
                                  M, N, K, batch, ta, tb, dtype_name(ab), dtype_name(cd), beta, err);
                            cases++;
                            tensor_free(A);
                            tensor_free(B);
                            tensor_free(C);
                        }
    printf("gemm %dx%dx%d: %d cases checked\n", M, N, K, cases);
}

// The CPU GEMM cuts each output into tiles of 256 rows or columns (matmul.cu) and runs them on OpenMP
// threads: the same bits with 1, 2 and 3 threads, for a cut along the rows and one along the columns, each
// with a partial last tile, batched, f32 and bf16.
static void test_gemm_threads(Ctx& ctx) {
    const int shapes[][3] = {{600, 70, 33}, {40, 530, 17}};
    const int batch = 3, saved = omp_get_max_threads();
    for (auto& sh : shapes)
        for (DType dt : {DType::F32, DType::BF16}) {
            const int M = sh[0], N = sh[1], K = sh[2];
            std::vector<float> hA = random_vec((size_t)batch * M * K, g_rng), hB = random_vec((size_t)batch * K * N, g_rng);
            if (dt == DType::BF16) { hA = round_bf16(hA); hB = round_bf16(hB); }
            Tensor A = make_tensor(Device::CPU, dt, hA), B = make_tensor(Device::CPU, dt, hB);
            std::vector<std::vector<float>> got;
            for (int threads : {1, 2, 3}) {
                omp_set_num_threads(threads);
                Tensor C = tensor_alloc(Device::CPU, dt, (int64_t)batch * M * N);
                gemm(ctx, false, true, M, N, K, 1.f, GemmOperand{A.data, K, (int64_t)M * K},
                     GemmOperand{B.data, K, (int64_t)K * N}, 0.f, C.data, N, (int64_t)M * N, dt, dt, batch);
                got.push_back(tensor_to_host_f32(C));
                tensor_free(C);
            }
            omp_set_num_threads(saved);
            CHECK(bitwise_equal(got[1], got[0]) && bitwise_equal(got[2], got[0]),
                  "gemm %dx%dx%d %s: the result depends on the number of threads", M, N, K, dtype_name(dt));
            tensor_free(A);
            tensor_free(B);
        }
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_gemm(g_cpu, 7, 5, 9, 1e-5);
    // Larger than the CPU GEMM's 256-wide tiles: cut along the rows (M >= N) and along the columns. Longer
    // sums (K = 33, 17) of random signs cancel further below the 1e-2 floor of the relative error: 1e-4.
    test_gemm(g_cpu, 600, 70, 33, 1e-4);
    test_gemm(g_cpu, 40, 530, 17, 1e-4);
    test_gemm_threads(g_cpu);
}

// =========================================================================================================
// GPU-vs-CPU checks (--gpu): the CUDA kernels against the CPU reference
// =========================================================================================================

static void test_gemm_gpu() {
    const int M = 37, N = 67, K = 129, PAD = 5;
    const float alpha = 0.5f;
    for (int batch : {1, 3})
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (DType ab : {DType::F32, DType::BF16})
                    for (DType cd : {DType::F32, DType::BF16})
                        for (float beta : {0.f, 1.f}) {
                            if (ab == DType::F32 && cd == DType::BF16) continue;
                            int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
                            int64_t lda = a_cols + PAD, ldb = b_cols + PAD + 2, ldc = N + PAD;
                            int64_t sA = a_rows * lda + 3, sB = b_rows * ldb + 1, sC = M * ldc + 7;
                            std::vector<float> hA = random_vec(sA * batch, g_rng), hB = random_vec(sB * batch, g_rng);
                            std::vector<float> hC = beta == 0.f ? std::vector<float>(sC * batch, NAN)
                                                                : round_to(cd, random_vec(sC * batch, g_rng));
                            std::vector<float> res[2];
                            for (Device dev : {Device::CPU, Device::CUDA}) {
                                Tensor A = make_tensor(dev, ab, hA), B = make_tensor(dev, ab, hB),
                                       C = make_tensor(dev, cd, hC);
                                gemm(ctx_of(dev), ta, tb, M, N, K, alpha, GemmOperand{A.data, lda, sA},
                                     GemmOperand{B.data, ldb, sB}, beta, C.data, ldc, sC, ab, cd, batch);
                                res[dev == Device::CUDA] = to_host(C);
                                tensor_free(A);
                                tensor_free(B);
                                tensor_free(C);
                            }
                            // Compare the M×N windows; the gaps between rows and matrices must be untouched.
                            std::vector<float> g, c;
                            bool gaps_ok = true;
                            for (int64_t i = 0; i < sC * batch; i++) {
                                int64_t in_mat = i % sC, row = in_mat / ldc, col = in_mat % ldc;
                                if (row < M && col < N) {
                                    g.push_back(res[1][i]);
                                    c.push_back(res[0][i]);
                                } else {
                                    float want = round_to(cd, {hC[i]})[0];
                                    gaps_ok &= memcmp(&res[1][i], &want, 4) == 0 || (std::isnan(want) && std::isnan(res[1][i]));
                                }
                            }
                            char what[128];
                            snprintf(what, sizeof what, "gemm batch=%d tA=%d tB=%d ab=%s beta=%g", batch, ta, tb,
                                     dtype_name(ab), beta);
                            check_close_norm(what, cd, g, c, cd == DType::BF16 ? 1e-2 : 1e-5);
                            CHECK(gaps_ok, "%s: elements outside C's windows untouched", what);
                        }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_gemm_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_matmul", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
