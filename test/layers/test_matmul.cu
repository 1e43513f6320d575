// test_matmul.cu — the one GEMM every op calls (layers/matmul.cu): the fast CPU path (OpenBLAS, --cpu, label
// unit) and cuBLAS/cuBLASLt against it (--gpu, label gpu).
//
// Every transpose combination, batched and not, leading dimensions and batch strides larger than the
// minimum, f32 and bf16 inputs with f32 or bf16 C, beta = 0 (C poisoned with NaN: BLAS semantics say C is
// not read) and beta = 1. CPU: against the reference (layers/reference/matmul.h: a triple loop in double),
// entries outside the M×N windows untouched, on a small shape and on two larger than the CPU GEMM's tiles;
// the same bits with 1, 2 and 3 OpenMP threads. GPU: against the CPU and the reference on larger odd sizes
// (M=37, N=67, K=129), the gaps between rows and matrices untouched. gemm_batched (a two-level batch,
// matrices side by side in wide rows with no single stride, as attention's heads and sequences are): CPU
// against the reference for every transpose and dtype, and the same bits as one gemm() per outer index; GPU
// (pointer arrays, and the strided forms 1 × n and n × 1) against the CPU and the reference.
#include <omp.h>
#include <algorithm>
#include "layers/matmul.h"
#include "layers/reference/matmul.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

static std::mt19937 g_rng;  // reseeded by each half: --cpu or --gpu alone draws what a run of both draws
static Ctx g_cpu, g_gpu;
static Ctx& ctx_of(Device dev) { return dev == Device::CUDA ? g_gpu : g_cpu; }

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/matmul.h
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
                            // The reference (layers/reference/matmul.h): a triple loop in double; entries outside the
                            // M×N windows must be untouched.
                            std::vector<float> ref = hC;
                            ref_gemm(ta, tb, M, N, K, alpha, hA.data(), lda, hB.data(), ldb, beta, ref.data(), ldc, batch,
                                     sA, sB, sC);
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

// The CPU GEMM cuts each output into tiles of rows or columns fixed by its shape (cpu_gemm_tiles, matmul.cu)
// and runs them on OpenMP threads: the same bits with 1, 2 and 3 threads, for a cut along the rows and one along the columns, each
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


// ---- gemm_batched: a two-level batch (outer × inner) with no single stride --------------------------------
// The layout of attention's operands: the matrices sit side by side in wide rows, matrix (o, i) at column
// o·(inner·w + gap) + i·w of a row (w the stored width of one matrix), so consecutive i are w apart but
// consecutive o are w·inner + gap apart. Returns the whole C buffer after the call; `ref` (when given)
// receives the reference's C (layers/reference/matmul.h, one call per matrix).
struct BatchedCase {
    int M, N, K, outer, inner;
    bool ta, tb;
    DType ab, cd;
    float beta;
};
static std::vector<float> run_gemm_batched(Device dev, const BatchedCase& bc, const std::vector<float>& hA,
                                           const std::vector<float>& hB, const std::vector<float>& hC,
                                           std::vector<float>* ref) {
    const int M = bc.M, N = bc.N, K = bc.K, outer = bc.outer, inner = bc.inner, gap = 3;
    const int a_rows = bc.ta ? K : M, a_w = bc.ta ? M : K, b_rows = bc.tb ? N : K, b_w = bc.tb ? K : N;
    (void)a_rows;
    (void)b_rows;
    const int64_t a_os = (int64_t)inner * a_w + gap, b_os = (int64_t)inner * b_w + gap, c_os = (int64_t)inner * N + gap;
    const int64_t lda = outer * a_os, ldb = outer * b_os, ldc = outer * c_os;
    Tensor A = make_tensor(dev, bc.ab, hA), B = make_tensor(dev, bc.ab, hB), C = make_tensor(dev, bc.cd, hC);
    gemm_batched(ctx_of(dev), bc.ta, bc.tb, M, N, K, 0.75f, GemmBatchOperand{A.data, lda, a_os, a_w},
                 GemmBatchOperand{B.data, ldb, b_os, b_w}, bc.beta, GemmBatchOperand{C.data, ldc, c_os, N}, bc.ab,
                 bc.cd, outer, inner);
    std::vector<float> got = to_host(C);
    free_all({&A, &B, &C});
    if (ref) {
        *ref = round_to(bc.cd, hC);
        for (int o = 0; o < outer; o++)
            for (int in = 0; in < inner; in++)
                ref_gemm(bc.ta, bc.tb, M, N, K, 0.75f, hA.data() + o * a_os + in * a_w, lda,
                         hB.data() + o * b_os + in * b_w, ldb, bc.beta, ref->data() + o * c_os + in * N, ldc);
    }
    return got;
}

// Inputs for a case: A and B random (rounded to their dtype), C random or, for beta = 0, NaN inside the
// windows (C must not be read) and random in the gaps (which must stay untouched).
static void batched_inputs(const BatchedCase& bc, std::vector<float>& hA, std::vector<float>& hB,
                           std::vector<float>& hC) {
    const int gap = 3;
    const int a_rows = bc.ta ? bc.K : bc.M, a_w = bc.ta ? bc.M : bc.K, b_rows = bc.tb ? bc.N : bc.K,
              b_w = bc.tb ? bc.K : bc.N;
    const int64_t lda = bc.outer * ((int64_t)bc.inner * a_w + gap), ldb = bc.outer * ((int64_t)bc.inner * b_w + gap),
                  c_os = (int64_t)bc.inner * bc.N + gap, ldc = bc.outer * c_os;
    hA = round_to(bc.ab, random_vec((size_t)(a_rows * lda), g_rng));
    hB = round_to(bc.ab, random_vec((size_t)(b_rows * ldb), g_rng));
    hC = round_to(bc.cd, random_vec((size_t)(bc.M * ldc), g_rng));
    if (bc.beta == 0.f)
        for (int i = 0; i < bc.M; i++)
            for (int64_t c = 0; c < ldc; c++)
                if (c % c_os < (int64_t)bc.inner * bc.N) hC[i * ldc + c] = NAN;
}

static void test_gemm_batched(Ctx& ctx) {
    (void)ctx;
    int cases = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (DType ab : {DType::F32, DType::BF16})
                for (float beta : {0.f, 1.f}) {
                    // outer × inner = 3 × 4 with M larger than a CPU tile (cut along the rows), 2 × 3 with N larger
                    // (cut along the columns), and the one-level forms 1 × 5 and 4 × 1.
                    for (auto oi : {std::pair<int, int>{3, 4}, {2, 3}, {1, 5}, {4, 1}}) {
                        const int M = oi.first == 3 ? 300 : oi.first == 2 ? 7 : 13, N = oi.first == 2 ? 530 : 11;
                        BatchedCase bc{M, N, 9, oi.first, oi.second, ta != 0, tb != 0, ab, ab, beta};
                        std::vector<float> hA, hB, hC, ref;
                        batched_inputs(bc, hA, hB, hC);
                        std::vector<float> got = run_gemm_batched(Device::CPU, bc, hA, hB, hC, &ref);
                        const double tol = ab == DType::BF16 ? 1e-2 : 1e-4;
                        CHECK(max_rel_err(got, ref, 1e-2) < tol && !std::any_of(got.begin(), got.end(), [](float x) { return std::isnan(x); }),
                              "gemm_batched %dx%d tA=%d tB=%d %s beta=%g vs double: %g", bc.outer, bc.inner, ta, tb,
                              dtype_name(ab), beta, max_rel_err(got, ref, 1e-2));
                        cases++;
                    }
                }
    CHECK(cases == 64, "gemm_batched: %d cases run", cases);
    // gemm_batched over outer × inner gives the bits of gemm() called once per o with a batch of inner (the
    // same tiles per matrix), which is what attention's CPU path did before.
    BatchedCase bc{70, 33, 16, 3, 4, false, true, DType::F32, DType::F32, 0.f};
    std::vector<float> hA, hB, hC;
    batched_inputs(bc, hA, hB, hC);
    std::vector<float> got = run_gemm_batched(Device::CPU, bc, hA, hB, hC, nullptr);
    const int gap = 3;
    const int64_t a_os = 4 * 16 + gap, b_os = 4 * 16 + gap, c_os = 4 * 33 + gap;
    Tensor A = make_tensor(Device::CPU, DType::F32, hA), B = make_tensor(Device::CPU, DType::F32, hB),
           C = make_tensor(Device::CPU, DType::F32, hC);
    for (int o = 0; o < 3; o++)
        gemm(g_cpu, false, true, 70, 33, 16, 0.75f, GemmOperand{A.as<float>() + o * a_os, 3 * a_os, 16},
             GemmOperand{B.as<float>() + o * b_os, 3 * b_os, 16}, 0.f, C.as<float>() + o * c_os, 3 * c_os, 33,
             DType::F32, DType::F32, 4);
    CHECK(bitwise_equal(to_host(C), got), "gemm_batched: the same bits as one gemm() per outer index");
    free_all({&A, &B, &C});
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_gemm(g_cpu, 7, 5, 9, 1e-5);
    // Larger than the CPU GEMM's 256-wide tiles: cut along the rows (M >= N) and along the columns. Longer
    // sums (K = 33, 17) of random signs cancel further below the 1e-2 floor of the relative error: 1e-4.
    test_gemm(g_cpu, 600, 70, 33, 1e-4);
    test_gemm(g_cpu, 40, 530, 17, 1e-4);
    test_gemm_threads(g_cpu);
    test_gemm_batched(g_cpu);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
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
                            // The reference on the same (dtype-rounded) inputs, C's windows only.
                            std::vector<float> full_ref = round_to(cd, hC);
                            const std::vector<float> rA = round_to(ab, hA), rB = round_to(ab, hB);
                            ref_gemm(ta, tb, M, N, K, alpha, rA.data(), lda, rB.data(), ldb, beta, full_ref.data(), ldc,
                                     batch, sA, sB, sC);
                            // Compare the M×N windows; the gaps between rows and matrices must be untouched.
                            std::vector<float> g, c, r;
                            bool gaps_ok = true;
                            for (int64_t i = 0; i < sC * batch; i++) {
                                int64_t in_mat = i % sC, row = in_mat / ldc, col = in_mat % ldc;
                                if (row < M && col < N) {
                                    g.push_back(res[1][i]);
                                    c.push_back(res[0][i]);
                                    r.push_back(full_ref[i]);
                                } else {
                                    float want = round_to(cd, {hC[i]})[0];
                                    gaps_ok &= memcmp(&res[1][i], &want, 4) == 0 || (std::isnan(want) && std::isnan(res[1][i]));
                                }
                            }
                            char what[128];
                            snprintf(what, sizeof what, "gemm batch=%d tA=%d tB=%d ab=%s beta=%g", batch, ta, tb,
                                     dtype_name(ab), beta);
                            check_close_norm(what, cd, g, c, cd == DType::BF16 ? 1e-2 : 1e-5);
                            check_norm_vs_reference(what, cd, g, c, r, cd == DType::BF16 ? 1e-2 : 1e-5);
                            CHECK(gaps_ok, "%s: elements outside C's windows untouched", what);
                        }
}


// gemm_batched on the GPU (the pointer-array path for outer × inner, the strided path for 1 × n and n × 1)
// against the CPU; the gaps between the matrices untouched (max_rel_err sees them: they hold the same inputs).
static void test_gemm_batched_gpu() {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (DType ab : {DType::F32, DType::BF16})
                for (DType cd : {DType::F32, DType::BF16})
                    for (float beta : {0.f, 1.f})
                        for (auto oi : {std::pair<int, int>{3, 5}, {1, 5}, {4, 1}}) {
                            if (ab == DType::F32 && cd == DType::BF16) continue;
                            BatchedCase bc{37, 67, 29, oi.first, oi.second, ta != 0, tb != 0, ab, cd, beta};
                            std::vector<float> hA, hB, hC, r;
                            batched_inputs(bc, hA, hB, hC);
                            std::vector<float> c = run_gemm_batched(Device::CPU, bc, hA, hB, hC, &r);
                            std::vector<float> g = run_gemm_batched(Device::CUDA, bc, hA, hB, hC, nullptr);
                            char what[128];
                            snprintf(what, sizeof what, "gemm_batched %dx%d tA=%d tB=%d ab=%s c=%s beta=%g", bc.outer,
                                     bc.inner, ta, tb, dtype_name(ab), dtype_name(cd), beta);
                            check_close_norm(what, cd, g, c, cd == DType::BF16 ? 1e-2 : 1e-5);
                            check_norm_vs_reference(what, cd, g, c, r, cd == DType::BF16 ? 1e-2 : 1e-5);
                            CHECK(!std::any_of(g.begin(), g.end(), [](float x) { return std::isnan(x); }),
                                  "%s: every window written", what);
                        }
}

static void gpu_checks() {
    g_rng.seed(4321);
    test_gemm_gpu();
    test_gemm_batched_gpu();
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_matmul", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
