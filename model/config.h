// config.h — the GPT model's hyperparameters and the llm.c parameter layout (16 tensors, in file order).
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
inline const char* param_name(int i) {
    static const char* names[NUM_PARAM_TENSORS] = {"wte",  "wpe",  "ln1w",     "ln1b",     "qkvw", "qkvb",
                                                   "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                   "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return names[i];
}

// Element counts of the 16 tensors of the *full* (unsharded) model, in llm.c order.
inline void param_sizes(const GPTConfig& c, int64_t out[NUM_PARAM_TENSORS]) {
    int64_t L = c.layers, C = c.channels;
    out[P_WTE] = (int64_t)c.padded_vocab * C;
    out[P_WPE] = (int64_t)c.max_seq * C;
    out[P_LN1W] = L * C;
    out[P_LN1B] = L * C;
    out[P_QKVW] = L * 3 * C * C;
    out[P_QKVB] = L * 3 * C;
    out[P_ATTPROJW] = L * C * C;
    out[P_ATTPROJB] = L * C;
    out[P_LN2W] = L * C;
    out[P_LN2B] = L * C;
    out[P_FCW] = L * 4 * C * C;
    out[P_FCB] = L * 4 * C;
    out[P_FCPROJW] = L * C * 4 * C;
    out[P_FCPROJB] = L * C;
    out[P_LNFW] = C;
    out[P_LNFB] = C;
}
inline int64_t param_count(const GPTConfig& c) {
    int64_t s[NUM_PARAM_TENSORS];
    param_sizes(c, s);
    int64_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += s[i];
    return n;
}
