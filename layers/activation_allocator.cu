// activation_allocator.cu — tagged, counted, caching allocation of activations (see the header).
#include "activation_allocator.h"

#include <algorithm>
#include <cstdlib>

static size_t round_block(size_t bytes) { return (bytes + 255) / 256 * 256; }

ActivationAllocator::~ActivationAllocator() {
    for (auto& kv : free_) {
        if (device_ == Device::CUDA) cudaFree(kv.second);
        else free(kv.second);
    }
    for (auto& kv : live_) {
        rank_memory().add(memory_kind_of_tag(kv.second.name.c_str()), -(int64_t)kv.second.bytes);
        if (device_ == Device::CUDA) cudaFree(kv.first);
        else free(kv.first);
    }
}

Tensor ActivationAllocator::alloc(DType dtype, int64_t n, int layer, const char* name) {
    Tensor t = tensor_header(device_, dtype, n);
    size_t bytes = t.bytes();
    size_t block = round_block(bytes == 0 ? 1 : bytes);
    void* p = nullptr;
    auto it = free_.find(block);  // exact size match: steps repeat the same sizes, so this always hits
    if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
    } else {
        const std::string where = layer == kModelLevel ? "outside the layers" : "of layer " + std::to_string(layer);
        p = mm_malloc(device_, block, 256, std::string("activation '") + name + "' " + where);  // a named OOM message
        reserved_bytes_ += block;
        peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes_);
    }
    t.data = p;
    live_[p] = Live{layer, name, bytes, next_order_++};
    live_bytes_ += bytes;
    peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
    rank_memory().add(memory_kind_of_tag(name), (int64_t)bytes);
    return t;
}

void ActivationAllocator::release(Tensor& t) {
    if (!t.data) return;
    auto it = live_.find(t.data);
    if (it == live_.end()) mm_fatal("ActivationAllocator::release of a pointer it does not own");
    live_bytes_ -= it->second.bytes;
    rank_memory().add(memory_kind_of_tag(it->second.name.c_str()), -(int64_t)it->second.bytes);
    free_.emplace(round_block(it->second.bytes == 0 ? 1 : it->second.bytes), t.data);
    live_.erase(it);
    t.data = nullptr;
    t.n = 0;
}

std::vector<ActivationRecord> ActivationAllocator::live() const {
    std::vector<std::pair<uint64_t, ActivationRecord>> v;
    for (auto& kv : live_)
        v.push_back({kv.second.order, ActivationRecord{kv.second.layer, kv.second.name, kv.second.bytes}});
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<ActivationRecord> out;
    for (auto& p : v) out.push_back(p.second);
    return out;
}

void ActivationAllocator::mark_peak() {
    if (!snapshot_on_) return;
    snapshot_ = live();
    snapshot_taken_ = true;
    if (device_ == Device::CUDA) {
        size_t free_bytes = 0, total = 0;
        if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) snapshot_device_used_ = (double)(total - free_bytes);
    }
}
