// model_shape.h — the GPT model's hyperparameters and the llm.c parameter layout (16 tensors, in file order).
#pragma once
#include <cstdint>

struct GPTConfig {
    int max_seq = 0;       // maxT: number of learned positions
    int vocab = 0;         // V: real vocabulary size
    int padded_vocab = 0;  // Vp: stored rows of the token table (V rounded up); logits >= V are ignored
    int layers = 0;        // L
    int heads = 0;         // NH
    int channels = 0;      // C (hidden size h)
};

// Stored rows of the token table for a vocabulary of V: V rounded up to a multiple of 128 (llm.c's Vp), so
// that the vocabulary-parallel slices and the LM-head GEMM get even, aligned shapes.
inline int padded_vocab_for(int V) { return (V + 127) / 128 * 128; }

// The llm.c order of parameter tensors (checkpoint layout; also the order of our flat parameter buffer).
enum ParamId {
    P_WTE = 0, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
    P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS
};

// Which slice of a parameter tensor a tensor-parallel rank holds (parallel/tensor_parallel.cu cuts them):
//   Replicated  every rank holds it all (layer norms, row-parallel biases, position embeddings);
//   Rows        a contiguous block of output rows (fc1 weight and bias; the vocabulary rows of the token table);
//   QKVRows     llm.c's qkv weight is (3C, C) = [Q; K; V]; a rank holds its heads' rows of each of Q, K and V
//               (three strided row ranges), stored as [Q_local; K_local; V_local];
//   Cols        a contiguous block of input columns (attention projection and fc2 weights).
enum class ShardKind { Replicated, Rows, QKVRows, Cols };

// One row per parameter tensor: the only place these facts are written. Everything that asks "is it per
// layer?", "does it decay?", "how is it split?" or "is it summed over TP under SP?" reads this table
// (param_name, is_layer_param, param_decays, param_shard_kind, and is_sequence_parallel_param in
// parallel/sequence_parallel.h, which is `shard == Replicated`).
struct ParamInfo {
    const char* name;  // llm.c's name
    bool per_layer;    // L stacked copies, one per transformer layer
    bool decays;       // AdamW weight decay and a random normal init: matrices and embeddings (not biases, LN gains)
    ShardKind shard;   // the slice a TP rank holds
};
inline constexpr ParamInfo kParamTable[NUM_PARAM_TENSORS] = {
    //  name       per_layer decays  shard
    {"wte",        false,    true,   ShardKind::Rows},        // token embedding = tied LM head (vocab-parallel)
    {"wpe",        false,    true,   ShardKind::Replicated},  // learned positions
    {"ln1w",       true,     false,  ShardKind::Replicated},
    {"ln1b",       true,     false,  ShardKind::Replicated},
    {"qkvw",       true,     true,   ShardKind::QKVRows},     // column-parallel
    {"qkvb",       true,     false,  ShardKind::QKVRows},
    {"attprojw",   true,     true,   ShardKind::Cols},        // row-parallel
    {"attprojb",   true,     false,  ShardKind::Replicated},  // added once, after the reduction
    {"ln2w",       true,     false,  ShardKind::Replicated},
    {"ln2b",       true,     false,  ShardKind::Replicated},
    {"fcw",        true,     true,   ShardKind::Rows},        // column-parallel
    {"fcb",        true,     false,  ShardKind::Rows},
    {"fcprojw",    true,     true,   ShardKind::Cols},        // row-parallel
    {"fcprojb",    true,     false,  ShardKind::Replicated},  // added once, after the reduction
    {"lnfw",       false,    false,  ShardKind::Replicated},
    {"lnfb",       false,    false,  ShardKind::Replicated},
};
inline const char* param_name(int id) { return kParamTable[id].name; }
inline bool is_layer_param(int id) { return kParamTable[id].per_layer; }
inline bool param_decays(int id) { return kParamTable[id].decays; }
inline ShardKind param_shard_kind(int id) { return kParamTable[id].shard; }

// The shape of a parameter tensor of the full (unsharded) model: `layers` stacked matrices of rows × cols
// (vectors: rows = 1 for the C-wide ones, cols = 1 for the fc1 / qkv biases, whose rows are split like their
// weights'). The weight slices (parallel/tensor_parallel.cu) cut these rows and columns.
struct ParamShape { int64_t layers, rows, cols; };
inline ParamShape param_shape(const GPTConfig& c, int id) {
    const int64_t L = kParamTable[id].per_layer ? c.layers : 1, C = c.channels;
    switch (id) {
        case P_WTE: return {L, c.padded_vocab, C};
        case P_WPE: return {L, c.max_seq, C};
        case P_QKVW: return {L, 3 * C, C};
        case P_QKVB: return {L, 3 * C, 1};
        case P_ATTPROJW: return {L, C, C};
        case P_FCW: return {L, 4 * C, C};
        case P_FCB: return {L, 4 * C, 1};
        case P_FCPROJW: return {L, C, 4 * C};
        default: return {L, 1, C};  // vectors of C: layer norms, row-parallel biases
    }
}

// Element counts of the 16 tensors of the *full* (unsharded) model, in llm.c order.
inline void param_sizes(const GPTConfig& c, int64_t out[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamShape p = param_shape(c, id);
        out[id] = p.layers * p.rows * p.cols;
    }
}
inline int64_t param_count_of(const int64_t sizes[NUM_PARAM_TENSORS]) {
    int64_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += sizes[i];
    return n;
}
inline int64_t param_count(const GPTConfig& c) {
    int64_t s[NUM_PARAM_TENSORS];
    param_sizes(c, s);
    return param_count_of(s);
}
