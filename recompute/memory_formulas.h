// memory_formulas.h — the paper's activation-memory formulas: what one layer saves, tensor by tensor; Table 2;
// the whole model on the first pipeline stage (§4.3, Eq. 5/6).
//
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (docs/paper.md).
// This is the ONE implementation of them: the trainer's measured memory report (--memory-report,
// memory_report.h) compares its tagged saved tensors against layer_terms() / model_extra_terms() and the
// run's Table 2 row (table2.h), and the paper-scale calculator (tools/memory_calculator.cu) prints Table 2
// and the whole-model totals from the same functions. The calculator's other formulas (FLOPs, model states,
// the paper's models, CP traffic, Figure 7's percentages) are in formulas.h.
//
// Notation (the paper's): a heads, b microbatch, h hidden, L layers, p pipeline size, s sequence length,
// t tensor-parallel size, v vocabulary, B global batch, m interleaved chunks per pipeline stage.
// Sizes are in bytes. d = bytes per activation element (2 for bf16 as in the paper, 4 for fp32); dropout
// masks are 1 byte per element whatever d is.
//
// s is the sequence length the caller hands in: the tokens of one sequence that this rank holds. The paper's
// ranks hold all of them; a run that splits the sequence across ranks (beyond the paper) passes its share.
//
// Pure host code without dependencies (no MPI, no CUDA calls): usable from any program or test.
#pragma once
#include <string>
#include <vector>

// ---- recomputation policy -------------------------------------------------------------------------------
enum class Recompute { None, Selective, Full };
const char* recompute_name(Recompute rc);                 // "none" | "selective" | "full"
bool parse_recompute(const char* text, Recompute* out);   // accepts the names above; false otherwise

// ---- core attention: the paper's unfused form, or a kernel beyond the paper (--attention) ---------------
// The formulas below are the unfused core's, the paper's: three s×s tensors (the 5as²b of Table 2). Another
// core describes what it keeps instead in an AttentionCoreMemory (below; recompute/flash_memory.h).
enum class Attention { Unfused, Flash };
const char* attention_name(Attention at);                 // "unfused" | "flash"
bool parse_attention(const char* text, Attention* out);   // accepts the names above; false otherwise

struct LayerFormulaInput;
struct FormulaTerm;
enum class Table2Row;
// What an attention core beyond the paper keeps in place of the unfused core's three s×s tensors, handed in by
// the caller (LayerFormulaInput::core; nullptr: the paper's core). layer_terms puts its terms after "qkv"
// under every policy but full (the core rebuilds what it does not keep, so selective has nothing to drop);
// table2_compare (recompute/table2.h) reads the run's Table 2 row with the core's rows.
struct AttentionCoreMemory {
    Attention attention;                                               // the core it describes
    std::vector<FormulaTerm> (*terms)(const LayerFormulaInput& in);     // its saved tensors in one layer
    const char* (*table2_formula)(Table2Row row);                      // Table 2's rows with it, in symbols
    double (*table2_bytes)(Table2Row row, double s, double b, double h, double a, int t);  // and in bytes
};

// ---- one transformer layer on one rank ----------------------------------------------------------------
struct LayerFormulaInput {
    double s = 0, b = 0, h = 0, a = 0;  // sequence, microbatch, hidden, heads
    int t = 1;                          // tensor-parallel size
    bool sp = false;                    // sequence parallelism (requires nothing of t; t = 1 makes it a no-op)
    Recompute rc = Recompute::None;
    int d = 2;                          // bytes per activation element (masks are always 1 byte)
    const AttentionCoreMemory* core = nullptr;  // the core attention: nullptr is the paper's unfused one
};

struct FormulaTerm {
    const char* name;  // tensor name, identical to the tag the trainer gives the saved tensor
    double bytes;
};

// Expected bytes of every tensor ONE layer saves for backward on ONE rank (docs/paper.md, per-tensor table,
// with the Table 2 splits). Names and sizes (sbh = s·b·h, "/t SP" = divided by t only under SP):
//   "ln1_in"         d·sbh    /t SP   input of the first layer norm
//   "qkv_in"         d·sbh    /t SP   input of the Q,K,V linear (the LN1 output; column-parallel input)
//   "qkv"            3d·sbh/t         Q, K and V (the paper's 4sbh for Q,K plus 2sbh for V)
//   "probs"          d·as²b/t         softmax output
//   "attn_mask"      as²b/t           softmax-dropout mask
//   "probs_drop"     d·as²b/t         softmax-dropout output
//   "proj_in"        d·sbh/t          input of the output projection (row-parallel input)
//   "attn_drop_mask" sbh      /t SP   dropout mask after the projection
//   "ln2_in"         d·sbh    /t SP   input of the second layer norm
//   "fc1_in"         d·sbh    /t SP   input of fc1 (the LN2 output; column-parallel input)
//   "gelu_in"        4d·sbh/t         GeLU input
//   "fc2_in"         4d·sbh/t         input of fc2 (the GeLU output)
//   "mlp_drop_mask"  sbh      /t SP   dropout mask after fc2
// Selective: the same list without "probs", "attn_mask", "probs_drop" (recomputed in backward).
// Another core (in.core): without those three under every policy but full, with the core's terms after "qkv".
// Full: only "ln1_in" = the layer input, d·sbh, or d·sbh/t under SP (each rank keeps its sequence shard).
// Without parallelism the sum is sbh(16d + 2) + as²b(2d + 1): 34sbh + 5as²b for d = 2.
std::vector<FormulaTerm> layer_terms(const LayerFormulaInput& in);
double layer_bytes(const LayerFormulaInput& in);  // the sum of layer_terms(in)

// ---- Table 2, exactly as printed (d = 2) ---------------------------------------------------------------
enum class Table2Row {
    NoParallel,       // sbh(34 + 5as/h)
    TP,               // sbh(10 + 24/t + 5as/(ht))      tensor parallel (the Figure 7 baseline)
    TP_SP,            // sbh(34/t + 5as/(ht))           tensor + sequence parallel
    TP_Selective,     // sbh(10 + 24/t)                 tensor parallel + selective recompute
    TP_SP_Selective,  // sbh(34/t)                      tensor + sequence parallel + selective recompute
    FullRecompute,    // 2sbh                           full recompute
};
constexpr int kTable2Rows = 6;
const char* table2_row_name(Table2Row row);     // the paper's wording, e.g. "tensor + sequence parallel"
const char* table2_row_formula(Table2Row row);  // the printed formula, e.g. "sbh(34/t + 5as/(ht))"
double table2_bytes(Table2Row row, double s, double b, double h, double a, int t);
// The Table 2 row that describes a (t, sp, rc) layout (t = 1 without SP and recompute: NoParallel).
// layer_bytes({s,b,h,a,t,sp,rc,d=2}) (unfused) == table2_bytes(table2_row(t,sp,rc), ...) for every layout except
// full recompute under SP: the paper prints 2sbh for full recompute (and uses it in Figure 7) while noting
// that a 1/t slice per rank is possible under SP; our trainer stores that slice, 2sbh/t. The paper's value
// times table2_full_sp_factor(t, sp) is what the trainer stores.
Table2Row table2_row(int t, bool sp, Recompute rc);
double table2_full_sp_factor(int t, bool sp);  // 1/t under SP, else 1

// ---- the whole model (§4.3, Eq. 5/6 style) -------------------------------------------------------------
struct ModelFormulaInput {
    double s = 0, b = 0, h = 0, a = 0;  // sequence, microbatch, hidden, heads
    double L = 0, v = 0;                // layers, vocabulary (the trainer passes its padded vocabulary Vp)
    int t = 1, p = 1, m = 1;            // tensor, pipeline size; m = interleaved chunks per stage (1: plain 1F1B)
    bool sp = false;
    Recompute rc = Recompute::None;
    int d = 2;
    const AttentionCoreMemory* core = nullptr;  // the core attention: nullptr is the paper's unfused one
    LayerFormulaInput layer() const { return LayerFormulaInput{s, b, h, a, t, sp, rc, d, core}; }
};
// The formula input of a run of the trainer's model: seq tokens, micro_batch sequences per rank, the model's
// hidden size, heads, layers and padded vocabulary, tensor-parallel size tp, SP, recompute, d bytes per
// activation element. The one place a trainer, a benchmark or a test turns its configuration into the paper's
// symbols (with another attention core, or a sequence split across ranks: its overload in flash_memory.h).
ModelFormulaInput formula_input(int seq, int micro_batch, int hidden, int heads, int layers, int padded_vocab, int tp,
                                bool sp, Recompute rc, int d);

// Saved tensors outside the transformer layers, on the FIRST pipeline stage of ONE rank (§4.3):
//   "embed_drop_mask"  sbh per in-flight microbatch, /t SP   (p microbatches on the first stage: sbhp/t)
//   "lnf_in"           d·sbh /t SP    input of the final layer norm      } these three live on the last stage;
//   "lmhead_in"        d·sbh /t SP    input of the LM head (tied wte)     } they count on the first stage only
//   "logits"           4·sbv/t        fp32 logits, vocab-parallel          } when p = 1 (§4.3)
// The paper's §4.3 sum for p = 1, d = 2, SP: sbh/t + 2sbh/t + 2sbh/t + 4sbv/t = (sbh/t)(1 + 4(1 + v/h)).
// The logits are fp32 whatever d is (the paper's "4sbv/t"; the loss needs fp32 log-softmax), so they do not
// scale with d. The trainer (p = 1) tags its saved tensors with the same names; it uses its padded vocabulary.
// Layer-norm statistics (mean, rstd), ignored by the paper, are not part of these terms.
std::vector<FormulaTerm> model_extra_terms(const ModelFormulaInput& in);
double model_extra_bytes(const ModelFormulaInput& in);

// The interleaved-schedule factor of §4.3: 1 + (p − 1)/(p·m); 1 when m = 1 (plain 1F1B) or p = 1.
double interleave_factor(int p, int m);
// Activation bytes of all transformer layers held by the first pipeline stage (§4.3, Eq. 5 generalized):
// 1F1B keeps p microbatches in flight, each with L/p layers' activations = L layers' worth:
// L · layer_bytes · interleave_factor(p, m).  With TP + SP and d = 2: (sbhL/t)(34 + 5as/h)(1 + (p−1)/(pm)).
double first_stage_layer_bytes(const ModelFormulaInput& in);
// first_stage_layer_bytes + model_extra_bytes (Eq. 6 style: §4.3's (sbhL/t)(p/L + δ(p=1)(4/L)(1 + v/h))).
double first_stage_activation_bytes(const ModelFormulaInput& in);
// The same first stage from a pipeline schedule's own counts (the trainer's; parallel/pipeline_schedule.h):
// `in_flight_chunks` (micro-batch, model chunk) pairs whose forward has run and backward has not, at the
// stage's peak, each holding the activations of L/(p·m) layers: in_flight_chunks · (L/(p·m)) · layer_bytes.
// For rank 0, pipe_peak_in_flight(pipe_schedule(...)) gives p for 1F1B with M >= p (L layers' worth, equal to
// first_stage_layer_bytes), M when M < p, M for AFAB, and 2(p − 1) + (m − 1)p + 1 interleaved with M > p
// (L·interleave_factor(p, m) layers' worth, again equal to first_stage_layer_bytes).
double stage_layer_bytes_in_flight(const ModelFormulaInput& in, int in_flight_chunks);
// model_extra_terms() with `in_flight_microbatches` embedding-dropout masks instead of the paper's p: the
// number of micro-batches whose first model chunk (the one with the embedding) is in flight at the peak.
std::vector<FormulaTerm> first_stage_extra_terms(const ModelFormulaInput& in, int in_flight_microbatches);
double first_stage_extra_bytes(const ModelFormulaInput& in, int in_flight_microbatches);
