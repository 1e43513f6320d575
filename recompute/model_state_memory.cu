// model_state_memory.cu — the model states' tagged account and their formula (see the header).
#include "model_state_memory.h"
#include "formulas.h"

const char* model_state_name(int kind) {
    switch (kind) {
        case kStateWeights: return "weights";
        case kStateGrads: return "gradients";
        case kStateMaster: return "master";
        case kStateMomentM: return "adam_m";
        case kStateMomentV: return "adam_v";
    }
    return "?";
}

Tensor ModelStateMemory::alloc(Device device, DType dtype, int64_t n, int kind) {
    const std::string what = std::string("the model state '") + model_state_name(kind) + "'";
    Tensor t = counted_alloc(device, dtype, n, MemoryKind::ModelStates, what.c_str());
    bytes[kind] += (int64_t)t.bytes();
    elements[kind] += n;
    this->device = device;
    return t;
}

void ModelStateMemory::release(Tensor& t, int kind) {
    if (!t.data) return;
    bytes[kind] -= (int64_t)t.bytes();
    elements[kind] -= t.n;
    counted_free(t, MemoryKind::ModelStates);
}

Tensor counted_alloc(Device device, DType dtype, int64_t n, MemoryKind kind, const char* what) {
    Tensor t = tensor_zeros(device, dtype, n, what);
    rank_memory().add(kind, (int64_t)t.bytes());
    return t;
}

void counted_free(Tensor& t, MemoryKind kind) {
    if (!t.data) return;
    rank_memory().add(kind, -(int64_t)t.bytes());
    tensor_free(t);
}

int64_t ModelStateMemory::total() const {
    int64_t s = 0;
    for (int k = 0; k < kNumStateKinds; k++) s += bytes[k];
    return s;
}

int64_t ModelStateMemory::optimizer(bool bf16) const {
    return bytes[kStateMomentM] + bytes[kStateMomentV] + (bf16 ? bytes[kStateMaster] : 0);
}

ModelStateFormula model_state_formula(int64_t n, int d, bool distributed, bool bf16) {
    const int dd = d < 1 ? 1 : d;
    return model_state_formula_zero(distributed ? 1 : 0, n, (n + dd - 1) / dd * dd, dd, bf16);
}

ModelStateFormula model_state_formula_zero(int stage, int64_t n, int64_t padded, int d, bool bf16) {
    ModelStateFormula f;
    f.n = n;
    f.d = d < 1 ? 1 : d;
    f.stage = f.d > 1 ? stage : 0;
    f.distributed = f.stage > 0;
    f.bf16 = bf16;
    f.padded = f.distributed ? padded : n;
    const int64_t P = f.padded, shard = f.distributed ? P / f.d : n;
    // Which kinds are this rank's shard, and each kind's bytes per parameter (formulas.h, the tables in the
    // header). Whole buffers: ZeRO-1 pads every flat buffer to P (the collectives see d equal blocks in place);
    // ZeRO-2's whole weights are the llm.c-layout buffer of n elements.
    const ZeroStateKinds kinds = zero_state_kinds(f.stage, bf16);
    const int64_t whole = f.stage == 1 ? P : n;
    for (int k = 0; k < kNumStateKinds; k++) {
        f.sharded[k] = kinds.sharded[k];
        f.bytes[k] = (int64_t)kinds.bytes[k] * (f.sharded[k] ? shard : whole);
    }
    for (int k = 0; k < kNumStateKinds; k++) f.total += f.bytes[k];
    f.optimizer = f.bytes[kStateMomentM] + f.bytes[kStateMomentV] + (bf16 ? f.bytes[kStateMaster] : 0);
    f.per_param = zero_bytes_per_param(f.stage, bf16, f.d);  // 18 / 16, 6 + 12/d / 8 + 8/d, ... (formulas.h)
    f.per_param_text = zero_bytes_per_param_text(f.stage, bf16);
    return f;
}
