// bench_common.h — what the two benchmarks (layer_bench.cu: paper Table 4; e2e_bench.cu: Table 5 style)
// share: where to run, whether to bring MPI up, a timer that is right on both devices, random fills,
// medians and a tiny JSON writer.
//
// Timing method (docs/design.md, "Benchmarks"): warm-up runs first (cuBLAS heuristics, the caching
// activation allocator and lazy module loading stay out of the numbers), then N timed repetitions, and the
// MEDIAN is reported. On CUDA the timer records events on the context's stream, so it measures GPU time of
// exactly the work queued between two marks (and of the second stream's work joined back into it); on CPU
// every op is synchronous, so a steady clock measures the same thing.
#pragma once
#include <mpi.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../layers/philox.h"
#include "../layers/runtime.h"
#include "../parallel/process_grid.h"
#include "../recompute/flash_memory.h"  // formula_input with the attention core
#include "../recompute/formulas.h"

// ---- command-line helpers -------------------------------------------------------------------------------
// Every flag takes a value ("--flag value"); a bad or missing value stops with a message naming the flag.
inline bool bench_flag(int argc, char** argv, int& i, const char* name, std::string& out) {
    if (strcmp(argv[i], name) != 0) return false;
    if (i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", name);
        exit(2);
    }
    out = argv[++i];
    return true;
}
inline int bench_int(const std::string& v, const char* name, int min_value) {
    char* end = nullptr;
    long x = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < min_value || x > (1L << 30)) {
        fprintf(stderr, "error: %s expects an integer >= %d, got '%s'\n", name, min_value, v.c_str());
        exit(2);
    }
    return (int)x;
}
inline double bench_double(const std::string& v, const char* name) {
    char* end = nullptr;
    double x = strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x)) {
        fprintf(stderr, "error: %s expects a number, got '%s'\n", name, v.c_str());
        exit(2);
    }
    return x;
}
inline DType bench_dtype(const std::string& v) {
    if (v == "bf16") return DType::BF16;
    if (v == "f32" || v == "fp32") return DType::F32;
    fprintf(stderr, "error: --dtype expects bf16 or f32, got '%s'\n", v.c_str());
    exit(2);
}

// --attention unfused|flash (recompute/formulas.h's names).
inline Attention bench_attention(const std::string& v) {
    Attention at;
    if (parse_attention(v.c_str(), &at)) return at;
    fprintf(stderr, "error: --attention expects unfused or flash, got '%s'\n", v.c_str());
    exit(2);
}

// ---- where to run ----------------------------------------------------------------------------------------
// --device auto: the first GPU when one is visible, else the CPU.
inline Device bench_device(const std::string& want) {
    if (want == "cpu") return Device::CPU;
    if (want == "cuda") {
        if (!cuda_available()) {
            fprintf(stderr, "error: --device cuda: no CUDA GPU is visible on this machine; use --device cpu\n");
            exit(2);
        }
        return Device::CUDA;
    }
    if (want != "auto") {
        fprintf(stderr, "error: --device expects auto, cpu or cuda, got '%s'\n", want.c_str());
        exit(2);
    }
    return cuda_available() ? Device::CUDA : Device::CPU;
}

inline std::string bench_device_name(Device d) {
    if (d == Device::CPU) {
        char s[128];
        snprintf(s, sizeof s, "cpu (%d OpenMP threads)", omp_get_max_threads());
        return s;
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    return p.name;
}

// ---- MPI or not -------------------------------------------------------------------------------------------
// Both benchmarks are one process on one device: a group of one rank makes every collective a no-op
// (parallel/comm.cu) and the training path then makes no MPI call at all. So MPI is brought up only when it
// is wanted: "--mpi on", or "auto" when started by mpirun. Without it the process grid is built by hand with
// one-rank communicators (exactly what grid_create makes for a world of one), which lets the benchmarks run
// on a GPU machine whose MPI installation is incomplete.
inline bool launched_by_mpirun() {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE");
}
inline bool bench_mpi_init(const std::string& mode, int* argc, char*** argv) {
    bool use = mode == "on" || (mode == "auto" && launched_by_mpirun());
    if (mode != "on" && mode != "off" && mode != "auto") {
        fprintf(stderr, "error: --mpi expects auto, on or off, got '%s'\n", mode.c_str());
        exit(2);
    }
    if (!use) return false;
    MPI_CHECK(MPI_Init(argc, argv));
    int world = 1;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (world != 1) mm_fatal("this benchmark is one process on one device; run it with mpirun -np 1 (or without mpirun)");
    return true;
}
inline void bench_mpi_finalize(bool mpi) {
    if (mpi) MPI_CHECK(MPI_Finalize());
}
// The grid of a one-process run: tp = dp = 1. With MPI, grid_create on MPI_COMM_WORLD; without, the same
// one-rank communicators by hand (rank 0 of 1, no MPI communicator: every collective is a no-op).
inline ProcessGrid bench_single_rank_grid(bool mpi, const Ctx& ctx) {
    if (mpi) return grid_create(MPI_COMM_WORLD, 1, false, CommBackend::MPI, ctx);
    ProcessGrid g;  // rank 0 of a world of 1; tp_comm and dp_comm are default Comms: size 1, MPI_COMM_NULL
    return g;
}
inline void bench_grid_destroy(bool mpi, ProcessGrid& g) {
    if (mpi) grid_destroy(g);
}

// ---- timer ------------------------------------------------------------------------------------------------
// mark(i) records point i; ms(i, j) is the time from point i to point j. The CUDA version measures the
// stream's work (events), the CPU version the host clock (the CPU ops are synchronous).
struct BenchTimer {
    Device device = Device::CPU;
    cudaStream_t stream = nullptr;
    std::vector<cudaEvent_t> ev;
    std::vector<double> host_s;

    BenchTimer(const Ctx& ctx, int points) : device(ctx.device), stream(ctx.stream), host_s(points, 0.0) {
        if (device == Device::CUDA) {
            ev.resize(points);
            for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
        }
    }
    ~BenchTimer() {
        for (auto& e : ev) cudaEventDestroy(e);  // destructor: nothing to report an error to
    }
    void mark(int i) {
        if (device == Device::CUDA) CUDA_CHECK(cudaEventRecord(ev[i], stream));
        else host_s[i] = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    // Waits for the last point, then reads the interval.
    double ms(int i, int j) {
        if (device == Device::CPU) return (host_s[j] - host_s[i]) * 1e3;
        CUDA_CHECK(cudaEventSynchronize(ev[j]));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, ev[i], ev[j]));
        return t;
    }
};

inline double wall_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median_of(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- random data (never zeros: zeros make GEMMs run faster than real data) ---------------------
// A standard normal for element i of stream `stream`: counter-based, so any thread order gives the same data.
inline float bench_normal(uint64_t seed, uint32_t stream, uint64_t i) {
    PhiloxOut o = philox4x32_10((uint32_t)i, (uint32_t)(i >> 32), stream, 0x62656e63u /*"benc"*/, (uint32_t)seed,
                                (uint32_t)(seed >> 32));
    double u1 = ((double)o.x[0] + 1.0) / 4294967297.0, u2 = (double)o.x[1] / 4294967296.0;
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}
// t[i] = mean + std · N(0, 1), converted to t's dtype on its device.
inline void bench_fill_normal(Tensor t, uint64_t seed, uint32_t stream, float mean, float std) {
    std::vector<float> h((size_t)t.n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < t.n; i++) h[i] = mean + std * bench_normal(seed, stream, (uint64_t)i);
    tensor_from_host_f32(t, h.data());
}

// ---- device memory ------------------------------------------------------------------------------------------
inline double device_used_gb(Device d) {
    if (d != Device::CUDA) return NAN;
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return (double)(tot - fr) / 1e9;
}
inline double device_total_gb(Device d) {
    if (d != Device::CUDA) return NAN;
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return (double)tot / 1e9;
}
inline double device_free_gb(Device d) {
    if (d != Device::CUDA) return NAN;
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return (double)fr / 1e9;
}

// ---- a minimal JSON writer (numbers, strings, arrays of numbers) ------------------------------------------
struct JsonOut {
    std::string s;
    bool first = true;
    void open(char c) { sep(); s += c; first = true; }
    void close(char c) { s += c; first = false; }
    void sep() { if (!first) s += ","; first = false; }
    void key(const char* k) { sep(); s += "\""; s += k; s += "\":"; first = true; }
    void num(double v) {
        sep();
        char b[64];
        if (std::isfinite(v)) snprintf(b, sizeof b, "%.6g", v);
        else snprintf(b, sizeof b, "null");
        s += b;
    }
    void str(const std::string& v) {
        sep();
        s += "\"";
        for (char c : v) {
            if (c == '"' || c == '\\') { s += '\\'; s += c; }
            else if (c == '\n') s += "\\n";
            else if ((unsigned char)c < 0x20) s += ' ';
            else s += c;
        }
        s += "\"";
    }
    void boolean(bool v) { sep(); s += v ? "true" : "false"; }
    void kv(const char* k, double v) { key(k); num(v); }
    void kv(const char* k, const std::string& v) { key(k); str(v); }
    void kv(const char* k, const char* v) { key(k); str(v); }
    void kvb(const char* k, bool v) { key(k); boolean(v); }
    void kv(const char* k, const std::vector<double>& v) {
        key(k);
        open('[');
        for (double x : v) num(x);
        close(']');
    }
    // Writes the document to `path`; false (with a message) when the file cannot be written.
    bool write(const std::string& path) const {
        FILE* f = fopen(path.c_str(), "w");
        if (!f) {
            fprintf(stderr, "error: cannot open %s for writing\n", path.c_str());
            return false;
        }
        fprintf(f, "%s\n", s.c_str());
        return fclose(f) == 0;
    }
};
