// formulas.cu — the calculator's formulas (see formulas.h). Host code only.
#include "formulas.h"

#include "flash_memory.h"  // figure7_flash_percent: table2_flash_bytes

#include "../layers/model_shape.h"  // padded_vocab_for: the trainer's vocabulary padding

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

// ---- context parallelism: ring attention's K/V traffic ------------------------------------------------
double cp_kv_forward_bytes(const LayerFormulaInput& in, int c) {
    if (c <= 1) return 0;
    const double kv = in.s * in.b * in.h / in.t;  // elements of the rank's K (and of its V): in.s = s/c
    return 2 * (c - 1) * kv * in.d;               // K and V, c − 1 ring steps, d bytes each
}

double cp_kv_backward_bytes(const LayerFormulaInput& in, int c) {
    if (c <= 1) return 0;
    const double kv = in.s * in.b * in.h / in.t;
    // K and V go round again (c − 1 hops); dK and dV, fp32 accumulators, ride with them and then take one
    // more hop back to the rank that owns K and V: c hops.
    return 2 * (c - 1) * kv * in.d + 2 * c * kv * 4;
}

double tp_forward_bytes(const LayerFormulaInput& in) {
    // Two collectives per block (attention, MLP) in the forward pass: f̄ twice under plain TP (an all-reduce
    // sends 2(t−1)/t·n), g and ḡ twice under SP (all-gather + reduce-scatter, (t−1)/t·n each): the same bytes.
    const double n = in.s * in.b * in.h;
    return 4.0 * (in.t - 1) / in.t * n * in.d;
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
    LayerFormulaInput none{s, 1, h, a, t, sp, Recompute::None, 2};
    LayerFormulaInput sel = none;
    sel.rc = Recompute::Selective;
    return 1.0 - layer_bytes(sel) / layer_bytes(none);
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
    return zero_bytes_per_param(distributed_optimizer ? 1 : 0, bf16_training, dp);
}

ZeroStateKinds zero_state_kinds(int stage, bool bf16_training) {
    ZeroStateKinds k = {{bf16_training ? 2.0 : 0.0, 4, 4, 4, 4}, {}};
    k.sharded[0] = stage >= 3;                          // weights
    k.sharded[1] = stage >= 2;                          // gradients
    k.sharded[2] = bf16_training ? stage >= 1 : stage >= 3;  // master (in fp32 it is the weights)
    k.sharded[3] = k.sharded[4] = stage >= 1;           // AdamW m, v
    return k;
}

double zero_bytes_per_param(int stage, bool bf16_training, int d) {
    const ZeroStateKinds k = zero_state_kinds(d > 1 ? stage : 0, bf16_training);
    double total = 0;
    for (int i = 0; i < 5; i++) total += k.bytes[i] / (k.sharded[i] ? d : 1);
    return total;
}

const char* zero_bytes_per_param_text(int stage, bool bf16_training) {
    static const char* bf16[4] = {"18", "6 + 12/d", "2 + 16/d", "18/d"}, *fp32[4] = {"16", "8 + 8/d", "4 + 12/d", "16/d"};
    const int s = stage < 0 ? 0 : stage > 3 ? 3 : stage;
    return bf16_training ? bf16[s] : fp32[s];
}

double zero_paper_bytes_per_param(int stage, int d) {
    const double n = d > 1 ? d : 1;
    const double at[4] = {16, 4 + 12 / n, 2 + 14 / n, 16 / n};
    return at[stage < 0 ? 0 : stage > 3 ? 3 : stage];
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

// ---- pipeline schedules with a split backward (zero bubble; not in the paper) ----------------------------
const char* bubble_schedule_name(BubbleSchedule s) {
    switch (s) {
        case BubbleSchedule::OneFOneB: return "1f1b";
        case BubbleSchedule::ZeroBubbleH1: return "zb-h1";
        case BubbleSchedule::ZeroBubbleH2: return "zb-h2";
        case BubbleSchedule::AFAB: return "afab";
        case BubbleSchedule::Interleaved: return "interleaved";
        case BubbleSchedule::ZeroBubbleV: return "zb-v";
    }
    return "?";
}

bool parse_bubble_schedule(const char* text, BubbleSchedule* out) {
    if (!text) return false;
    for (BubbleSchedule s : {BubbleSchedule::OneFOneB, BubbleSchedule::ZeroBubbleH1, BubbleSchedule::ZeroBubbleH2,
                             BubbleSchedule::AFAB, BubbleSchedule::Interleaved, BubbleSchedule::ZeroBubbleV})
        if (strcmp(text, bubble_schedule_name(s)) == 0) {
            *out = s;
            return true;
        }
    return false;
}

double pipeline_bubble_time(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W) {
    if (p < 1 || M < 1 || !(T_F >= 0) || !(T_B >= 0) || !(T_W >= 0)) return NAN;
    const double q = p - 1;
    using std::max;
    // Each term is one dependency path's length minus the busy time (formulas.h names the two floors).
    switch (s) {
        case BubbleSchedule::OneFOneB: case BubbleSchedule::AFAB: case BubbleSchedule::Interleaved: return q * (T_F + T_B + T_W);
        case BubbleSchedule::ZeroBubbleV:
            if (M < 2 * p || T_W > std::min(T_F, T_B)) return NAN;  // no closed form: pipeline_simulation.h
            return q * max({2 * T_B - T_W, T_F + T_B - T_W, 2 * T_F - 3 * T_W});
        case BubbleSchedule::ZeroBubbleH1:
            if (M >= p) return q * max({T_F + T_B - T_W, T_F, T_B});
            return max({q * (T_F + T_B) - (M - 1) * T_W, q * T_F + T_B, (p - M) * T_F + q * T_B});
        case BubbleSchedule::ZeroBubbleH2: {
            if (M >= 2 * p - 1) return q * max({T_F + T_B - 2 * T_W, T_F, T_B - T_F});
            const double z = max({q * (T_F + T_B) - (M - 1) * T_W, q * T_F, (p - M) * T_F + q * T_B});
            if (M > p) return max({z, q * T_F + T_B - T_W, (q - 1) * T_F + T_B});
            // M <= p: also the path of F(0) down to stage n = p − ⌈M/2⌉, that stage's forwards before its first
            // B (M of them for odd M, M − 1 for even), B(0) back up, and the first stage's M B's and W's.
            const double n = p - (M + 1) / 2, e = M % 2 == 0 ? 1 : 0;
            return max({z, n * (T_F + T_B) - e * T_W, (n - 1) * T_F + n * T_B});
        }
    }
    return NAN;
}

double pipeline_bubble_time_post_validated(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W) {
    if (p < 1 || M < p || !(T_W >= 0) || T_W > std::min(T_F, T_B)) return NAN;
    if (s != BubbleSchedule::ZeroBubbleH2) return pipeline_bubble_time(s, p, M, T_F, T_B, T_W);
    if (M < 2 * p - 1) return NAN;
    return (p - 1) * std::max({T_F + T_B - 2 * T_W, T_B - T_F, 0.0});
}

int bubble_schedule_chunks(BubbleSchedule s, int chunks) {
    return s == BubbleSchedule::ZeroBubbleV ? 2 : s == BubbleSchedule::Interleaved ? chunks : 1;
}

double pipeline_bubble_rate(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W, int chunks) {
    return pipeline_bubble_time(s, p, M, T_F, T_B, T_W) / (M * bubble_schedule_chunks(s, chunks) * (T_F + T_B + T_W));
}

double bubble_idle_share(double bubble, int M, int m, double T_F, double T_B, double T_W) {
    return bubble / (bubble + M * m * (T_F + T_B + T_W));
}

double pipeline_idle_share(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W, int chunks) {
    return bubble_idle_share(pipeline_bubble_time(s, p, M, T_F, T_B, T_W), M, bubble_schedule_chunks(s, chunks), T_F, T_B, T_W);
}

int first_stage_in_flight(BubbleSchedule s, int p, int M) {
    // Warm-up forwards plus the steady state's first forward: p − 1 + 1, or 2(p − 1) + 1 for ZB-H2; ZB-V's 2p
    // chunk-micro-batches are p of the stage's whole (two-chunk) micro-batches.
    if (s == BubbleSchedule::ZeroBubbleV) return std::min(p, M);
    return std::min(s == BubbleSchedule::ZeroBubbleH2 ? 2 * p - 1 : p, M);
}

double w_input_bytes_per_layer(double s, double b, double h, int t, int bytes_per_elem) {
    // Inputs 2 + 5/t (QKV, fc1 gathered; projection, fc2 split), output gradients 2 + 7/t (QKV, fc1 split;
    // projection, fc2 whole): 4 + 12/t, times s·b·h elements.
    return bytes_per_elem * s * b * h * (4.0 + 12.0 / t);
}

FirstStageScheduleMemory first_stage_schedule_memory(const ModelFormulaInput& in, BubbleSchedule s, int M) {
    FirstStageScheduleMemory f;
    const double layers = in.L / in.p;  // on each stage
    const double per_mb = layers * layer_bytes(in.layer());
    f.in_flight = first_stage_in_flight(s, in.p, M);
    f.layers_at_peak = f.in_flight * per_mb;
    if (s == BubbleSchedule::ZeroBubbleH1 || s == BubbleSchedule::ZeroBubbleH2) {
        f.w_inputs = layers * w_input_bytes_per_layer(in.s, in.b, in.h, in.t, in.d);
        f.after_b = (f.in_flight - 1) * per_mb + f.w_inputs;
    } else if (s == BubbleSchedule::ZeroBubbleV) {  // in chunks of half the stage's layers: 2n − 1 of them and one W's
        f.w_inputs = layers / 2 * w_input_bytes_per_layer(in.s, in.b, in.h, in.t, in.d);
        f.after_b = (2 * f.in_flight - 1) * per_mb / 2 + f.w_inputs;
    }
    f.peak = std::max(f.layers_at_peak, f.after_b);
    return f;
}
