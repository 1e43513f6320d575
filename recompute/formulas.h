// formulas.h — the paper-scale calculator's formulas, beside the paper's memory formulas (memory_formulas.h):
// Figure 7's percentages and §5's selective saving, the transient bytes of recomputation, ring attention's K/V
// traffic (not in the paper), parameters and model states, FLOPs (Appendix A, Eq. 7/8), MFU/HFU, and the
// paper's models (Table 3, Table 5). tools/memory_calculator.cu prints them; the trainer reports FLOPs and CP
// traffic with them. Notation and units: memory_formulas.h.
//
// Pure host code without dependencies (no MPI, no CUDA calls): usable from any program or test.
#pragma once
#include <string>
#include <vector>
#include "memory_formulas.h"

// ---- context parallelism: the K/V traffic of ring attention (not in the paper) -------------------------
// Bytes ONE rank sends for ONE layer and ONE micro-batch (received bytes are the same: it is a ring). The
// rank's K and V are (s/c)·b·(h/t) elements each (its s/c tokens, its h/t share of the heads' channels);
// in the forward pass they travel c − 1 hops, one per ring step, until every rank has seen every other
// rank's K and V:
//   cp_kv_forward_bytes  = 2·(c−1)·(s/c)·b·(h/t)·d
// The backward pass sends K and V round again (c − 1 hops) and with them the dK and dV accumulated for
// their owner, in fp32 (4 bytes: they are sums over c ranks' contributions); those take the c − 1 hops and
// one last hop home to the owner, c hops:
//   cp_kv_backward_bytes = 2·(c−1)·(s/c)·b·(h/t)·d + 2·c·(s/c)·b·(h/t)·4
// Both 0 when c = 1 (no ring). The hops are point to point and overlap the attention tile being computed;
// compare the four (t−1)/t·s·b·h-element collectives of TP + SP per layer and pass, which do not
// (docs/paper.md "Context parallelism: where it takes over from sequence parallelism").
double cp_kv_forward_bytes(const LayerFormulaInput& in);
double cp_kv_backward_bytes(const LayerFormulaInput& in);
// For that comparison: the forward bytes one rank sends per layer in the TP (+ SP) collectives, on the
// rank's s/c tokens: two all-gathers and two reduce-scatters (or two all-reduces without SP: the same bytes)
// of (s/c)·b·h elements, each (t−1)/t of it per rank in a ring: 4·(t−1)/t·(s/c)·b·h·d. 0 when t = 1.
double tp_forward_bytes(const LayerFormulaInput& in);

// ---- Figure 7: per-layer activation memory relative to the TP baseline (Table 2, d = 2) ----------------
// percent = 100 · table2_bytes(row) / table2_bytes(TP). Independent of s, b, h individually: depends on
// t and 5as/h only. The four bars of the figure: TP_SP, TP_Selective, TP_SP_Selective, FullRecompute.
double figure7_percent(Table2Row row, double s, double h, double a, int t);
// The same bars under flash attention, against the SAME baseline, the paper's unfused tensor-parallel layer:
// 100 · table2_flash_bytes(row) / table2_bytes(TP), so that they stand beside the paper's bars. Depends on
// t, 5as/h and 4a/h only (b cancels).
double figure7_flash_percent(Table2Row row, double s, double h, double a, int t);

// Fraction of a layer's activation memory that selective recompute removes (§5: "70% for GPT-3, 65% for
// MT-NLG"): the attention core 5as/h out of 34 + 5as/h. The paper's baseline is the same layout without
// selective recompute under no parallelism, or equivalently under TP + SP (both scale every term by 1/t);
// under plain TP (10 unsplit) the saving would be smaller: (5as/(ht)) / (10 + 24/t + 5as/(ht)).
// Always the paper's unfused attention: under flash selective recompute saves nothing (layer_terms).
double selective_saving_fraction(double s, double h, double a, int t, bool sp);

// ---- recomputation's transient bytes (the calculator's column) ------------------------------------
// Not in the paper's totals: the transient activations rebuilt for ONE layer during its backward pass —
// full recompute rebuilds all of the layer's none-policy tensors, selective rebuilds the attention core
// (probs, attn_mask, probs_drop). 0 for Recompute::None. Shown separately by the calculator. Under flash
// attention selective rebuilds nothing here (0: the kernel rebuilds the probabilities one tile at a time in
// on-chip memory, never as an s×s tensor) and full rebuilds the flash layer (the lse, no s×s tensors).
double recompute_transient_bytes(const LayerFormulaInput& in);

// ---- parameters, gradients, optimizer state -------------------------------------------------------------
// Parameter count of a GPT (llm.c layout, the same as param_count() in layers/model_shape.h): per layer
// 12h² + 13h (QKV, projection, fc1, fc2 with biases; two layer norms), plus token embedding v·h (tied LM head),
// learned positions s·h, final layer norm 2h.
double gpt_param_count(double L, double h, double v, double s);
// Bytes per parameter for mixed-precision Adam as in Megatron-LM with bf16 and fp32 gradient accumulation:
// 2 (bf16 weight) + 4 (fp32 gradient, "main_grad") + 4 (fp32 master weight) + 4 + 4 (Adam m and v) = 18.
// (ZeRO's accounting with 2-byte gradients gives 16; pass that to the calculator with --bytes-per-param 16.)
constexpr double kBytesPerParamMixedAdam = 18.0;
// Weights + gradients + optimizer state per GPU: params / (t·p) · bytes_per_param (the first stage's extra
// embedding share is ignored, as params are assumed evenly split; no ZeRO sharding over data parallelism).
// What a stage really holds: stage_params() below, times model_state_bytes_per_param().
double model_state_bytes_per_gpu(double params, int t, int p, double bytes_per_param);

// Model-state bytes per parameter on one GPU, as the trainer holds them (model/gpt.h's flat buffers):
//   bf16 training: bf16 weight 2 + fp32 gradient 4 + fp32 master weight 4 + AdamW m 4 + v 4       = 18
//   fp32 training: fp32 weight (= the master) 4 + fp32 gradient 4 + m 4 + v 4                       = 16
// With a distributed optimizer (ZeRO-1, Megatron's --use-distributed-optimizer) the master weights and both
// moments are sharded over the dp data-parallel ranks; the weights and gradients stay whole:
//   bf16: 2 + 4 + 12/dp  (Megatron's 6 + 12/d),   fp32: 4 + 4 + 8/dp (an fp32 master IS the weight, so
//   only the moments shard). dp = 1 or no distributed optimizer: 18 / 16. The flat buffer's padding to a
//   multiple of dp (fewer than dp elements) is left out.
double model_state_bytes_per_param(bool bf16_training, int dp, bool distributed_optimizer);

// The parameters ONE tensor-parallel rank of pipeline stage `stage` (0..p−1) holds, as the trainer places
// and shards them (layers/model_shape.h's kParamTable): stage r holds layers [r·L/p, (r+1)·L/p); the first stage
// also the word embedding (its vocabulary-parallel slice, Vp/t rows, Vp = v rounded up to a multiple of 128
// as layers/model_shape.h's padded_vocab_for) and the position embedding (s rows, replicated); the last stage the
// final layer norm and, when p > 1, its own copy of the word-embedding slice (the LM head is tied to it).
// Per layer per rank: column-parallel QKV (3h² + 3h) and fc1 (4h² + 4h) and row-parallel projection (h²) and
// fc2 (4h²) weights are split by t; the layer norms (4h) and the row-parallel biases (2h) are replicated:
// 12h²/t + 7h/t + 6h (12h² + 13h at t = 1). Layer counts are L/p even when p does not divide L.
struct StageParams {
    double layers = 0;            // transformer layers on the stage (L/p)
    double layer_params = 0;      // their parameters on this rank
    double word_embedding = 0;    // Vp/t · h (first stage; the last stage's tied copy when p > 1)
    double position_embedding = 0;  // s · h (first stage)
    double final_ln = 0;          // 2h (last stage)
    double total() const { return layer_params + word_embedding + position_embedding + final_ln; }
};
StageParams stage_params(double L, double h, double v, double s, int t, int p, int stage);

// ---- FLOPs (Appendix A; matmuls only; backward = 2 × forward) ------------------------------------------
// B = global batch (sequences per iteration). FLOPs per ITERATION for the whole model.
// Eq. 7, model FLOPs:                     72BLsh²(1 + s/(6h) + v/(12hL))
double model_flops(double B, double L, double s, double h, double v);
// Eq. 8, hardware FLOPs with selective recompute: 72BLsh²(1 + s/(3h) + v/(12hL)).
// Note: the extra term 72BLsh²·s/(6h) = 12BLs²h is three times the forward attention core (QKᵀ and ·V:
// 4Bs²h per layer); we use Eq. 8 as printed because Table 5's HFU column is computed with it.
double hardware_flops_selective(double B, double L, double s, double h, double v);
// Full recompute: one more forward of every layer (not of the LM head):
// 96BLsh²(1 + s/(6h)) + 6Bshv = 72BLsh²(4/3 + 2s/(9h) + v/(12hL)).
double hardware_flops_full(double B, double L, double s, double h, double v);
// Hardware FLOPs for a recompute policy (None: = model FLOPs).
double hardware_flops(Recompute rc, double B, double L, double s, double h, double v);
// MFU or HFU: flops_per_iter / iter_seconds / (peak_flops_per_gpu · gpus).
double flops_utilization(double flops_per_iter, double iter_seconds, double peak_flops_per_gpu, double gpus);
// Datasheet peaks, dense bf16, per GPU: the one place they are written.
constexpr double kA100PeakBf16 = 312e12;  // A100: the peak Table 5 matches
constexpr double kH100PeakBf16 = 989e12;  // H100 / H200 SXM: what the trainer and e2e_bench report MFU against

// ---- the paper's configurations (Table 3) and end-to-end results (Table 5) -------------------------------
struct PaperModel {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, global_batch, micro_batch;
    int interleave;           // m: 3 for 175B and 530B (interleaved schedule), 1 otherwise
    double seq, vocab;        // s = 2048, v = 51200 for all
    double iter_full_s;       // Table 5: full recompute, seconds per iteration
    double iter_selective_s;  // Table 5: sequence parallel + selective recompute
    double table5_mfu, table5_hfu, table5_gain;  // Table 5 as printed, percent
    double fig7[4];           // docs/paper.md's Figure 7 percentages: TP+SP, TP+sel, TP+SP+sel, full
};
const std::vector<PaperModel>& paper_models();  // 22B, 175B, 530B, 1T
const PaperModel* find_paper_model(const std::string& name);  // case-insensitive; nullptr when unknown
