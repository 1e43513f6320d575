// gemm_compare.cu — the CPU GEMM candidates side by side at the trainer's own shapes (bench/PERF_NOTES.md,
// "CPU GEMMs side by side"). A benchmark, never a test: it is built with the other benchmarks and run by hand.
//
//   build/gemm_compare [--set train|peer|gpt2|square|all] [--threads 2] [--min-ms 300] [--only NAME] [--cold]
//
// For every GEMM of one training step's shapes (each linear's forward in·Wᵀ, its dX = dout·W and its
// dW = doutᵀ·in, as layers/linear.cu calls gemm(); attention's per-block batched products as
// layers/attention.cu calls gemm_batched(), with the same strides into qkv and the s×s tensors), it times
// each candidate at 1 and at --threads threads and checks:
//  - thread-count independence: the output bits at 1 thread and at --threads threads are the same;
//  - whether the bits are those of today's scheme (the first candidate), i.e. whether switching would
//    change the trainer's results at all;
//  - the error against a float64 product on sampled rows: max |c − r| / rms(r) over the checked elements.
// The candidates:
//  - tiles/openblas: the project's scheme (matmul.cu): every matrix of a batch is a task, cut along the
//    longer side of its output into tiles (cpu_gemm_tiles: an even number of near-equal pieces of at most 512
//    rows or columns), OpenMP threads run the tasks, each tile one single-threaded OpenBLAS call;
//  - tiles128/openblas: the same with the 128-row (or column) tiles of the project until 2026-12-04;
//  - mt/openblas: one cblas_sgemm per matrix, OpenBLAS's own threads (openblas_set_num_threads);
//  - mt/blis: one bli_sgemm_ex per matrix, BLIS's own threads (the rntm_t of the call);
//  - tiles/blis: the tiles above, each one single-threaded BLIS call;
//  - onednn: one oneDNN matmul primitive per gemm_batched call (a 4-D [outer, inner, M, K] problem with the
//    call's strides; made once per shape before timing, as a primitive cache would), OpenMP threads.
// Times are medians of repeated runs of one call's whole work (all its blocks for attention).
#include "../layers/matmul.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#pragma nv_diag_suppress 68  // blis.h: "integer conversion resulted in a change of sign" in its own macros
#include MM_BLIS_HEADER  // blis.h (bench.cmake: by its full path)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// One operand of a two-level batch, as matmul.h's GemmBatchOperand: matrix (o, i) at o·outer + i·stride.
struct Operand {
    float* ptr;
    int64_t ld, outer, stride;
};
// One gemm_batched call: C(o, i) = op(A(o, i)) · op(B(o, i)), row-major, beta = 0.
struct Call {
    bool ta, tb;
    int M, N, K;
    Operand A, B, C;
    int outer, inner;
};
// One row of the table: the calls of one op (one call for a linear GEMM, one per causal block for attention).
struct Work {
    std::string name;
    std::vector<Call> calls;
    double flops = 0;
    std::vector<std::vector<float>> bufs;  // the operands (A and B filled once, C rewritten by each run)
    std::vector<float>* out = nullptr;     // the buffer the calls write
};

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the candidates ----------------------------------------------------------------------------------------

constexpr int kTile128 = 128;  // matmul.cu's tile until 2026-12-04

// The tile scheme with a per-tile single-threaded product `f` (OpenBLAS or BLIS).
using TileGemm = std::function<void(bool ta, bool tb, int m, int n, int k, const float* a, int64_t lda,
                                    const float* b, int64_t ldb, float* c, int64_t ldc)>;
static void run_tiles(const Call& c, const TileGemm& f, bool tiles128 = false) {
    const bool split_rows = c.M >= c.N;
    const int L = split_rows ? c.M : c.N;
    const GemmTiles cut = tiles128 ? GemmTiles{kTile128, (L + kTile128 - 1) / kTile128} : cpu_gemm_tiles(L);
    const int tiles = cut.count;
    const int64_t tasks = (int64_t)c.outer * c.inner * tiles;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t mat = t / tiles, o = mat / c.inner, i = mat % c.inner;
        const int tile = (int)(t % tiles);
        const int r0 = split_rows ? tile * cut.size : 0, c0 = split_rows ? 0 : tile * cut.size;
        const int m = split_rows ? std::min(cut.size, c.M - r0) : c.M;
        const int n = split_rows ? c.N : std::min(cut.size, c.N - c0);
        const float* a = c.A.ptr + o * c.A.outer + i * c.A.stride + (c.ta ? r0 : (int64_t)r0 * c.A.ld);
        const float* b = c.B.ptr + o * c.B.outer + i * c.B.stride + (c.tb ? (int64_t)c0 * c.B.ld : c0);
        float* cc = c.C.ptr + o * c.C.outer + i * c.C.stride + (int64_t)r0 * c.C.ld + c0;
        f(c.ta, c.tb, m, n, c.K, a, c.A.ld, b, c.B.ld, cc, c.C.ld);
    }
}

static void openblas_one(bool ta, bool tb, int m, int n, int k, const float* a, int64_t lda, const float* b,
                         int64_t ldb, float* c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a,
                (int)lda, b, (int)ldb, 0.f, c, (int)ldc);
}

// BLIS takes a row and a column stride per operand, so a transpose is a swap of the two.
static void blis_one(bool ta, bool tb, int m, int n, int k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, float* c, int64_t ldc, int threads) {
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(threads, &rntm);
    float one = 1.f, zero = 0.f;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a), ta ? 1 : lda,
                 ta ? lda : 1, const_cast<float*>(b), tb ? 1 : ldb, tb ? ldb : 1, &zero, c, ldc, 1, nullptr, &rntm);
}

// oneDNN: one primitive per call, the batch as the two leading dimensions of 4-D tensors with strides.
struct OneDnn {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    struct Prim {
        dnnl::matmul prim;
        dnnl::memory a, b, c;
        std::string impl;
    };
    std::vector<Prim> prims;  // one per call of the current work
    void prepare(const Work& w) {
        using md = dnnl::memory::desc;
        using dt = dnnl::memory::data_type;
        prims.clear();
        for (const Call& c : w.calls) {
            // A plain product as 2-D tensors (4-D ones with a batch of 1 took oneDNN's reference kernel).
            const bool plain = c.outer == 1 && c.inner == 1;
            auto desc = [&](int rows, int cols, const Operand& x, bool t) {
                const int64_t rs = t ? 1 : x.ld, cs = t ? x.ld : 1;
                return plain ? md({rows, cols}, dt::f32, {rs, cs})
                             : md({c.outer, c.inner, rows, cols}, dt::f32, {x.outer, x.stride, rs, cs});
            };
            md a = desc(c.M, c.K, c.A, c.ta), b = desc(c.K, c.N, c.B, c.tb), d = desc(c.M, c.N, c.C, false);
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, d), eng);
            prims.push_back(Prim{dnnl::matmul(pd), dnnl::memory(a, eng, c.A.ptr), dnnl::memory(b, eng, c.B.ptr),
                                 dnnl::memory(d, eng, c.C.ptr), pd.impl_info_str()});
        }
    }
    void run() {
        for (Prim& p : prims)
            p.prim.execute(strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
        strm.wait();
    }
};

struct Candidate {
    std::string name;
    std::function<void(const Work&)> prepare;  // outside the timing (oneDNN's primitives)
    std::function<void(const Work&, int threads)> run;
    std::function<std::string()> note;
};

static std::vector<Candidate> candidates(OneDnn& dnn) {
    std::vector<Candidate> v;
    v.push_back({"tiles/openblas", nullptr,
                 [](const Work& w, int threads) {
                     openblas_set_num_threads(1);
                     omp_set_num_threads(threads);
                     for (const Call& c : w.calls) run_tiles(c, openblas_one);
                 },
                 nullptr});
    v.push_back({"tiles128/openblas", nullptr,
                 [](const Work& w, int threads) {
                     openblas_set_num_threads(1);
                     omp_set_num_threads(threads);
                     for (const Call& c : w.calls) run_tiles(c, openblas_one, true);
                 },
                 nullptr});
    v.push_back({"mt/openblas", nullptr,
                 [](const Work& w, int threads) {
                     openblas_set_num_threads(threads);
                     for (const Call& c : w.calls)
                         for (int o = 0; o < c.outer; o++)
                             for (int i = 0; i < c.inner; i++)
                                 openblas_one(c.ta, c.tb, c.M, c.N, c.K, c.A.ptr + o * c.A.outer + i * c.A.stride,
                                              c.A.ld, c.B.ptr + o * c.B.outer + i * c.B.stride, c.B.ld,
                                              c.C.ptr + o * c.C.outer + i * c.C.stride, c.C.ld);
                     openblas_set_num_threads(1);
                 },
                 nullptr});
    v.push_back({"mt/blis", nullptr,
                 [](const Work& w, int threads) {
                     for (const Call& c : w.calls)
                         for (int o = 0; o < c.outer; o++)
                             for (int i = 0; i < c.inner; i++)
                                 blis_one(c.ta, c.tb, c.M, c.N, c.K, c.A.ptr + o * c.A.outer + i * c.A.stride,
                                          c.A.ld, c.B.ptr + o * c.B.outer + i * c.B.stride, c.B.ld,
                                          c.C.ptr + o * c.C.outer + i * c.C.stride, c.C.ld, threads);
                 },
                 nullptr});
    v.push_back({"tiles/blis", nullptr,
                 [](const Work& w, int threads) {
                     omp_set_num_threads(threads);
                     for (const Call& c : w.calls)
                         run_tiles(c, [](bool ta, bool tb, int m, int n, int k, const float* a, int64_t lda,
                                         const float* b, int64_t ldb, float* cc, int64_t ldc) {
                             blis_one(ta, tb, m, n, k, a, lda, b, ldb, cc, ldc, 1);
                         });
                 },
                 nullptr});
    v.push_back({"onednn", [&dnn](const Work& w) { dnn.prepare(w); },
                 [&dnn](const Work&, int threads) {
                     omp_set_num_threads(threads);
                     dnn.run();
                 },
                 [&dnn]() { return dnn.prims.empty() ? std::string() : dnn.prims[0].impl; }});
    return v;
}

// ---- the shapes ----------------------------------------------------------------------------------------------

static void fill(std::vector<float>& v, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (float& f : v) {
        x = x * 1664525u + 1013904223u;
        f = (float)((x >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;  // uniform in [-1, 1)
    }
}

// The three GEMMs of a linear layer of N rows, IC inputs and OC outputs (layers/linear.cu).
static void add_linear(std::vector<Work>& works, const std::string& name, int N, int IC, int OC) {
    auto make = [&](const char* what, bool ta, bool tb, int M, int Nc, int K, int64_t a_elems, int64_t lda,
                    int64_t b_elems, int64_t ldb) {
        Work w;
        w.name = name + " " + what;
        w.bufs.resize(3);
        w.bufs[0].resize(a_elems);
        w.bufs[1].resize(b_elems);
        w.bufs[2].resize((size_t)M * Nc);
        fill(w.bufs[0], 1);
        fill(w.bufs[1], 2);
        w.calls.push_back(Call{ta, tb, M, Nc, K, {w.bufs[0].data(), lda, 0, 0}, {w.bufs[1].data(), ldb, 0, 0},
                               {w.bufs[2].data(), Nc, 0, 0}, 1, 1});
        w.flops = 2.0 * M * Nc * K;
        works.push_back(std::move(w));
    };
    char dims[64];
    snprintf(dims, sizeof dims, "%dx%dx%d", N, OC, IC);
    make((std::string("fwd ") + dims).c_str(), false, true, N, OC, IC, (int64_t)N * IC, IC, (int64_t)OC * IC, IC);
    make("dX", false, false, N, IC, OC, (int64_t)N * OC, OC, (int64_t)OC * IC, IC);
    make("dW", true, false, OC, IC, N, (int64_t)N * OC, OC, (int64_t)N * IC, IC);
}

// Core attention's six products for B sequences, NH heads of HD, S positions, causal blocks of blk queries,
// with layers/attention.cu's layouts: qkv / dqkv [S·B, 3·NH·HD], out / dout [S·B, NH·HD], s×s [B, NH, S, S];
// or (compact) Q, K, V, out as [B, NH, S, HD] each, as a copy per layer would make them.
static void add_attention(std::vector<Work>& works, const std::string& name, int B, int NH, int S, int HD,
                          int blk, bool compact) {
    const int64_t R = (int64_t)B * 3 * NH * HD, RO = (int64_t)B * NH * HD, SS = (int64_t)S * S;
    const int64_t qkv_n = (int64_t)S * R, out_n = (int64_t)S * RO, ss_n = (int64_t)B * NH * SS;
    const int64_t M1 = (int64_t)S * HD;  // compact: one (sequence, head) matrix
    auto qkv = [&](float* p, int part, int64_t row) {
        return compact ? Operand{p + part * B * NH * M1 + row * HD, HD, NH * M1, M1}
                       : Operand{p + part * NH * HD + row * R, R, 3 * NH * HD, HD};
    };
    auto outp = [&](float* p, int64_t row) {
        return compact ? Operand{p + row * HD, HD, NH * M1, M1} : Operand{p + row * RO, RO, (int64_t)NH * HD, HD};
    };
    auto ss = [&](float* p, int64_t off) { return Operand{p + off, S, NH * SS, SS}; };
    // Each work: bufs[0], bufs[1] the inputs, bufs[2] the output; the lambda adds one block's call.
    auto make = [&](const char* what, int64_t a_n, int64_t b_n, int64_t c_n,
                    const std::function<Call(float*, float*, float*, int r0, int r1)>& call) {
        Work w;
        char nm[128];
        snprintf(nm, sizeof nm, "%s %s", name.c_str(), what);
        w.name = nm;
        w.bufs.resize(3);
        w.bufs[0].resize(a_n);
        w.bufs[1].resize(b_n);
        w.bufs[2].resize(c_n);
        fill(w.bufs[0], 3);
        fill(w.bufs[1], 4);
        for (int r0 = 0; r0 < S; r0 += blk) {
            const int r1 = std::min(S, r0 + blk);
            Call c = call(w.bufs[0].data(), w.bufs[1].data(), w.bufs[2].data(), r0, r1);
            w.flops += 2.0 * c.M * c.N * c.K * c.outer * c.inner;
            w.calls.push_back(c);
        }
        works.push_back(std::move(w));
    };
    // The s×s inputs: rows r0.. of a block hold values only up to the block's end (the softmax writes no more);
    // the rest of the buffer is never read by these calls.
    make("QK^T", qkv_n, qkv_n, ss_n, [&](float* q, float* k, float* c, int r0, int r1) {
        return Call{false, true, r1 - r0, r1, HD, qkv(q, 0, r0), qkv(k, 1, 0), ss(c, (int64_t)r0 * S), B, NH};
    });
    make("P.V", ss_n, qkv_n, out_n, [&](float* p, float* v, float* c, int r0, int r1) {
        return Call{false, false, r1 - r0, HD, r1, ss(p, (int64_t)r0 * S), qkv(v, 2, 0), outp(c, r0), B, NH};
    });
    make("dV=Pt.dO", ss_n, out_n, qkv_n, [&](float* p, float* d, float* c, int r0, int r1) {
        return Call{true, false, r1 - r0, HD, S - r0, ss(p, (int64_t)r0 * S + r0), outp(d, r0),
                    qkv(c, 2, r0), B, NH};
    });
    make("dP=dO.Vt", out_n, qkv_n, ss_n, [&](float* d, float* v, float* c, int r0, int r1) {
        return Call{false, true, r1 - r0, r1, HD, outp(d, r0), qkv(v, 2, 0), ss(c, (int64_t)r0 * S), B, NH};
    });
    make("dQ=dS.K", ss_n, qkv_n, qkv_n, [&](float* s, float* k, float* c, int r0, int r1) {
        return Call{false, false, r1 - r0, HD, r1, ss(s, (int64_t)r0 * S), qkv(k, 1, 0), qkv(c, 0, r0), B, NH};
    });
    make("dK=dSt.Q", ss_n, qkv_n, qkv_n, [&](float* s, float* q, float* c, int r0, int r1) {
        return Call{true, false, r1 - r0, HD, S - r0, ss(s, (int64_t)r0 * S + r0), qkv(q, 0, r0),
                    qkv(c, 1, r0), B, NH};
    });
}

static std::vector<Work> shapes(const std::string& set) {
    std::vector<Work> w;
    const bool all = set == "all";
    if (set == "square" || all) {
        add_linear(w, "n2048", 2048, 2048, 2048);
        w.resize(w.size() - 1);  // in·Wᵀ and the plain A·B: the machine's reference rate
    }
    if (set == "train" || all) {
        // make train: 4 layers, h 128, 4 heads, seq 64, batch 16, tp 2 + SP: one rank's share, N = 1024 rows
        // (SP gathers the sequence before each linear), byte vocabulary 257 padded to 384 (192 per rank).
        add_linear(w, "train qkv", 1024, 128, 192);
        add_linear(w, "train proj", 1024, 64, 128);
        add_linear(w, "train fc1", 1024, 128, 256);
        add_linear(w, "train fc2", 1024, 256, 128);
        add_linear(w, "train lmhead", 1024, 128, 192);
        add_attention(w, "train attn", 16, 2, 64, 32, 64, false);
        add_attention(w, "train attn compact", 16, 2, 64, 32, 64, true);
    }
    if (set == "peer" || all) {
        // bench/cpu_peer.sh: 4 layers, h 256, 8 heads, 8 x 128 tokens, vocabulary padded to 1024, one rank.
        add_linear(w, "peer qkv", 1024, 256, 768);
        add_linear(w, "peer proj", 1024, 256, 256);
        add_linear(w, "peer fc1", 1024, 256, 1024);
        add_linear(w, "peer fc2", 1024, 1024, 256);
        add_linear(w, "peer lmhead", 1024, 256, 1024);
        add_attention(w, "peer attn", 8, 8, 128, 32, 64, false);
        add_attention(w, "peer attn compact", 8, 8, 128, 32, 64, true);
    }
    if (set == "gpt2" || all) {
        // The GPT-2-shaped step: 2 layers, h 768, 12 heads, 2 x 1024 tokens, vocabulary 50257 padded to 50304.
        add_linear(w, "gpt2 qkv", 2048, 768, 2304);
        add_linear(w, "gpt2 proj", 2048, 768, 768);
        add_linear(w, "gpt2 fc1", 2048, 768, 3072);
        add_linear(w, "gpt2 fc2", 2048, 3072, 768);
        add_linear(w, "gpt2 lmhead", 2048, 768, 50304);
        add_attention(w, "gpt2 attn", 2, 12, 1024, 64, 64, false);
        add_attention(w, "gpt2 attn compact", 2, 12, 1024, 64, 64, true);
    }
    for (Work& x : w) x.out = &x.bufs[2];
    return w;
}

// ---- checks ---------------------------------------------------------------------------------------------------

// Error against float64 on sampled rows of the first and the last matrix of every call: max |c − r| / rms(r).
static double error_vs_double(const Work& w) {
    double max_err = 0, sum_r2 = 0;
    int64_t count = 0;
    for (const Call& c : w.calls) {
        const int64_t mats = (int64_t)c.outer * c.inner;
        for (int64_t mat : {(int64_t)0, mats - 1}) {
            const int64_t o = mat / c.inner, i = mat % c.inner;
            const float* A = c.A.ptr + o * c.A.outer + i * c.A.stride;
            const float* B = c.B.ptr + o * c.B.outer + i * c.B.stride;
            const float* C = c.C.ptr + o * c.C.outer + i * c.C.stride;
            const int step = std::max(1, c.M / 16);
            for (int r = 0; r < c.M; r += step)
                for (int col = 0; col < c.N; col++) {
                    double s = 0;
                    for (int k = 0; k < c.K; k++)
                        s += (double)(c.ta ? A[(int64_t)k * c.A.ld + r] : A[(int64_t)r * c.A.ld + k]) *
                             (double)(c.tb ? B[(int64_t)col * c.B.ld + k] : B[(int64_t)k * c.B.ld + col]);
                    const double e = std::fabs((double)C[(int64_t)r * c.C.ld + col] - s);
                    max_err = std::max(max_err, e);
                    sum_r2 += s * s;
                    count++;
                }
            if (mats == 1) break;
        }
    }
    return count ? max_err / std::sqrt(sum_r2 / count) : 0;
}

// --cold: before each timed call, 64 MB are read and written, so that the operands come from memory, as the
// weights (and, at larger shapes, the activations) do in a training step; else they stay in the caches.
static bool g_cold = false;
static void evict_caches() {
    static std::vector<float> junk((size_t)16 << 20);
#pragma omp parallel for
    for (size_t i = 0; i < junk.size(); i++) junk[i] += 1.f;
}

static double time_ms(const Candidate& cand, const Work& w, int threads, double min_ms) {
    cand.run(w, threads);  // warm-up (threads started)
    std::vector<double> t;
    const double start = now_ms();
    while (t.size() < 3 || (now_ms() - start < min_ms && t.size() < 200)) {
        if (g_cold) evict_caches();
        const double t0 = now_ms();
        cand.run(w, threads);
        t.push_back(now_ms() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Each candidate in a process of its own: a library's threads that keep spinning after its last call (OpenBLAS's
// pthreads pool does) would otherwise slow the next candidate down. The children print ROW lines; this prints
// them as one table per thread count, the shapes down, the candidates across.
static int drive(const char* self, const std::string& set, int threads, double min_ms,
                 const std::vector<Candidate>& cands) {
    struct Row {
        std::string work, cand, flags, note;
        double gflop, t1, tn, err;
    };
    std::vector<Row> rows;
    for (const Candidate& c : cands) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' --set %s --threads %d --min-ms %g --only %s%s", self, set.c_str(), threads,
                 min_ms, c.name.c_str(), g_cold ? " --cold" : "");
        FILE* f = popen(cmd, "r");
        if (!f) {
            fprintf(stderr, "error: could not run %s\n", cmd);
            return 1;
        }
        char line[2048];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "ROW|", 4) != 0) continue;
            std::vector<std::string> p;
            std::string cur;
            for (const char* q = line + 4; *q && *q != '\n'; q++) {
                if (*q == '|') p.push_back(cur), cur.clear();
                else cur += *q;
            }
            p.push_back(cur);
            if (p.size() < 8) continue;
            rows.push_back(Row{p[0], p[2], p[5], p[7], atof(p[1].c_str()), atof(p[3].c_str()), atof(p[4].c_str()),
                               atof(p[6].c_str())});
        }
        if (pclose(f) != 0) fprintf(stderr, "warning: %s failed\n", cmd);
        fprintf(stderr, "gemm_compare: %s done\n", c.name.c_str());
    }
    std::vector<std::string> works;
    for (const Row& r : rows)
        if (std::find(works.begin(), works.end(), r.work) == works.end()) works.push_back(r.work);
    auto find = [&](const std::string& w, const std::string& c) -> const Row* {
        for (const Row& r : rows)
            if (r.work == w && r.cand == c) return &r;
        return nullptr;
    };
    for (int pass = 0; pass < 2; pass++) {
        const int t = pass == 0 ? threads : 1;
        printf("\n%d thread%s: ms (GFLOP/s); T = bits differ between 1 and %d threads, D = bits differ from "
               "tiles/openblas\n\n| op | GFLOP |", t, t > 1 ? "s" : "", threads);
        for (const Candidate& c : cands) printf(" %s |", c.name.c_str());
        printf("\n|---|---|");
        for (size_t i = 0; i < cands.size(); i++) printf("---|");
        printf("\n");
        for (const std::string& w : works) {
            const Row* any = nullptr;
            for (const Candidate& c : cands) any = any ? any : find(w, c.name);
            printf("| %s | %.3f |", w.c_str(), any ? any->gflop : 0.0);
            for (const Candidate& c : cands) {
                const Row* r = find(w, c.name);
                const double ms = r ? (pass == 0 ? r->tn : r->t1) : NAN;
                if (!r) printf(" |");
                else if (std::isnan(ms)) printf(" n/t %s |", r->flags.c_str());
                else printf(" %.3f (%.0f) %s |", ms, r->gflop / ms * 1e3, r->flags.c_str());
            }
            printf("\n");
        }
    }
    printf("\nerror against float64 (max |c - r| / rms(r), sampled rows)\n\n| op |");
    for (const Candidate& c : cands) printf(" %s |", c.name.c_str());
    printf("\n|---|");
    for (size_t i = 0; i < cands.size(); i++) printf("---|");
    printf("\n");
    for (const std::string& w : works) {
        printf("| %s |", w.c_str());
        for (const Candidate& c : cands) {
            const Row* r = find(w, c.name);
            if (r) printf(" %.2e |", r->err);
            else printf(" |");
        }
        printf("\n");
    }
    for (const Candidate& c : cands) {
        const Row* r = nullptr;
        for (const Row& x : rows)
            if (x.cand == c.name && !x.note.empty()) r = &x;
        if (r) printf("%s implementation (oneDNN's name): %s\n", c.name.c_str(), r->note.c_str());
    }
    return 0;
}

int main(int argc, char** argv) {
    std::string set = "all", only;
    int threads = 2;
    double min_ms = 300;
    for (int i = 1; i < argc; i++) {
        auto val = [&](const char* flag) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: %s needs a value\n", flag);
                exit(2);
            }
            return std::string(argv[++i]);
        };
        if (!strcmp(argv[i], "--set")) set = val("--set");
        else if (!strcmp(argv[i], "--threads")) threads = atoi(val("--threads").c_str());
        else if (!strcmp(argv[i], "--min-ms")) min_ms = atof(val("--min-ms").c_str());
        else if (!strcmp(argv[i], "--only")) only = val("--only");
        else if (!strcmp(argv[i], "--cold")) g_cold = true;
        else {
            fprintf(stderr, "usage: gemm_compare [--set train|peer|gpt2|square|all] [--threads N] [--min-ms MS] "
                            "[--only CANDIDATE] [--cold]\n");
            return 2;
        }
    }
    if (set != "all" && set != "train" && set != "peer" && set != "gpt2" && set != "square") {
        fprintf(stderr, "error: --set expects train, peer, gpt2, square or all, got '%s'\n", set.c_str());
        return 2;
    }
    if (threads < 1) {
        fprintf(stderr, "error: --threads expects a count >= 1\n");
        return 2;
    }
    // BLIS exports cblas_sgemm too: the OpenBLAS candidates must get OpenBLAS's (the link order decides).
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) || !info.dli_fname ||
        !strstr(info.dli_fname, "openblas")) {
        fprintf(stderr, "error: cblas_sgemm comes from %s, not OpenBLAS: link OpenBLAS before BLIS\n",
                info.dli_fname ? info.dli_fname : "an unknown library");
        return 1;
    }
    OneDnn dnn;
    std::vector<Candidate> cands = candidates(dnn);
    if (only.empty()) return drive(argv[0], set, threads, min_ms, cands);
    bool known = false;
    for (auto& c : cands) known |= c.name == only;
    if (!known) {
        fprintf(stderr, "error: --only: no candidate '%s'\n", only.c_str());
        return 2;
    }
    std::vector<Work> works = shapes(set);
    for (Work& w : works) {
        std::vector<float> ref;  // tiles/openblas at 1 thread: today's bits
        double ref_ms = 0;
        for (size_t ci = 0; ci < cands.size(); ci++) {
            const Candidate& c = cands[ci];
            if (ci != 0 && c.name != only) continue;
            if (ci == 0 && c.name != only) {  // today's bits only, untimed, at 1 thread
                std::fill(w.out->begin(), w.out->end(), NAN);
                const double t0 = now_ms();
                c.run(w, 1);
                ref_ms = now_ms() - t0;
                ref = *w.out;
                continue;
            }
            if (c.prepare) c.prepare(w);
            std::fill(w.out->begin(), w.out->end(), NAN);
            const double t_first = now_ms();
            c.run(w, 1);
            const double first_ms = now_ms() - t_first;
            if (ci == 0) ref_ms = first_ms, ref = *w.out;
            std::vector<float> one = *w.out;
            const double err = error_vs_double(w);
            std::fill(w.out->begin(), w.out->end(), NAN);
            c.run(w, threads);
            const bool same_threads = !memcmp(one.data(), w.out->data(), one.size() * sizeof(float));
            const bool same_today = !memcmp(one.data(), ref.data(), one.size() * sizeof(float));
            double t1 = NAN, tn = NAN;
            // A reference kernel (oneDNN on some strides) is not worth timing; nor, at 1 thread, the largest
            // products (the LM head of the GPT-2 shape).
            if (first_ms <= 20 * ref_ms + 50) {
                if (w.flops < 20e9) t1 = time_ms(c, w, 1, min_ms);
                tn = time_ms(c, w, threads, min_ms);
            }
            printf("ROW|%s|%.6f|%s|%.4f|%.4f|%s%s|%.2e|%s\n", w.name.c_str(), w.flops * 1e-9, c.name.c_str(), t1,
                   tn, same_threads ? "-" : "T", same_today ? "-" : "D", err, c.note ? c.note().c_str() : "");
            fflush(stdout);
        }
    }
    return 0;
}
