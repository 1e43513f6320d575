// positions.h — which global positions of the sequence a rank's rows hold, as runs of consecutive positions.
//
// A token-local op whose mask or value depends on the GLOBAL position (hidden and embedding dropout, the
// position embedding) runs once per run, on that run's rows, with the run's first position as its offset: so
// every rank draws the single-rank run's masks whatever positions it holds. The whole sequence is one run;
// a sequence-parallel shard (parallel/sequence_parallel.h) is one run; a context-parallel rank's two zigzag
// chunks (cp_runs, parallel/context_parallel.h) are two, and an SP shard of them one or two (runs_slice).
#pragma once
#include <algorithm>
#include <cstdint>
#include "runtime.h"

// A rank's positions of one sequence, in the order it stores them: at most two runs of consecutive global
// positions.
struct SeqRuns {
    int n = 0;                     // runs
    int64_t first[2] = {0, 0};     // global position of each run's first
    int len[2] = {0, 0};           // positions in each run
    int total() const { return len[0] + (n > 1 ? len[1] : 0); }
};

// `len` positions from `first`: one run (the whole sequence of S: one_run(0, S)).
inline SeqRuns one_run(int64_t first, int len) {
    SeqRuns r;
    r.n = 1;
    r.first[0] = first;
    r.len[0] = len;
    return r;
}

// f(local first, global first, length) for each run, in order.
template <class F>
void for_each_run(const SeqRuns& r, F&& f) {
    int local = 0;
    for (int k = 0; k < r.n; k++) {
        f(local, r.first[k], r.len[k]);
        local += r.len[k];
    }
}

// Local positions begin .. begin + count − 1 of `r` (an SP shard of a rank's positions), as runs.
inline SeqRuns runs_slice(const SeqRuns& r, int begin, int count) {
    SeqRuns out;
    const int end = begin + count;
    for_each_run(r, [&](int local, int64_t global, int len) {
        const int lo = std::max(begin, local), hi = std::min(end, local + len);
        if (lo >= hi) return;
        out.first[out.n] = global + (lo - local);
        out.len[out.n] = hi - lo;
        out.n++;
    });
    return out;
}

// The global position of local position i of `r`.
inline int64_t runs_position(const SeqRuns& r, int i) {
    for (int k = 0; k < r.n; k++) {
        if (i < r.len[k]) return r.first[k] + i;
        i -= r.len[k];
    }
    mm_fatal("runs_position: position %d past the %d held", i, r.total());
}
