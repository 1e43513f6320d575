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
// in.s is the rank's s/c tokens (formula_input with cp, recompute/flash_memory.h); c the context-parallel size.
double cp_kv_forward_bytes(const LayerFormulaInput& in, int c);
double cp_kv_backward_bytes(const LayerFormulaInput& in, int c);
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
// The same for any ZeRO stage (0..3) over d ranks (recompute/model_state_memory.h has the table; padding left
// out): 18 | 6 + 12/d | 2 + 16/d | 18/d in bf16 training, 16 | 8 + 8/d | 4 + 12/d | 16/d in fp32. d = 1: 18 / 16.
double zero_bytes_per_param(int stage, bool bf16_training, int d);
// The same by kind, in recompute/model_state_memory.h's order (weights, gradients, master, AdamW m, v): the
// bytes of one parameter's state of that kind, and whether the stage keeps it as this rank's 1/d shard (ZeRO-1
// the optimizer's: the master in bf16 training and both moments; ZeRO-2 the gradients too; ZeRO-3 all). In
// fp32 training the weights are the master: 0 bytes of weights. The one table the trainer's model-state
// formula and the calculator's per-kind bars read.
struct ZeroStateKinds {
    double bytes[5];
    bool sharded[5];
};
ZeroStateKinds zero_state_kinds(int stage, bool bf16_training);
const char* zero_bytes_per_param_text(int stage, bool bf16_training);  // "18", "6 + 12/d", ... (d = 1: stage 0's)
// The ZeRO paper's (Rajbhandari et al., SC 2020, Fig. 1: mixed-precision Adam with 2-byte gradients, K = 12):
// 2Ψ + 2Ψ + 12Ψ = 16, then 4 + 12/d (P_os), 2 + 14/d (P_os+g), 16/d (P_os+g+p) bytes per parameter.
double zero_paper_bytes_per_param(int stage, int d);

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

// ---- pipeline schedules with a split backward: bubble and first stage (not in the paper) ----------------
// Zero-bubble pipeline parallelism (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv
// 2401.10241) splits each backward into B (the gradient of the stage's input, which the previous stage
// waits for) and W (the weight gradients, which nobody waits for and can be deferred into idle time).
// 1F1B runs B and W together. T_F, T_B, T_W: the time of one micro-batch's F, B, W on one stage; p stages,
// M micro-batches per step; q = p − 1. Times are free to be unequal; communication is free.
//
// The op orders these formulas describe (stage r of p, warm-up w forwards, W lag d):
//   1F1B:  w = min(p−1−r, M); steady F(w+k) B(k) (B includes W); cool-down B's.
//   ZB-H1: w = min(p−1−r, M), d = r;     ZB-H2: w = min(2(p−1−r), M), d = 2r.
//   Steady for k = 0..M−w−1: F(w+k), B(k), then W(k−d) if k−d >= 0; cool-down for k = M−w..M−1: B(k),
//   then the next pending W; then the remaining W's.
// Both start together and END together (the step's gradient norm and clip wait for every stage: no
// optimizer post-validation), so every stage idles the same time per step (its busy time is the same).
// That idle time is the longest dependency path minus M·(T_F + T_B + T_W): a maximum of a few linear forms,
// found by a dependency simulation of the orders above and checked against it exactly in test_formulas
// (p = 1..8, M = 1..16, 16 time triples, 15 of them unequal):
//   1F1B, any M:        q·(T_F + T_B + T_W)
//   ZB-H1, M >= p:      q·max(T_F + T_B − T_W, T_F, T_B)
//          M <  p:      max(q(T_F + T_B) − (M−1)·T_W,  q·T_F + T_B,  (p−M)·T_F + q·T_B)
//   ZB-H2, M >= 2p−1:   q·max(T_F + T_B − 2T_W, T_F, T_B − T_F)
//          p < M < 2p−1: max(Z, q·T_F + T_B − T_W, (q−1)·T_F + T_B)
//          M <= p:      max(Z, n(T_F + T_B) − e·T_W, (n−1)·T_F + n·T_B),  n = p − ⌈M/2⌉, e = 1 if M is even
//                       else 0
//          where Z = max(q(T_F + T_B) − (M−1)·T_W,  q·T_F,  (p−M)·T_F + q·T_B).
// The paper's ZB-H1 bubble q(T_F + T_B − T_W) is the first term; the other two are floors no order can go
// under: the last stage waits q·T_F for its first forward, and the first stage, having run its p forwards,
// waits q·T_B for its first B (it has no W to fill the gap with). So q(T_F + T_B − T_W) holds while
// T_W <= min(T_F, T_B). The paper's ZB-H2 bubble q(T_F + T_B − 2T_W) likewise meets the last stage's q·T_F
// and the first stage's wait q·(T_B − T_F) after its 2p − 1 forwards: with a synchronous end ZB-H2 does not
// reach zero; at equal times T and M >= p it idles q·T, the same as ZB-H1 (1F1B: 3q·T), and for M < p
// both idle (2p − 1 − M)·T.
// The other schedules the trainer runs, in the same terms (their op orders: parallel/pipeline_schedule.h and
// parallel/zero_bubble_schedule.h; every time is one op's, i.e. one model chunk's under interleaving and ZB-V):
//   AFAB and interleaved (m chunks, M·m ops of each kind per stage), any M:  q·(T_F + T_B + T_W), as 1F1B's: the
//                       paper's (p − 1)/(m·M) as a rate, since a stage is busy M·m·(T_F + T_B + T_W)
//   ZB-V (two chunks per stage, 2M ops of each kind), M >= 2p and T_W <= min(T_F, T_B):
//                       q·max(2T_B − T_W, T_F + T_B − T_W, 2T_F − 3T_W)
//                       (at equal times q·T against 2M·3T of work: a third of ZB-H1's rate; outside that range, NaN:
//                       parallel/pipeline_simulation.h times the order itself).
// With optimizer post-validation (model/post_validation.h: no synchronization between steps, each stage starts
// its next step once it has run this one's ops) the steady bubble per step is, for T_W <= min(T_F, T_B) and
// M >= p, the same for every schedule here but ZB-H2, whose last stage no longer waits q·T_F for its first
// forward (the end triangle of the earlier stages overlaps the start of the next step):
//   ZB-H2, M >= 2p − 1: q·max(T_F + T_B − 2T_W, T_B − T_F, 0), zero at equal times (the paper's zero bubble).
// Elsewhere NaN (the simulation gives it). Checked against the simulation in test_formulas.
enum class BubbleSchedule { OneFOneB, ZeroBubbleH1, ZeroBubbleH2, AFAB, Interleaved, ZeroBubbleV };
// "1f1b" | "zb-h1" | "zb-h2" | "afab" | "interleaved" | "zb-v" (pipe_schedule_name's)
const char* bubble_schedule_name(BubbleSchedule s);
bool parse_bubble_schedule(const char* text, BubbleSchedule* out);  // those names; false otherwise
// Idle time per stage per step (the closed forms above). NaN when p < 1, M < 1 or a time is negative, or where no
// closed form is given (ZB-V outside its range).
double pipeline_bubble_time(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W);
// The same with optimizer post-validation (above); NaN outside the range given there.
double pipeline_bubble_time_post_validated(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W);
// Model chunks per stage: ZB-V's 2, interleaved's `chunks`, 1 otherwise.
int bubble_schedule_chunks(BubbleSchedule s, int chunks);
// Bubble rate: the idle time over the busy time, bubble / (M·m·(T_F + T_B + T_W)) (1F1B at equal times:
// (p − 1)/M, pipe_ideal_bubble at m = 1; ZB-H1: (p − 1)/(3M) for M >= p). chunks: interleaved's m.
double pipeline_bubble_rate(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W, int chunks = 1);
// The idle share of the step: bubble / (bubble + M·m·(T_F + T_B + T_W)).
double pipeline_idle_share(BubbleSchedule s, int p, int M, double T_F, double T_B, double T_W, int chunks = 1);
// The share of a given bubble (bubble_time, e.g. post-validated): bubble / (bubble + M·m·(T_F + T_B + T_W)).
double bubble_idle_share(double bubble_time, int M, int m, double T_F, double T_B, double T_W);

// Micro-batches whose F has run and B has not on the first stage at its peak: 1F1B and ZB-H1 min(p, M)
// (its p warm-up-and-first forwards, as 1F1B: L layers' worth), ZB-H2 min(2p − 1, M) (about twice that); ZB-V,
// in micro-batches of the stage's two chunks (L/p layers), min(2p, 2M)/2 once M >= 2p: p, 1F1B's L layers (below
// 2p micro-batches the order's own count: parallel/zero_bubble_schedule.h's zero_bubble_peak, in chunk units).
int first_stage_in_flight(BubbleSchedule s, int p, int M);
// What the trainer keeps for ONE layer's deferred W of ONE micro-batch, from its B until its W: copies of
// the four linear layers' inputs and output gradients, e·s·b·h·(4 + 12/t) bytes (e = bytes per element):
//   inputs: QKV and fc1 (column-parallel, kept all-gathered: s·b·h each, with or without SP), projection
//   s·b·h/t and fc2 4·s·b·h/t;  output gradients: QKV 3·s·b·h/t, projection s·b·h, fc1 4·s·b·h/t, fc2 s·b·h.
// The LM head's weight gradient stays in B (not deferred); the embeddings' are not counted here.
double w_input_bytes_per_layer(double s, double b, double h, int t, int bytes_per_elem);

// The first stage's transformer-layer activations under a schedule, counted at op boundaries (after each
// op): every micro-batch in flight holds L/p layers' saved tensors (layer_bytes(in.layer())), every
// micro-batch whose B has run and W has not holds L/p layers' W inputs (w_input_bytes_per_layer at the
// rank's s/c tokens, in.d bytes). On the first stage the W lag is 0: each B(k) is followed by W(k), so at
// most one micro-batch's W inputs are held, and never while the in-flight count is at its peak n: the two
// candidate peaks are n micro-batches' activations (after a forward) and n − 1 micro-batches' plus one
// micro-batch's W inputs (after a B); under ZB-V, in chunks of L/(2p) layers, 2n and 2n − 1 plus one chunk's W
// inputs. 1F1B (and AFAB, interleaved) defers nothing. Not counted: the terms outside the layers
// (first_stage_extra_bytes), the layer rebuilt during a backward, the transients of B and W themselves.
struct FirstStageScheduleMemory {
    int in_flight = 0;          // n = first_stage_in_flight(s, p, M)
    double layers_at_peak = 0;  // n · (L/p) · layer bytes: after the forward that reaches n (no W pending)
    double w_inputs = 0;        // (L/p) · w_input_bytes_per_layer: one micro-batch's (0 under 1F1B)
    double after_b = 0;         // (n − 1) · (L/p) · layer bytes + w_inputs, right after a B (0 under 1F1B)
    double peak = 0;            // max(layers_at_peak, after_b)
};
FirstStageScheduleMemory first_stage_schedule_memory(const ModelFormulaInput& in, BubbleSchedule s, int M);
