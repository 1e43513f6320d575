// activation_offload.cu — saved activations to host memory and back (see the header).
#include "activation_offload.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

// ---- the host pool -------------------------------------------------------------------------------------------------
static size_t round_block(size_t bytes) { return (bytes + 255) / 256 * 256; }

HostActivationPool::~HostActivationPool() {
    auto free_block = [&](void* p) {
        if (device_ == Device::CUDA) cudaFreeHost(p);
        else free(p);
    };
    for (auto& kv : free_) free_block(kv.second);
    for (auto& kv : live_blocks_) free_block(kv.first);
    rank_memory().add(MemoryKind::OffloadHost, -(int64_t)live_);  // still live: no longer
}

void* HostActivationPool::alloc(size_t bytes) {
    const size_t block = round_block(bytes == 0 ? 1 : bytes);
    void* p = nullptr;
    auto it = free_.find(block);  // a step repeats its sizes: after the first, this always hits
    if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
    } else if (device_ == Device::CUDA) {
        CUDA_CHECK(cudaMallocHost(&p, block));  // pinned: the copies run as DMA, asynchronously
    } else {
        p = aligned_alloc(256, block);
        if (!p) mm_fatal("out of host memory: offloading an activation of %zu bytes", bytes);
    }
    live_blocks_[p] = bytes;
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
    rank_memory().add(MemoryKind::OffloadHost, (int64_t)bytes);  // the rank's whole account (host memory)
    return p;
}

void HostActivationPool::release(void* p) {
    auto it = live_blocks_.find(p);
    if (it == live_blocks_.end()) mm_fatal("HostActivationPool::release of a block it does not hold");
    live_ -= it->second;
    rank_memory().add(MemoryKind::OffloadHost, -(int64_t)it->second);
    free_.emplace(round_block(it->second == 0 ? 1 : it->second), p);
    live_blocks_.erase(it);
}

// ---- the saved tensors, by field and tag ---------------------------------------------------------------------------
// Every field of SavedLayer with the tag the layer allocates it under (recompute/saved_layer.h: the names are the
// tags), so that a tensor coming back is counted where it was.
static const struct {
    Tensor SavedLayer::*field;
    const char* name;
} kSavedFields[] = {
    {&SavedLayer::ln1_in, "ln1_in"},       {&SavedLayer::ln1_mean, "ln1_mean"},   {&SavedLayer::ln1_rstd, "ln1_rstd"},
    {&SavedLayer::qkv_in, "qkv_in"},       {&SavedLayer::qkv, "qkv"},             {&SavedLayer::probs, "probs"},
    {&SavedLayer::attn_mask, "attn_mask"}, {&SavedLayer::probs_drop, "probs_drop"}, {&SavedLayer::lse, "lse"},
    {&SavedLayer::proj_in, "proj_in"},     {&SavedLayer::attn_drop_mask, "attn_drop_mask"},
    {&SavedLayer::ln2_in, "ln2_in"},       {&SavedLayer::ln2_mean, "ln2_mean"},   {&SavedLayer::ln2_rstd, "ln2_rstd"},
    {&SavedLayer::fc1_in, "fc1_in"},       {&SavedLayer::gelu_in, "gelu_in"},     {&SavedLayer::fc2_in, "fc2_in"},
    {&SavedLayer::mlp_drop_mask, "mlp_drop_mask"},
};

// ---- the mover ----------------------------------------------------------------------------------------------------
ActivationOffload::ActivationOffload(Ctx& ctx, ActivationAllocator& alloc) : ctx_(ctx), alloc_(alloc), host_(ctx.device) {
    if (ctx.device != Device::CUDA) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&freed_, cudaEventDisableTiming));
}

ActivationOffload::~ActivationOffload() {
    if (!copy_stream_) return;
    cudaStreamSynchronize(copy_stream_);
    for (auto& kv : entries_) {
        if (kv.second.stored) cudaEventDestroy(kv.second.stored);
        if (kv.second.loaded) cudaEventDestroy(kv.second.loaded);
    }
    cudaEventDestroy(produced_);
    cudaEventDestroy(freed_);
    cudaStreamDestroy(copy_stream_);
}

void ActivationOffload::offload(int j, int layer, SavedLayer& s) {
    if (entries_.count({j, layer})) mm_fatal("offload: layer %d of micro-batch %d is already on the host", layer, j);
    Entry& e = entries_[{j, layer}];
    const bool cuda = ctx_.device == Device::CUDA;
    if (cuda && !skip_produced_wait) {  // wait 1: the copy reads what the layer's forward wrote
        CUDA_CHECK(cudaEventRecord(produced_, ctx_.stream));
        CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, produced_, 0));
    }
    for (const auto& f : kSavedFields) {
        Tensor& t = s.*(f.field);
        if (t.empty()) continue;
        Piece p{f.field, f.name, t.dtype, t.n, host_.alloc(t.bytes()), t};
        if (cuda) CUDA_CHECK(cudaMemcpyAsync(p.host, t.data, t.bytes(), cudaMemcpyDeviceToHost, copy_stream_));
        else memcpy(p.host, t.data, t.bytes());
        step_out_bytes += t.bytes();
        e.pieces.push_back(p);
        t = Tensor();  // off the device as far as the layer is concerned
    }
    step_layers_out += 1;
    if (cuda) {
        CUDA_CHECK(cudaEventCreateWithFlags(&e.stored, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(e.stored, copy_stream_));
        unflushed_.push_back({j, layer});
        return;
    }
    for (Piece& p : e.pieces) alloc_.release(p.device);  // the CPU copied already: the blocks are free now
}

void ActivationOffload::flush() {
    for (const auto& key : unflushed_) {
        Entry& e = entries_.at(key);
        CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, e.stored, 0));  // wait 2: a block is reused only once copied
        for (Piece& p : e.pieces) alloc_.release(p.device);
    }
    unflushed_.clear();
}

void ActivationOffload::reload(int j, int layer, SavedLayer& s) {
    auto it = entries_.find({j, layer});
    if (it == entries_.end() || it->second.reloading) return;
    Entry& e = it->second;
    const bool cuda = ctx_.device == Device::CUDA;
    if (cuda) {
        // (A layer offloaded and wanted back before its chunk's forward ended: its blocks go back first.)
        if (std::find(unflushed_.begin(), unflushed_.end(), it->first) != unflushed_.end()) flush();
        CUDA_CHECK(cudaEventSynchronize(e.stored));  // its bytes are on the host (long since, in a schedule)
    }
    for (Piece& p : e.pieces) s.*(p.field) = alloc_.alloc(p.dtype, p.n, layer, p.name);
    if (cuda) {  // wait 3: the blocks' earlier users on the compute stream are done before the copy writes
        CUDA_CHECK(cudaEventRecord(freed_, ctx_.stream));
        CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, freed_, 0));
    }
    for (Piece& p : e.pieces) {
        Tensor& t = s.*(p.field);
        if (cuda) CUDA_CHECK(cudaMemcpyAsync(t.data, p.host, t.bytes(), cudaMemcpyHostToDevice, copy_stream_));
        else memcpy(t.data, p.host, t.bytes());
        step_in_bytes += t.bytes();
        host_.release(p.host);  // the next copy into it is on the same stream, after this one
    }
    step_layers_in += 1;
    if (cuda) {
        CUDA_CHECK(cudaEventCreateWithFlags(&e.loaded, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(e.loaded, copy_stream_));
    }
    e.reloading = true;
}

void ActivationOffload::wait(int j, int layer, SavedLayer& s) {
    auto it = entries_.find({j, layer});
    if (it == entries_.end()) return;
    reload(j, layer, s);
    Entry& e = it->second;
    if (e.loaded) CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, e.loaded, 0));  // wait 4: the backward reads the copy
    if (e.stored) CUDA_CHECK(cudaEventDestroy(e.stored));
    if (e.loaded) CUDA_CHECK(cudaEventDestroy(e.loaded));
    entries_.erase(it);
}
