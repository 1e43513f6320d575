// activation_offload.h — saved activations moved to host memory after a layer's forward and brought back
// before its backward: the other way to hold less on the device, which the paper names beside its own two and
// leaves out (§1); Megatron-Core's --cpu-offloading. Beyond the paper. Which layers and micro-batches move is
// the model's choice (model/offload_model.h); this file moves them and counts every byte.
//
// What moves: every tensor of a layer's SavedLayer (recompute/saved_layer.h) that the recompute policy kept,
// the layer-norm statistics included. An offloaded tensor leaves the activation allocator's live set (so the
// memory report measures the device's bytes without it) and is held in this file's host pool, measured apart.
// Coming back it is allocated again under its own tag (layer, name): the backward sees the same bytes, so
// offloading changes no bit of any result.
//
// On CUDA (pinned host buffers; the copies on a stream of their own, events ordering them against the compute
// stream, ctx.stream):
//   out   the copy stream waits for the layer's forward (event `produced`), copies device -> host, records
//         `stored`; the device blocks go back to the allocator only once ctx.stream has waited for `stored`,
//         which is put off by one layer (flush), so the next layer's forward overlaps the copy;
//   in    issued while the next-later layer's backward runs (the reload of layer i−1 with layer i's backward):
//         the host waits for `stored` (its bytes are then on the host), the tensors are allocated again, the
//         copy stream waits for ctx.stream up to there (`freed`: the blocks' previous users are done), copies
//         host -> device, records `loaded`; ctx.stream waits for `loaded` before the layer's backward.
// Each of the four waits is needed; the emulated device (test/emulator) checks that the run is bitwise the
// run without offloading, and that without the first (a test switch) it is not.
// On the CPU device the copies are memcpy's between the allocator's blocks and the host pool: the same
// bookkeeping, measured the same way.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>
#include "saved_layer.h"
#include "../layers/activation_allocator.h"

// Which saved activations move (the model's flags: --offload-activations, --cpu-offloading-num-layers N,
// --offload-beyond-in-flight K|last-stage).
struct OffloadPolicy {
    enum Kind { Off, Layers, InFlight } kind = Off;
    int layers = -1;  // Layers: each model chunk's first `layers` layers, every micro-batch (-1: all but its last)
    int beyond = -1;  // InFlight: every layer of the micro-batches a stage holds beyond `beyond` in flight
                      // (-1: beyond the last pipeline stage's count, model/offload_model.h)
};

// Host memory for offloaded tensors: blocks kept for reuse by size (a step after the first allocates
// nothing), pinned on CUDA. Counted: live bytes and their high-water mark.
class HostActivationPool {
public:
    explicit HostActivationPool(Device device) : device_(device) {}
    ~HostActivationPool();
    HostActivationPool(const HostActivationPool&) = delete;
    HostActivationPool& operator=(const HostActivationPool&) = delete;
    void* alloc(size_t bytes);
    void release(void* p);
    size_t live_bytes() const { return live_; }
    size_t peak_bytes() const { return peak_; }

private:
    Device device_;
    std::map<void*, size_t> live_blocks_;      // pointer -> its bytes
    std::multimap<size_t, void*> free_;        // cached blocks by rounded size
    size_t live_ = 0, peak_ = 0;
};

class ActivationOffload {
public:
    ActivationOffload(Ctx& ctx, ActivationAllocator& alloc);
    ~ActivationOffload();
    ActivationOffload(const ActivationOffload&) = delete;
    ActivationOffload& operator=(const ActivationOffload&) = delete;

    // After layer `layer`'s forward of micro-batch j: its saved tensors to the host pool; s's fields are
    // emptied (they are no longer on the device).
    void offload(int j, int layer, SavedLayer& s);
    // The copies of the layers offloaded so far are complete (ctx.stream waits for them) and their device
    // blocks go back to the allocator. The model calls it after each layer's forward, before that layer's own
    // offload (so a layer's blocks are released one layer later), and at a chunk's last layer, so that a
    // micro-batch's forward ends with its offloaded layers off the device (model/offload_layers.h).
    void flush();
    // Bring (j, layer) back into s: issue (idempotent), then wait (ctx.stream ordered after the copy; s's
    // fields usable by the backward). Both no-ops for a pair that was not offloaded.
    void reload(int j, int layer, SavedLayer& s);
    void wait(int j, int layer, SavedLayer& s);
    bool is_offloaded(int j, int layer) const { return entries_.count({j, layer}) > 0; }

    // Measured: the host pool, and this step's copies (begin_step resets them).
    const HostActivationPool& host() const { return host_; }
    void begin_step() { step_out_bytes = step_in_bytes = 0, step_layers_out = step_layers_in = 0; }
    uint64_t step_out_bytes = 0, step_in_bytes = 0;
    int step_layers_out = 0, step_layers_in = 0;
    // A test's negative control: the copy stream does not wait for the layer's forward before copying it out.
    bool skip_produced_wait = false;

private:
    struct Piece {
        Tensor SavedLayer::*field;
        const char* name;
        DType dtype;
        int64_t n;
        void* host;
        Tensor device;  // while copying out: the block, released at the flush
    };
    struct Entry {
        std::vector<Piece> pieces;
        cudaEvent_t stored = nullptr, loaded = nullptr;
        bool reloading = false;
    };
    Ctx& ctx_;
    ActivationAllocator& alloc_;
    HostActivationPool host_;
    cudaStream_t copy_stream_ = nullptr;
    cudaEvent_t produced_ = nullptr, freed_ = nullptr;
    std::map<std::pair<int, int>, Entry> entries_;
    std::vector<std::pair<int, int>> unflushed_;  // offloaded entries whose device blocks are not released yet
};

// What the model keeps for offloading (model/offload_model.h decides with it; the mover above moves).
struct OffloadState {
    OffloadPolicy policy;
    std::unique_ptr<ActivationOffload> mover;  // made with the policy (the model's context and allocator)
    std::vector<std::vector<bool>> plan;       // InFlight: [micro-batch][chunk] moved, for the step in flight
    bool in_step = false;                      // only a training step's forwards move anything
};
