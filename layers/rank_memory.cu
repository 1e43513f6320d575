// rank_memory.cu — the rank's whole account (see the header).
#include "rank_memory.h"

#include <cstring>

const char* memory_kind_name(MemoryKind k) {
    switch (k) {
        case MemoryKind::Activations: return "activations";
        case MemoryKind::Workspace: return "workspace";
        case MemoryKind::ModelStates: return "model states";
        case MemoryKind::ZeroGathered: return "ZeRO gathered";
        case MemoryKind::ZeroBuckets: return "ZeRO buckets";
        case MemoryKind::Snapshot: return "snapshot";
        case MemoryKind::OffloadHost: return "offload host";
        case MemoryKind::Count: break;
    }
    return "?";
}

MemoryKind memory_kind_of_tag(const char* name) {
    if (!strncmp(name, "tmp:", 4)) return MemoryKind::Workspace;
    if (!strcmp(name, "gathered")) return MemoryKind::ZeroGathered;
    if (!strcmp(name, "grad_bucket")) return MemoryKind::ZeroBuckets;
    return MemoryKind::Activations;
}

void RankMemory::add(MemoryKind k, int64_t delta) {
    const int i = (int)k;
    live[i] += delta;
    live_total += delta;
    if (live[i] > kind_peak[i]) kind_peak[i] = live[i];
    const int64_t without_host = live_total - live[(int)MemoryKind::OffloadHost];
    if (without_host > peak_without_host) peak_without_host = without_host;
    if (live_total > peak_total) {  // a new high-water mark: what each kind holds at it
        peak_total = live_total;
        for (int j = 0; j < kNumMemoryKinds; j++) at_peak[j] = live[j];
    }
}

void RankMemory::reset_peak() {
    peak_total = live_total;
    peak_without_host = live_total - live[(int)MemoryKind::OffloadHost];
    for (int j = 0; j < kNumMemoryKinds; j++) at_peak[j] = kind_peak[j] = live[j];
}

int64_t RankMemory::total_at_peak() const {
    int64_t s = 0;
    for (int j = 0; j < kNumMemoryKinds; j++) s += at_peak[j];
    return s;
}

RankMemory& rank_memory() {
    static RankMemory account;
    return account;
}
