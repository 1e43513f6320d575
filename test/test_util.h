// test_util.h — the test harness every test file shares: checks that count failures, the two halves of an op
// test (CPU checks / GPU-vs-CPU checks, exit 77 to skip without a GPU), random inputs, comparisons, tensors
// on both devices, finite differences, and a temporary directory for file-format tests.
// Every test executable returns 0 on success, 1 on failure, 77 when it needs a GPU and none is visible.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include "../layers/runtime.h"

// =========================================================================================================
// Checks and the exit code
// =========================================================================================================

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

// GPU tests call this first: exit code 77 tells CTest the test was skipped (SKIP_RETURN_CODE, mm_test).
inline void require_gpu_or_skip(const char* name) {
    if (!cuda_available()) {
        printf("%s: no CUDA GPU visible, skipping\n", name);
        exit(77);
    }
}

// An op test (test/layers/test_<op>.cu) has two halves in one executable, registered twice in
// test/layers/layers.cmake:
//   --cpu   the fast CPU path against a plain reference done by hand (CTest label unit; what `make test-asan` runs);
//   --gpu   every CUDA kernel against that fast CPU path (label gpu; exits 77 when no GPU is visible).
// With no flag both halves run, the GPU one only when a GPU is visible. `cpu` and `gpu` are the file's own
// contexts, created here for the halves that run; gpu_checks may be null (an op with no CUDA code).
inline int run_op_test(int argc, char** argv, const char* name, Ctx& cpu, Ctx& gpu, void (*cpu_checks)(),
                       void (*gpu_checks)()) {
    const std::string flag = argc > 1 ? argv[1] : "";
    if (argc > 2 || (flag != "" && flag != "--cpu" && flag != "--gpu")) {
        fprintf(stderr, "usage: %s [--cpu | --gpu]\n", argv[0]);
        return 2;
    }
    const std::string label = flag.empty() ? std::string(name) : std::string(name) + " " + flag;
    bool run_cpu = flag != "--gpu", run_gpu = flag != "--cpu" && gpu_checks;
    if (flag == "--gpu" && !gpu_checks) {
        printf("%s: this op has no GPU checks, skipping\n", label.c_str());
        return 77;
    }
    if (flag == "--gpu") require_gpu_or_skip(label.c_str());
    if (flag.empty() && run_gpu && !cuda_available()) {
        printf("%s: no CUDA GPU visible, the GPU-vs-CPU checks are skipped\n", name);
        run_gpu = false;
    }
    cpu = ctx_create(Device::CPU);
    if (run_cpu) cpu_checks();
    if (run_gpu) {
        gpu = ctx_create(Device::CUDA, 0);
        gpu_checks();
        ctx_destroy(gpu);
    }
    ctx_destroy(cpu);
    return test_finish(label.c_str());
}

// =========================================================================================================
// Random inputs and comparisons of host vectors
// =========================================================================================================

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// n token ids uniform in [0, vocab), as a token shard stores them.
inline std::vector<uint16_t> random_tokens(size_t n, int vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int> d(0, vocab - 1);
    std::vector<uint16_t> t(n);
    for (auto& x : t) x = (uint16_t)d(rng);
    return t;
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
// Max over i of |a-b|; NaN anywhere gives infinity.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (std::isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    return true;
}
// Root mean square: the typical size of a vector's entries (the absolute scale of a tolerance).
inline double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (v.empty() ? 1 : (double)v.size()));
}
// Σ a_i·b_i in double.
inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * (double)b[i];
    return s;
}
// x + h·d, elementwise.
inline std::vector<float> axpy(const std::vector<float>& x, double h, const std::vector<float>& d) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = (float)((double)x[i] + h * (double)d[i]);
    return r;
}
// a - b, elementwise (what an accumulating backward added onto its prefilled output).
inline std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> r(a.size());
    for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
    return r;
}
inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// bf16-round a host vector (what storing it in bf16 does).
inline std::vector<float> round_bf16(std::vector<float> v) {
    for (auto& x : v) x = to_f32(from_f32<bf16>(x));
    return v;
}
// What storing `v` in `dt` keeps of it.
inline std::vector<float> round_to(DType dt, std::vector<float> v) { return dt == DType::BF16 ? round_bf16(v) : v; }

// =========================================================================================================
// Tensors for op tests
// =========================================================================================================

// A tensor on `device` holding `v` converted to `dtype`.
inline Tensor make_tensor(Device device, DType dtype, const std::vector<float>& v) {
    Tensor t = tensor_alloc(device, dtype, (int64_t)v.size());
    tensor_from_host_f32(t, v.data());
    return t;
}
inline Tensor cpu_tensor(DType dtype, const std::vector<float>& v) { return make_tensor(Device::CPU, dtype, v); }
// A tensor's values as host floats, from either device.
inline std::vector<float> to_host(Tensor t) { return tensor_to_host_f32(t); }
// A CPU tensor that aliases a host vector (no copy): the op sees every change made to the vector, so finite
// differences can perturb the vector in place. Not to be freed.
inline Tensor cpu_view(std::vector<float>& v) {
    Tensor t;
    t.data = v.data();
    t.n = (int64_t)v.size();
    t.dtype = DType::F32;
    t.device = Device::CPU;
    return t;
}
inline Tensor cpu_view(std::vector<int32_t>& v) {
    Tensor t;
    t.data = v.data();
    t.n = (int64_t)v.size();
    t.dtype = DType::I32;
    t.device = Device::CPU;
    return t;
}
// An output buffer poisoned before an op writes it, so an element the op forgets to write shows: NaN for
// values, 7 (neither 0 nor 1) for u8 dropout masks.
inline Tensor poisoned_tensor(Device device, DType dtype, int64_t n) {
    Tensor t = tensor_alloc(device, dtype, n);
    tensor_fill_f32(t, dtype == DType::U8 ? 7.0f : NAN);
    return t;
}
// The same tensor on both devices: `c` the fast CPU path's, `g` the GPU kernel's.
struct TensorPair {
    Tensor c, g;
};
inline TensorPair on_both(DType dtype, const std::vector<float>& v) {
    return {make_tensor(Device::CPU, dtype, v), make_tensor(Device::CUDA, dtype, v)};
}
inline TensorPair poisoned_pair(DType dtype, int64_t n) {
    return {poisoned_tensor(Device::CPU, dtype, n), poisoned_tensor(Device::CUDA, dtype, n)};
}
inline void free_all(std::initializer_list<Tensor*> ts) {
    for (Tensor* t : ts) tensor_free(*t);
}
inline void free_all(std::initializer_list<TensorPair*> ps) {
    for (TensorPair* p : ps) {
        tensor_free(p->c);
        tensor_free(p->g);
    }
}

// =========================================================================================================
// GPU kernel vs fast CPU path
// =========================================================================================================

// Every element: |got - want| <= rtol·|want| + atol·rms(want), and no NaN anywhere. Prints the worst. The
// element-wise kernels compute each output from the same few inputs as the CPU, so each element is judged.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol,
                        const char* what, const char* dt, int N, int C) {
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
// check_close's tolerances for the element-wise kernels: f32 1e-5 relative (+1e-5·rms absolute; reductions
// over rows 1e-4·rms, since the two devices add in different orders); bf16 storage 1e-2.
struct ElementwiseTol {
    double rtol, atol, atol_reduce;
};
inline ElementwiseTol elementwise_tol(DType dt) {
    return dt == DType::F32 ? ElementwiseTol{1e-5, 1e-5, 1e-4} : ElementwiseTol{1e-2, 1e-2, 1e-2};
}

// check_close_norm's default tolerance: fp32 ~1e-4 relative (cuBLAS sums in another order, but never in
// TF32), bf16 ~2e-2.
inline double norm_tol(DType dt) { return dt == DType::BF16 ? 2e-2 : 1e-4; }
// GPU result vs fast CPU path for the GEMM-based ops, whose outputs are long sums added in another order:
// ‖g − c‖/‖c‖ < tol and max|g − c| / max|c| < 4·tol. NaN (a poisoned element never written) fails.
inline void check_close_norm(const char* what, DType dt, const std::vector<float>& got, const std::vector<float>& ref,
                             double tol = -1) {
    if (tol < 0) tol = norm_tol(dt);
    double nre = norm_rel_err(got, ref);
    double maxref = 0, maxdiff = 0;
    bool nan = got.size() != ref.size();
    for (size_t i = 0; i < got.size() && i < ref.size(); i++) {
        if (std::isnan(got[i]) || std::isnan(ref[i])) nan = true;
        maxref = std::fmax(maxref, (double)std::fabs(ref[i]));
        maxdiff = std::fmax(maxdiff, (double)std::fabs(got[i] - ref[i]));
    }
    double mre = maxdiff / (maxref > 0 ? maxref : 1e-30);
    CHECK(!nan && nre < tol && mre < 4 * tol, "%s [%s]: norm rel err %.3g, max err / max %.3g (tol %.1g)%s", what,
          dtype_name(dt), nre, mre, tol, nan ? ", NaN" : "");
}

// =========================================================================================================
// Finite differences (backward passes checked against the forward)
// =========================================================================================================

// Per-element agreement: |numeric - analytic| <= kFdTol · (|analytic| + scale), where `scale` is the typical
// size of the gradient (so entries that are ~0 are judged on an absolute scale). Central differences with
// h = 1e-2 on fp32 ops land within ~2e-4 (truncation h² plus fp32 rounding / h); 2e-3 leaves a 10x margin
// and still catches a gradient that is off by 1%.
constexpr double kFdTol = 2e-3;
inline bool fd_close(double numeric, double analytic, double scale) {
    return std::fabs(numeric - analytic) <= kFdTol * (std::fabs(analytic) + scale);
}

// Directional derivative of f at x along d by central differences: (f(x + εd) − f(x − εd)) / 2ε.
// x is perturbed in place (f sees it through a cpu_view) and restored.
inline double fd_directional(std::vector<float>& x, const std::vector<float>& d, float eps,
                             const std::function<double()>& f) {
    std::vector<float> x0 = x;
    for (size_t i = 0; i < x.size(); i++) x[i] = x0[i] + eps * d[i];
    double fp = f();
    for (size_t i = 0; i < x.size(); i++) x[i] = x0[i] - eps * d[i];
    double fm = f();
    x = x0;
    return (fp - fm) / (2.0 * eps);
}
inline void check_fd(const char* what, double fd, double analytic, double tol) {
    double rel = std::fabs(fd - analytic) / (std::fabs(analytic) + 1e-3);
    CHECK(rel < tol, "%s: finite difference %.8g vs analytic %.8g (rel %.3g, tol %.1g)", what, fd, analytic, rel,
          tol);
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
