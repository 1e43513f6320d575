// formulas.cu — the paper's memory and FLOPs formulas (see formulas.h). Host code only.
#include "formulas.h"

#include "../layers/model_shape.h"  // padded_vocab_for: the trainer's vocabulary padding

#include <cctype>
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
// Under context parallelism the rank holds s/c tokens through the whole layer (ring attention included), so
// each term is the same expression at s/c: the lse and the s×s terms (unfused, which CP does not run) too.
std::vector<FormulaTerm> layer_terms(const LayerFormulaInput& in) {
    const double s = in.s / in.c;  // this rank's tokens
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
    if (in.attention == Attention::Flash) {
        // Flash attention keeps one fp32 log-sum-exp per (query, head) instead of the s×s tensors, under
        // any policy that keeps Q, K and V: the backward pass rebuilds the probabilities from them.
        terms.push_back({"lse", 4 * in.a * s * in.b / t});
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

// ---- context parallelism: ring attention's K/V traffic ------------------------------------------------
double cp_kv_forward_bytes(const LayerFormulaInput& in) {
    if (in.c <= 1) return 0;
    const double kv = in.s / in.c * in.b * in.h / in.t;  // elements of the rank's K (and of its V)
    return 2 * (in.c - 1) * kv * in.d;                   // K and V, c − 1 ring steps, d bytes each
}

double cp_kv_backward_bytes(const LayerFormulaInput& in) {
    if (in.c <= 1) return 0;
    const double kv = in.s / in.c * in.b * in.h / in.t;
    // K and V go round again (c − 1 hops); dK and dV, fp32 accumulators, ride with them and then take one
    // more hop back to the rank that owns K and V: c hops.
    return 2 * (in.c - 1) * kv * in.d + 2 * in.c * kv * 4;
}

double tp_forward_bytes(const LayerFormulaInput& in) {
    // Two collectives per block (attention, MLP) in the forward pass: f̄ twice under plain TP (an all-reduce
    // sends 2(t−1)/t·n), g and ḡ twice under SP (all-gather + reduce-scatter, (t−1)/t·n each): the same bytes.
    const double n = in.s / in.c * in.b * in.h;
    return 4.0 * (in.t - 1) / in.t * n * in.d;
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

// ---- Table 2 under flash attention -----------------------------------------------------------------------
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

// ---- Figure 7 ------------------------------------------------------------------------------------------
double figure7_percent(Table2Row row, double s, double h, double a, int t) {
    // b cancels; use b = 1.
    return 100.0 * table2_bytes(row, s, 1, h, a, t) / table2_bytes(Table2Row::TP, s, 1, h, a, t);
}

double figure7_flash_percent(Table2Row row, double s, double h, double a, int t) {
    return 100.0 * table2_flash_bytes(row, s, 1, h, a, t) / table2_bytes(Table2Row::TP, s, 1, h, a, t);
}

double selective_saving_fraction(double s, double h, double a, int t, bool sp) {
    // §5's share is that of the paper's unfused attention core (under flash there is nothing to save).
    LayerFormulaInput none{s, 1, h, a, t, sp, Recompute::None, 2, Attention::Unfused};
    LayerFormulaInput sel = none;
    sel.rc = Recompute::Selective;
    return 1.0 - layer_bytes(sel) / layer_bytes(none);
}

// ---- the whole model (§4.3) ----------------------------------------------------------------------------
ModelFormulaInput formula_input(int seq, int micro_batch, int hidden, int heads, int layers, int padded_vocab, int tp,
                                bool sp, Recompute rc, int d, Attention attention, int cp) {
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
    in.attention = attention;
    in.c = cp;
    return in;
}

std::vector<FormulaTerm> model_extra_terms(const ModelFormulaInput& in) {
    const double s = in.s / in.c;  // this rank's tokens under context parallelism (all of them when c = 1)
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
    terms[0].bytes = in.s / in.c * in.b * in.h * in_flight_microbatches / rep;  // "embed_drop_mask", s/c tokens
    return terms;
}

double first_stage_extra_bytes(const ModelFormulaInput& in, int in_flight_microbatches) {
    double sum = 0;
    for (const FormulaTerm& term : first_stage_extra_terms(in, in_flight_microbatches)) sum += term.bytes;
    return sum;
}

double recompute_transient_bytes(const LayerFormulaInput& in) {
    if (in.rc == Recompute::None) return 0;
    LayerFormulaInput none = in;
    none.rc = Recompute::None;
    LayerFormulaInput sel = in;
    sel.rc = Recompute::Selective;
    if (in.rc == Recompute::Selective) return layer_bytes(none) - layer_bytes(sel);  // the attention core
    return layer_bytes(none);                                                          // the whole layer
}

// ---- parameters and model state --------------------------------------------------------------------------
double gpt_param_count(double L, double h, double v, double s) {
    const double per_layer = 12 * h * h + 13 * h;
    return L * per_layer + v * h + s * h + 2 * h;
}

double model_state_bytes_per_gpu(double params, int t, int p, double bytes_per_param) {
    return params / ((double)t * p) * bytes_per_param;
}

double model_state_bytes_per_param(bool bf16_training, int dp, bool distributed_optimizer) {
    const double shards = distributed_optimizer && dp > 1 ? dp : 1;
    if (bf16_training) return 2 + 4 + (4 + 4 + 4) / shards;  // bf16 weight, fp32 grad | master, m, v
    return 4 + 4 + (4 + 4) / shards;                          // fp32 weight = master, fp32 grad | m, v
}

StageParams stage_params(double L, double h, double v, double s, int t, int p, int stage) {
    StageParams sp;
    const double Vp = padded_vocab_for((int)v);
    sp.layers = L / p;
    // Split by t: QKV 3h² + 3h, projection h², fc1 4h² + 4h, fc2 4h². Replicated: 2 layer norms 4h, the
    // projection's and fc2's biases 2h (added once, after the row-parallel reduction).
    sp.layer_params = sp.layers * ((12 * h * h + 7 * h) / t + 6 * h);
    if (stage == 0) {
        sp.word_embedding = Vp / t * h;
        sp.position_embedding = s * h;
    }
    if (stage == p - 1) {
        sp.final_ln = 2 * h;
        if (p > 1) sp.word_embedding = Vp / t * h;  // the LM head's tied copy on the last stage
    }
    return sp;
}

// ---- FLOPs (Appendix A) --------------------------------------------------------------------------------
// Forward per layer: QKV 6Bsh², QKᵀ 2Bs²h, ·V 2Bs²h, projection 2Bsh², MLP 16Bsh² = 24Bsh² + 4Bs²h;
// logits 2Bshv. Forward + backward = 3 × forward: 72Bsh² + 12Bs²h per layer, 6Bshv for the logits; summed
// over L layers this is Eq. 7.
double model_flops(double B, double L, double s, double h, double v) {
    return 72 * B * L * s * h * h * (1 + s / (6 * h) + v / (12 * h * L));
}

double hardware_flops_selective(double B, double L, double s, double h, double v) {
    return 72 * B * L * s * h * h * (1 + s / (3 * h) + v / (12 * h * L));
}

double hardware_flops_full(double B, double L, double s, double h, double v) {
    // Model FLOPs plus one more forward of each layer: 4 × (24Bsh² + 4Bs²h) per layer, 6Bshv for the logits.
    return 96 * B * L * s * h * h * (1 + s / (6 * h)) + 6 * B * s * h * v;
}

double hardware_flops(Recompute rc, double B, double L, double s, double h, double v) {
    switch (rc) {
        case Recompute::None: return model_flops(B, L, s, h, v);
        case Recompute::Selective: return hardware_flops_selective(B, L, s, h, v);
        case Recompute::Full: return hardware_flops_full(B, L, s, h, v);
    }
    return 0;
}

double flops_utilization(double flops_per_iter, double iter_seconds, double peak_flops_per_gpu, double gpus) {
    return flops_per_iter / iter_seconds / (peak_flops_per_gpu * gpus);
}

// ---- Table 3 and Table 5 -------------------------------------------------------------------------------
const std::vector<PaperModel>& paper_models() {
    // Table 3 (s = 2048, v = 51200, t = 8, no data parallelism; 175B and 530B interleaved with m = 3),
    // Table 5 (iteration times, throughput gain, MFU, HFU) and docs/paper.md's Figure 7 percentages.
    static const std::vector<PaperModel> models = {
        //  name   a    h      L    t  p   GPUs  B    b  m  s     v        full    sel    MFU   HFU   gain
        {"22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 2048, 51200, 1.42, 1.10, 41.5, 43.7, 29.0,
         {66.8, 49.4, 16.1, 7.6}},
        {"175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 2048, 51200, 18.13, 13.75, 51.4, 52.8, 31.8,
         {62.0, 56.5, 18.5, 8.7}},
        {"530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 2048, 51200, 49.05, 37.83, 56.0, 57.0, 29.7,
         {58.3, 61.9, 20.2, 9.5}},
        {"1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 2048, 51200, 94.42, 71.49, 56.3, 57.0, 32.1,
         {58.3, 61.9, 20.2, 9.5}},
    };
    return models;
}

const PaperModel* find_paper_model(const std::string& name) {
    for (const PaperModel& m : paper_models()) {
        const char* a = m.name;
        const char* b = name.c_str();
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (*a == 0 && *b == 0) return &m;
    }
    return nullptr;
}
