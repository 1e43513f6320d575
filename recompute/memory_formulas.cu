// memory_formulas.cu — the paper's activation-memory formulas (see memory_formulas.h). Host code only.
#include "memory_formulas.h"

#include <cstring>

// ---- recomputation policy -------------------------------------------------------------------------------
const char* recompute_name(Recompute rc) {
    switch (rc) {
        case Recompute::None: return "none";
        case Recompute::Selective: return "selective";
        case Recompute::Full: return "full";
    }
    return "?";
}

bool parse_recompute(const char* text, Recompute* out) {
    if (!text) return false;
    const Recompute all[] = {Recompute::None, Recompute::Selective, Recompute::Full};
    for (Recompute rc : all) {
        if (strcmp(text, recompute_name(rc)) == 0) {
            *out = rc;
            return true;
        }
    }
    return false;
}

// ---- core attention --------------------------------------------------------------------------------------
const char* attention_name(Attention at) { return at == Attention::Flash ? "flash" : "unfused"; }

bool parse_attention(const char* text, Attention* out) {
    if (!text) return false;
    for (Attention at : {Attention::Unfused, Attention::Flash}) {
        if (strcmp(text, attention_name(at)) == 0) {
            *out = at;
            return true;
        }
    }
    return false;
}

// ---- one transformer layer on one rank ----------------------------------------------------------------
// docs/paper.md's per-tensor table, generalized to d bytes per element. Tensor parallelism splits everything
// between the column-parallel linears' outputs and the row-parallel linears' inputs (Q, K, V, the attention
// core, the projection input, the 4h MLP activations): /t always. The rest (the paper's "10sbh": two LN
// inputs, QKV input, fc1 input, two dropout masks) is replicated under plain TP and sharded along s under SP
// (§4.2.2: the column-parallel linear keeps only the local s/t shard of its input and re-gathers it in
// backward).
std::vector<FormulaTerm> layer_terms(const LayerFormulaInput& in) {
    const double s = in.s;  // the tokens of a sequence this rank holds, as the caller gives them
    const double sbh = s * in.b * in.h;
    const double as2b = in.a * s * s * in.b;
    const double d = in.d;
    const double t = in.t;
    const double rep = in.sp ? t : 1.0;  // divisor of the terms that only SP shards

    if (in.rc == Recompute::Full) {
        // Full recompute keeps only the layer input (the paper's 2sbh; a 1/t slice per rank under SP).
        return {{"ln1_in", d * sbh / rep}};
    }
    std::vector<FormulaTerm> terms;
    // Attention block: 11sbh + 5as²b at d = 2, plus its layer norm's input (2sbh).
    terms.push_back({"ln1_in", d * sbh / rep});
    terms.push_back({"qkv_in", d * sbh / rep});
    terms.push_back({"qkv", 3 * d * sbh / t});
    if (in.core) {
        // Another core keeps its own tensors instead of the s×s ones, under any policy that keeps Q, K and V.
        for (const FormulaTerm& term : in.core->terms(in)) terms.push_back(term);
    } else if (in.rc == Recompute::None) {
        // The attention core: what selective recompute drops (5as²b at d = 2; §5).
        terms.push_back({"probs", d * as2b / t});
        terms.push_back({"attn_mask", as2b / t});
        terms.push_back({"probs_drop", d * as2b / t});
    }
    terms.push_back({"proj_in", d * sbh / t});
    terms.push_back({"attn_drop_mask", sbh / rep});
    // MLP block: 19sbh at d = 2, plus its layer norm's input (2sbh).
    terms.push_back({"ln2_in", d * sbh / rep});
    terms.push_back({"fc1_in", d * sbh / rep});
    terms.push_back({"gelu_in", 4 * d * sbh / t});
    terms.push_back({"fc2_in", 4 * d * sbh / t});
    terms.push_back({"mlp_drop_mask", sbh / rep});
    return terms;
}

double layer_bytes(const LayerFormulaInput& in) {
    double sum = 0;
    for (const FormulaTerm& term : layer_terms(in)) sum += term.bytes;
    return sum;
}

// ---- Table 2, exactly as printed (d = 2) ---------------------------------------------------------------
const char* table2_row_name(Table2Row row) {
    switch (row) {
        case Table2Row::NoParallel: return "no parallelism";
        case Table2Row::TP: return "tensor parallel (baseline)";
        case Table2Row::TP_SP: return "tensor + sequence parallel";
        case Table2Row::TP_Selective: return "tensor parallel + selective recompute";
        case Table2Row::TP_SP_Selective: return "tensor + sequence parallel + selective recompute";
        case Table2Row::FullRecompute: return "full recompute";
    }
    return "?";
}

const char* table2_row_formula(Table2Row row) {
    switch (row) {
        case Table2Row::NoParallel: return "sbh(34 + 5as/h)";
        case Table2Row::TP: return "sbh(10 + 24/t + 5as/(ht))";
        case Table2Row::TP_SP: return "sbh(34/t + 5as/(ht))";
        case Table2Row::TP_Selective: return "sbh(10 + 24/t)";
        case Table2Row::TP_SP_Selective: return "sbh(34/t)";
        case Table2Row::FullRecompute: return "2sbh";
    }
    return "?";
}

double table2_bytes(Table2Row row, double s, double b, double h, double a, int t) {
    // sbh · 5as/h is written as 5as²b (the same number) so that integer inputs give exact doubles: the
    // per-tensor sums of layer_terms() then equal these rows bit for bit.
    const double sbh = s * b * h;
    const double core = 5 * a * s * s * b;  // the attention core, sbh · 5as/h
    switch (row) {
        case Table2Row::NoParallel: return sbh * 34 + core;
        case Table2Row::TP: return sbh * 10 + sbh * 24 / t + core / t;
        case Table2Row::TP_SP: return sbh * 34 / t + core / t;
        case Table2Row::TP_Selective: return sbh * 10 + sbh * 24 / t;
        case Table2Row::TP_SP_Selective: return sbh * 34 / t;
        case Table2Row::FullRecompute: return 2 * sbh;
    }
    return 0;
}

Table2Row table2_row(int t, bool sp, Recompute rc) {
    switch (rc) {
        case Recompute::Full: return Table2Row::FullRecompute;
        case Recompute::Selective: return sp ? Table2Row::TP_SP_Selective : Table2Row::TP_Selective;
        case Recompute::None: break;
    }
    if (sp) return Table2Row::TP_SP;
    return t == 1 ? Table2Row::NoParallel : Table2Row::TP;
}

double table2_full_sp_factor(int t, bool sp) { return sp ? 1.0 / t : 1.0; }

// ---- the whole model (§4.3) ----------------------------------------------------------------------------
ModelFormulaInput formula_input(int seq, int micro_batch, int hidden, int heads, int layers, int padded_vocab, int tp,
                                bool sp, Recompute rc, int d) {
    ModelFormulaInput in;
    in.s = seq;
    in.b = micro_batch;
    in.h = hidden;
    in.a = heads;
    in.L = layers;
    in.v = padded_vocab;
    in.t = tp;
    in.sp = sp;
    in.rc = rc;
    in.d = d;
    return in;
}

std::vector<FormulaTerm> model_extra_terms(const ModelFormulaInput& in) {
    const double s = in.s;  // the tokens of a sequence this rank holds, as the caller gives them
    const double sbh = s * in.b * in.h;
    const double rep = in.sp ? in.t : 1.0;
    std::vector<FormulaTerm> terms;
    // The embedding-output dropout mask: one per microbatch in flight on the first stage (p of them in
    // 1F1B), the paper's sbhp/t under SP.
    terms.push_back({"embed_drop_mask", sbh * in.p / rep});
    if (in.p == 1) {
        // Final LN input and LM-head input (the paper's 2sbh/t each: sharded along s under SP; replicated
        // under plain TP) and the fp32 vocab-parallel logits 4sbv/t. With p > 1 they live on the last stage.
        terms.push_back({"lnf_in", in.d * sbh / rep});
        terms.push_back({"lmhead_in", in.d * sbh / rep});
        terms.push_back({"logits", 4 * s * in.b * in.v / in.t});
    }
    return terms;
}

double model_extra_bytes(const ModelFormulaInput& in) {
    double sum = 0;
    for (const FormulaTerm& term : model_extra_terms(in)) sum += term.bytes;
    return sum;
}

double interleave_factor(int p, int m) {
    if (m <= 1 || p <= 1) return 1.0;
    return 1.0 + (double)(p - 1) / ((double)p * m);
}

double first_stage_layer_bytes(const ModelFormulaInput& in) {
    // p microbatches in flight × L/p layers per stage = L layers' worth of one microbatch (Eq. 5).
    return in.L * layer_bytes(in.layer()) * interleave_factor(in.p, in.m);
}

double first_stage_activation_bytes(const ModelFormulaInput& in) {
    return first_stage_layer_bytes(in) + model_extra_bytes(in);
}

double stage_layer_bytes_in_flight(const ModelFormulaInput& in, int in_flight_chunks) {
    // One chunk of one micro-batch holds L/(p·m) layers.
    return in_flight_chunks * (in.L / ((double)in.p * in.m)) * layer_bytes(in.layer());
}

std::vector<FormulaTerm> first_stage_extra_terms(const ModelFormulaInput& in, int in_flight_microbatches) {
    // model_extra_terms() counts the paper's p masks; put the schedule's number in their place.
    std::vector<FormulaTerm> terms = model_extra_terms(in);
    const double rep = in.sp ? in.t : 1.0;
    terms[0].bytes = in.s * in.b * in.h * in_flight_microbatches / rep;  // "embed_drop_mask"
    return terms;
}

double first_stage_extra_bytes(const ModelFormulaInput& in, int in_flight_microbatches) {
    double sum = 0;
    for (const FormulaTerm& term : first_stage_extra_terms(in, in_flight_microbatches)) sum += term.bytes;
    return sum;
}
