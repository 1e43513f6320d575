// sgemm_rate.cu — this machine's fp32 GEMM rate: the "measured sgemm rate" that bench/cpu_peer.sh divides a
// training step's matrix FLOPs by to get the step's roofline (bench/PERF_NOTES.md, "The step against its
// roofline").
//
//   build/sgemm_rate [--n 2048] [--threads 2] [--reps 9]
//
// One C = A·Bᵀ of n×n fp32 matrices per call, made by OpenBLAS on its own --threads threads (one
// multi-threaded call, the fastest way this machine multiplies large matrices; the trainer itself cuts its
// GEMMs into single-threaded tiles so that its bits do not depend on the thread count, matmul.cu). Prints the
// median rate over --reps calls after one warm-up call, as "sgemm n N, T threads: R GFLOP/s".
// A benchmark, never a timing test (its CTest smoke run only checks that it runs and prints the line).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static int int_flag(int argc, char** argv, int& i, const char* name, int lo, int hi) {
    if (i + 1 >= argc) {
        fprintf(stderr, "sgemm_rate: %s needs a value\n", name);
        exit(2);
    }
    char* end = nullptr;
    const long v = strtol(argv[++i], &end, 10);
    if (!end || *end || v < lo || v > hi) {
        fprintf(stderr, "sgemm_rate: %s expects an integer in [%d, %d], got '%s'\n", name, lo, hi, argv[i]);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char** argv) {
    int n = 2048, threads = 2, reps = 9;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n")) n = int_flag(argc, argv, i, "--n", 1, 16384);
        else if (!strcmp(argv[i], "--threads")) threads = int_flag(argc, argv, i, "--threads", 1, 1024);
        else if (!strcmp(argv[i], "--reps")) reps = int_flag(argc, argv, i, "--reps", 1, 1000);
        else {
            fprintf(stderr, "sgemm_rate: unknown flag '%s' (usage: sgemm_rate [--n 2048] [--threads 2] [--reps 9])\n",
                    argv[i]);
            return 2;
        }
    }
    openblas_set_num_threads(threads);
    const size_t nn = (size_t)n * n;
    std::vector<float> a(nn), b(nn), c(nn);
    for (size_t i = 0; i < nn; i++) {  // values of one size, no denormals: the rate of ordinary data
        a[i] = 0.5f + (float)(i % 7) / 16.f;
        b[i] = 0.25f + (float)(i % 5) / 32.f;
    }
    auto call = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    };
    call();  // warm-up: OpenBLAS's threads start, the pages are touched
    std::vector<double> secs;
    for (int r = 0; r < reps; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        call();
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    const double median = secs[secs.size() / 2];
    const int got = openblas_get_num_threads();
    printf("sgemm n %d, %d thread%s: %.1f GFLOP/s (median of %d calls, %.2f ms each)\n", n, got, got == 1 ? "" : "s",
           2.0 * n * n * (double)n / median / 1e9, reps, median * 1e3);
    return 0;
}
