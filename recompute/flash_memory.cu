// flash_memory.cu — flash attention's activation memory and the sequence split across ranks (see the header).
#include "flash_memory.h"

std::vector<FormulaTerm> flash_core_terms(const LayerFormulaInput& in) {
    // One fp32 log-sum-exp per (query, local head): the backward pass rebuilds the probabilities from it.
    return {{"lse", 4 * in.a * in.s * in.b / in.t}};
}

const char* table2_flash_formula(Table2Row row) {
    switch (row) {
        case Table2Row::NoParallel: return "sbh(34 + 4a/h)";
        case Table2Row::TP: return "sbh(10 + 24/t + 4a/(ht))";
        case Table2Row::TP_SP: return "sbh(34/t + 4a/(ht))";
        case Table2Row::TP_Selective: return "sbh(10 + 24/t + 4a/(ht))";
        case Table2Row::TP_SP_Selective: return "sbh(34/t + 4a/(ht))";
        case Table2Row::FullRecompute: return "2sbh";
    }
    return "?";
}

double table2_flash_bytes(Table2Row row, double s, double b, double h, double a, int t) {
    // sbh · 4a/h written as 4asb, as table2_bytes writes 5as/h as 5as²b: exact doubles for integer inputs.
    const double sbh = s * b * h;
    const double lse = 4 * a * s * b;  // fp32 log-sum-exp per query per head, sbh · 4a/h
    switch (row) {
        case Table2Row::NoParallel: return sbh * 34 + lse;
        case Table2Row::TP:
        case Table2Row::TP_Selective: return sbh * 10 + sbh * 24 / t + lse / t;
        case Table2Row::TP_SP:
        case Table2Row::TP_SP_Selective: return sbh * 34 / t + lse / t;
        case Table2Row::FullRecompute: return 2 * sbh;
    }
    return 0;
}

static const AttentionCoreMemory kFlashCoreMemory = {Attention::Flash, flash_core_terms, table2_flash_formula,
                                                     table2_flash_bytes};

const AttentionCoreMemory* attention_core_memory(Attention at) {
    return at == Attention::Flash ? &kFlashCoreMemory : nullptr;
}

Attention formula_attention(const ModelFormulaInput& in) { return in.core ? in.core->attention : Attention::Unfused; }

ModelFormulaInput formula_input(int seq, int micro_batch, int hidden, int heads, int layers, int padded_vocab, int tp,
                                bool sp, Recompute rc, int d, Attention attention, int cp) {
    ModelFormulaInput in = formula_input(seq, micro_batch, hidden, heads, layers, padded_vocab, tp, sp, rc, d);
    in.s = (double)seq / cp;  // this rank's tokens
    in.core = attention_core_memory(attention);
    return in;
}
