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
    Tensor t = tensor_zeros(device, dtype, n, what.c_str());
    bytes[kind] += (int64_t)t.bytes();
    elements[kind] += n;
    return t;
}

void ModelStateMemory::release(Tensor& t, int kind) {
    if (!t.data) return;
    bytes[kind] -= (int64_t)t.bytes();
    elements[kind] -= t.n;
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
    ModelStateFormula f;
    f.n = n;
    f.d = d < 1 ? 1 : d;
    f.distributed = distributed && f.d > 1;
    f.bf16 = bf16;
    f.padded = f.distributed ? (n + f.d - 1) / f.d * f.d : n;
    const int64_t P = f.padded, shard = f.distributed ? P / f.d : n;
    f.bytes[kStateWeights] = bf16 ? 2 * P : 0;    // fp32: the master weights are the compute weights
    f.bytes[kStateGrads] = 4 * P;
    f.bytes[kStateMaster] = 4 * (bf16 ? shard : P);  // fp32: whole (it is the model); bf16: this rank's shard
    f.bytes[kStateMomentM] = 4 * shard;
    f.bytes[kStateMomentV] = 4 * shard;
    for (int k = 0; k < kNumStateKinds; k++) f.total += f.bytes[k];
    f.optimizer = f.bytes[kStateMomentM] + f.bytes[kStateMomentV] + (bf16 ? f.bytes[kStateMaster] : 0);
    f.per_param = model_state_bytes_per_param(bf16, f.d, f.distributed);  // 18 / 16, or 6 + 12/d / 8 + 8/d
    return f;
}
