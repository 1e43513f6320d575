// test_matmul.cu — the one GEMM every op calls (layers/matmul.cu): the CPU reference (OpenBLAS, --cpu, label
// unit) and cuBLAS/cuBLASLt against it (--gpu, label gpu).
//
// Every transpose combination, batched and not, leading dimensions and batch strides larger than the
// minimum, f32 and bf16 inputs with f32 or bf16 C, beta = 0 (C poisoned with NaN: BLAS semantics say C is
// not read) and beta = 1. CPU: against a naive triple loop in double, entries outside the M×N windows
// untouched. GPU: against the CPU on larger odd sizes (M=37, N=67, K=129), the gaps between rows and
// matrices untouched.
#include <algorithm>
#include "layers/matmul.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the reference against math done by hand
// =========================================================================================================

static void test_gemm(Ctx& ctx) {
    const int M = 7, N = 5, K = 9, PAD = 3;
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
                            double tol = cd == DType::BF16 ? 8e-3 : 1e-5;
                            double err = max_rel_err(got, ref, 1e-2);
                            CHECK(err < tol, "gemm batch=%d tA=%d tB=%d ab=%s c=%s beta=%g: max rel err %.3g", batch,
                                  ta, tb, dtype_name(ab), dtype_name(cd), beta, err);
                            cases++;
                            tensor_free(A);
                            tensor_free(B);
                            tensor_free(C);
                        }
    printf("gemm: %d cases checked\n", cases);
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_gemm(g_cpu);
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
