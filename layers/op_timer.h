// op_timer.h — an off-by-default timer of the public ops, for benchmarks that want to know where the time of
// the real model code goes (bench/layer_bench.cu) without a second copy of that code.
//
// Every public op in layers/ opens one scope on its first line, as llm.c names its kernels for the profiler:
//
//     OpScope scope(ctx, "layernorm_forward");              // optional third argument: the op's matmul FLOPs
//
// While the timer is off (always, unless a benchmark calls op_timer_start) a scope costs one branch. While it
// is on, a scope records a CUDA event pair on ctx's stream (GPU time of exactly the work the op queued, as
// bench/bench_common.h's BenchTimer does) or reads a steady clock around the op on the CPU, where every op
// is synchronous. Times are summed by name. A scope opened inside another scope is named "outer/inner", so a
// caller can bracket a whole pass ("forward/layernorm_forward") and an op can split itself into parts
// ("attention_probs_forward/qk_gemm"); only scopes one level below their parent add up to the parent.
// Started with split_calls, the timer keeps the calls of one name inside an outer scope apart instead:
// "forward/linear_forward#1", "forward/linear_forward#2", ... in call order since the last collect (the
// layer's QKV linear, then the projection).
// gemm (matmul.h) has no scope: it is the primitive inside linear and attention, which carry the FLOPs.
//
// Header-only, with its state in one C++17 inline variable: every program that links an op gets the timer
// without linking one more module.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>
#include "runtime.h"

// One name's totals since the last op_timer_start / op_timer_collect.
struct OpTime {
    std::string name;   // "outer/inner" for a scope opened inside another
    int depth = 0;      // 0 for an outermost scope
    int calls = 0;
    double ms = 0.0;
    double flops = 0.0;  // sum of what the scopes declared (0: element-wise)
};

namespace op_timer_detail {
struct Pending {  // a GPU scope whose events are read at collect time
    int entry;
    cudaEvent_t start, stop;
};
struct State {
    bool on = false;
    bool split_calls = false;       // "name#k" for the k-th call of a name since the last collect
    std::map<std::string, int> calls_of;  // with split_calls: calls of each path so far
    std::vector<OpTime> entries;    // in order of first call
    std::vector<int> open;          // entries of the scopes now open, innermost last
    std::vector<Pending> pending;
    std::vector<cudaEvent_t> pool;  // created once, reused after every collect
    size_t pool_used = 0;
};
inline State state;

inline int entry_for(const char* name) {
    State& s = state;
    std::string path = s.open.empty() ? std::string(name) : s.entries[s.open.back()].name + "/" + name;
    if (s.split_calls && !s.open.empty()) path += "#" + std::to_string(++s.calls_of[path]);  // not the outermost
    for (size_t i = 0; i < s.entries.size(); i++)
        if (s.entries[i].name == path) return (int)i;
    OpTime t;
    t.name = path;
    t.depth = (int)s.open.size();
    s.entries.push_back(t);
    return (int)s.entries.size() - 1;
}
inline cudaEvent_t next_event() {
    State& s = state;
    if (s.pool_used == s.pool.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        s.pool.push_back(e);
    }
    return s.pool[s.pool_used++];
}
}  // namespace op_timer_detail

class OpScope {
public:
    OpScope(const Ctx& ctx, const char* name, double flops = 0.0) {
        if (!op_timer_detail::state.on) return;  // the timer is off: nothing else happens
        begin(ctx, name, flops);
    }
    ~OpScope() {
        if (entry_ >= 0) end();
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

private:
    void begin(const Ctx& ctx, const char* name, double flops) {
        op_timer_detail::State& s = op_timer_detail::state;
        ctx_ = &ctx;
        entry_ = op_timer_detail::entry_for(name);
        s.entries[entry_].calls++;
        s.entries[entry_].flops += flops;
        s.open.push_back(entry_);
        if (ctx.device == Device::CUDA) {
            start_ = op_timer_detail::next_event();
            CUDA_CHECK(cudaEventRecord(start_, ctx.stream));
        } else {
            t0_ = std::chrono::steady_clock::now();
        }
    }
    void end() {
        op_timer_detail::State& s = op_timer_detail::state;
        if (ctx_->device == Device::CUDA) {
            cudaEvent_t stop = op_timer_detail::next_event();
            CUDA_CHECK(cudaEventRecord(stop, ctx_->stream));
            s.pending.push_back({entry_, start_, stop});
        } else {
            s.entries[entry_].ms +=
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
        }
        s.open.pop_back();
    }
    const Ctx* ctx_ = nullptr;
    int entry_ = -1;
    cudaEvent_t start_ = nullptr;
    std::chrono::steady_clock::time_point t0_;
};

// Turn the timer on with empty totals (split_calls: see the top of this file).
inline void op_timer_start(bool split_calls = false) {
    op_timer_detail::State& s = op_timer_detail::state;
    s.on = true;
    s.split_calls = split_calls;
    s.calls_of.clear();
    s.entries.clear();
    s.pending.clear();
    s.pool_used = 0;
}

// The totals since op_timer_start or the last collect, then empty totals (the timer stays on). Waits for the
// GPU work that the open-and-closed scopes recorded. Call it with no scope open.
inline std::vector<OpTime> op_timer_collect() {
    op_timer_detail::State& s = op_timer_detail::state;
    if (!s.open.empty()) mm_fatal("op_timer_collect: %zu scope(s) still open", s.open.size());
    for (const op_timer_detail::Pending& p : s.pending) {
        CUDA_CHECK(cudaEventSynchronize(p.stop));
        float ms = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
        s.entries[p.entry].ms += ms;
    }
    std::vector<OpTime> out;
    out.swap(s.entries);
    s.calls_of.clear();
    s.pending.clear();
    s.pool_used = 0;
    return out;
}

// Turn the timer off and free its CUDA events.
inline void op_timer_stop() {
    op_timer_detail::State& s = op_timer_detail::state;
    if (!s.open.empty()) mm_fatal("op_timer_stop: %zu scope(s) still open", s.open.size());
    for (cudaEvent_t e : s.pool) CUDA_CHECK(cudaEventDestroy(e));
    s.pool.clear();
    s.on = false;
    s.entries.clear();
    s.pending.clear();
    s.pool_used = 0;
}
