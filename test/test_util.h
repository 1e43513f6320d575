// test_util.h — a tiny test harness: checks that count failures, random inputs, comparisons, GPU skip, and a
// temporary directory for file-format tests.
// Every test executable returns 0 on success, 1 on failure, 77 when it needs a GPU and none is visible.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include "../layers/runtime.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        g_checks++;                                                                   \
        if (!(cond)) {                                                                \
            g_failures++;                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
        }                                                                             \
    } while (0)

inline int test_finish(const char* name) {
    if (g_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, g_failures, g_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, g_checks);
    return 0;
}

// GPU tests call this first: exit code 77 tells CTest the test was skipped.
inline void require_gpu_or_skip(const char* name) {
    if (!cuda_available()) {
        printf("%s: no CUDA GPU visible, skipping\n", name);
        exit(77);
    }
}

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Max over i of |a-b| / (|b| + floor): relative error with an absolute floor for values near zero.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
    double m = 0;
    if (a.size() != b.size()) return INFINITY;
    for (size_t i = 0; i < a.size(); i++) {
        double d = std::fabs((double)a[i] - (double)b[i]) / (std::fabs((double)b[i]) + floor);
        if (std::isnan(d) || std::isnan(a[i])) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}
// ‖a - b‖ / ‖b‖
inline double norm_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    if (a.size() != b.size()) return INFINITY;
    for (size_t i = 0; i < a.size(); i++) {
        double d = (double)a[i] - (double)b[i];
        if (std::isnan(a[i])) return INFINITY;
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1e-30));
}
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    return true;
}

// A tensor on `device` holding `v` converted to `dtype`.
inline Tensor make_tensor(Device device, DType dtype, const std::vector<float>& v) {
    Tensor t = tensor_alloc(device, dtype, (int64_t)v.size());
    tensor_from_host_f32(t, v.data());
    return t;
}
// bf16-round a host vector (what storing it in bf16 does).
inline std::vector<float> round_bf16(std::vector<float> v) {
    for (auto& x : v) x = to_f32(from_f32<bf16>(x));
    return v;
}

// =========================================================================================================
// Files (the data and checkpoint format tests)
// =========================================================================================================

// This run's temporary directory, made by tmp_dir_create(), removed by tmp_dir_finish() when every check
// passed, kept for inspection when one failed.
inline std::string& tmp_dir() {
    static std::string dir;
    return dir;
}
inline void tmp_dir_create(const char* tag) {
    std::string tmpl = std::string("/tmp/mm_") + tag + "_XXXXXX";
    if (!mkdtemp(&tmpl[0])) {
        perror("mkdtemp");
        exit(1);
    }
    tmp_dir() = tmpl;
}
inline void tmp_dir_finish() {
    std::error_code ec;
    if (g_failures == 0) std::filesystem::remove_all(tmp_dir(), ec);
    else fprintf(stderr, "files kept in %s\n", tmp_dir().c_str());
}
inline std::string tmp_path(const std::string& name) { return tmp_dir() + "/" + name; }
// Files in the temporary directory named like an unfinished atomic write ("*.tmp.<pid>", data/atomic_file.h):
// none may be left beside the real ones once a write returned.
inline int count_tmp_files() {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(tmp_dir()))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) n++;
    return n;
}

inline std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), (std::streamsize)bytes.size());
}
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// The i-th int32 of an llm.c file's 256-int header (shards and checkpoints), and setting it (to corrupt one).
inline int32_t header_int(const std::string& bytes, int i) {
    int32_t v = 0;
    memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
}
inline void set_header_int(std::string& bytes, int i, int32_t v) { memcpy(&bytes[4 * i], &v, 4); }
