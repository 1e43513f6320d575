// activation_allocator.h — every activation goes through here, tagged (layer, name), so that what a layer
// keeps for its backward is *measured*, not estimated (the memory report reads these tags).
//
// It is also a caching allocator: freed blocks are kept in free lists by size and reused, so after the
// first step a training step makes no cudaMalloc / malloc at all. `reserved` is what it really holds from
// the system (its high-water mark is the activations' share of the device's peak memory).
#pragma once
#include <map>
#include <string>
#include <vector>
#include "rank_memory.h"  // every alloc and release is told to the rank's whole account too
#include "runtime.h"

constexpr int kModelLevel = -1;  // tag layer for tensors outside the transformer layers

struct ActivationRecord {
    int layer;
    std::string name;
    size_t bytes;
};

class ActivationAllocator {
public:
    explicit ActivationAllocator(Device device = Device::CPU) : device_(device) {}
    ~ActivationAllocator();
    ActivationAllocator(const ActivationAllocator&) = delete;
    ActivationAllocator& operator=(const ActivationAllocator&) = delete;

    // A tensor of n elements, tagged (layer, name). Saved activations use the paper's tensor names
    // (recompute/memory_formulas.h); transient work buffers use names starting with "tmp:".
    Tensor alloc(DType dtype, int64_t n, int layer, const char* name);
    void release(Tensor& t);  // no-op on an empty tensor

    // What is live right now (in allocation order), and counters.
    std::vector<ActivationRecord> live() const;
    size_t live_bytes() const { return live_bytes_; }
    size_t peak_live_bytes() const { return peak_live_bytes_; }
    // Start a new high-water mark from what is live now (the trainer measures a training step's peak apart
    // from a validation pass's).
    void reset_peak() { peak_live_bytes_ = live_bytes_, rank_memory().reset_peak(); }
    size_t peak_reserved_bytes() const { return peak_reserved_bytes_; }

    // The live set at the moment a step's schedule reaches its peak (the most micro-batches' activations
    // held), for the memory report. The step marks that moment (mark_peak: model/train_step.cu's plain loop
    // after its first forward, the pipeline executor after the forward that brings the stage to its peak);
    // the report is built from the snapshot once the step is over, so nothing calls back up into the trainer
    // in the middle of a schedule. Off by default: mark_peak is then one test of a flag.
    void keep_peak_snapshot(bool on) {
        snapshot_on_ = on;
        snapshot_.clear();
        snapshot_taken_ = false;
        snapshot_device_used_ = -1;
    }
    void mark_peak();
    bool has_peak_snapshot() const { return snapshot_taken_; }
    const std::vector<ActivationRecord>& peak_snapshot() const { return snapshot_; }
    // On a GPU, the device memory in use at that moment (cudaMemGetInfo: every allocation of the process,
    // the model states and the communication buffers too); -1 on the CPU, or when the runtime cannot say.
    double peak_snapshot_device_used_bytes() const { return snapshot_device_used_; }

private:
    struct Live { int layer; std::string name; size_t bytes; uint64_t order; };
    Device device_;
    std::map<void*, Live> live_;
    std::multimap<size_t, void*> free_;  // cached blocks by rounded size
    size_t live_bytes_ = 0, peak_live_bytes_ = 0, reserved_bytes_ = 0, peak_reserved_bytes_ = 0;
    uint64_t next_order_ = 0;
    bool snapshot_on_ = false, snapshot_taken_ = false;
    std::vector<ActivationRecord> snapshot_;
    double snapshot_device_used_ = -1;
};
