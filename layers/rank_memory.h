// rank_memory.h — everything this rank's tagged accounts hold, by kind, counted as each buffer is allocated and
// freed; the high-water mark of their sum, with each kind's bytes at that moment, is --memory-report's total
// "on this rank" (recompute/other_reports.cu): measured by the allocators, never a formula.
//
// Who tells it: the activation allocator (layers/activation_allocator.h) for its saved activations, its "tmp:"
// work buffers (workspace), and, in ZeRO-2/3's own pool, the "gathered" units and "grad_bucket"s; the model states'
// account (recompute/model_state_memory.h); post-validation's snapshot (counted_alloc there); the offload host
// pool (recompute/activation_offload.h). Outside it: the CUDA context, cuBLAS's and ctx_scratch's workspaces, the
// communication buffers, the token ids and the allocators' cached free blocks (their `reserved`).
#pragma once
#include <cstdint>

enum class MemoryKind : int { Activations, Workspace, ModelStates, ZeroGathered, ZeroBuckets, Snapshot, OffloadHost, Count };
constexpr int kNumMemoryKinds = (int)MemoryKind::Count;
const char* memory_kind_name(MemoryKind k);  // "activations", "workspace", "model states", ...
// An activation allocator's tag -> its kind: "tmp:*" workspace, "gathered" and "grad_bucket" ZeRO's (the tags of
// parallel/zero_sharding.cu's pool), the rest activations (the saved tensors, the W inputs, the step's outputs).
MemoryKind memory_kind_of_tag(const char* name);

struct RankMemory {
    int64_t live[kNumMemoryKinds] = {};
    int64_t live_total = 0;
    int64_t peak_total = 0;                   // the high-water mark of live_total since reset_peak
    int64_t at_peak[kNumMemoryKinds] = {};    // each kind's bytes at that moment
    int64_t kind_peak[kNumMemoryKinds] = {};  // each kind's own high-water mark since reset_peak
    int64_t peak_without_host = 0;            // the high-water mark of every kind but the offload host pool (on
                                              // CUDA, the GPU's share: the pool is pinned host memory)
    void add(MemoryKind k, int64_t delta);
    void reset_peak();  // a new high-water mark from what is live now (ActivationAllocator::reset_peak calls it)
    // The report's total: the kinds at the peak, added up as it prints them (equals peak_total).
    int64_t total_at_peak() const;
};
RankMemory& rank_memory();  // this process's: one rank
