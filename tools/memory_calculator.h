// memory_calculator.h — what the paper-scale calculator's parts share (tools/memory_calculator.cu: the options
// and the models; calculator_results.cu: the numbers of one model; calculator_print.cu: the tables as text,
// JSON and charts). Internal to the calculator.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "recompute/flash_memory.h"
#include "recompute/formulas.h"
#include "tools/beyond_paper.h"

inline const double GiB = 1024.0 * 1024.0 * 1024.0;
inline const double MiB = 1024.0 * 1024.0;

// ---- the model being computed --------------------------------------------------------------------------
struct ModelSpec {
    std::string name;
    double a = 0, h = 0, L = 0, s = 2048, v = 51200;
    int t = 1, p = 1, m = 1, dp = 1;
    int c = 1;                                        // context-parallel size (--cp): s/c tokens per GPU
    double b = 1, B = 1;                              // micro batch, global batch
    double iter_selective = NAN, iter_full = NAN;     // seconds per iteration (Table 5 or flags)
    const PaperModel* paper = nullptr;                // Table 3/5 row when the model is the paper's, unchanged
    std::string paper_quote;                          // what the paper says of a run outside Table 5
    bool same_layers_as_previous = false;             // per-layer tables would repeat the model before it
    bool cp_table = false;                            // shown in the context-parallelism table
    bool zb_table = false;                            // shown in the zero-bubble schedules' table
    PipeSchedule schedule = PipeSchedule::OneFOneB;   // interleaved when m > 1 unless --schedule says otherwise
    // CP ranks are GPUs of their own, each with 1/c of every sequence: t·c·p·dp.
    double gpus() const { return (double)t * c * p * dp; }
    // M per step on each data-parallel rank (the c ranks of a CP group share the same micro-batches).
    double microbatches() const { return B / (b * dp); }
};

// ---- options -------------------------------------------------------------------------------------------
struct Options {
    std::string model = "all";
    bool model_given = false;
    // Overrides (NAN / -1: not given).
    double layers = NAN, heads = NAN, hidden = NAN, seq = NAN, vocab = NAN, micro = NAN, global = NAN;
    int tp = -1, pp = -1, interleave = -1, dp = -1;
    int cp = 1;                    // --cp: context-parallel size of the per-GPU totals (1: none)
    double iter_time = NAN, iter_time_full = NAN;
    std::string schedule;          // "" = 1f1b, or interleaved when m > 1
    int d = 2;
    Attention attention = Attention::Unfused;  // --attention: the core attention of the per-GPU totals
    bool bf16_states = true;       // --param-dtype: bf16 training (18 B/param) or fp32 (16)
    double bytes_per_param = NAN;  // --bytes-per-param: a fixed accounting instead (NAN: not given)
    double gpu_mem_gib = 80;
    double peak = kA100PeakBf16;
    bool json = false;
    std::string chart, beyond_chart;
    double pipe_times[3] = {1, 1, 1};  // --pipe-times: T_F, T_B, T_W of the zero-bubble table
};

// ---- results -------------------------------------------------------------------------------------------
// The layouts the calculator compares: Table 2's rows with parallelism, plus SP + full as our trainer runs
// it (the paper's unfused attention), then the two layouts flash attention adds (with selective they are
// the same: nothing is left for selective to drop; full recompute keeps the same layer input).
struct Layout {
    const char* key;    // JSON key
    const char* label;  // table label
    bool sp;
    Recompute rc;
    Attention attention;
};
inline const Layout kLayouts[] = {
    {"tp", "TP (baseline)", false, Recompute::None, Attention::Unfused},
    {"tp_sp", "TP + SP", true, Recompute::None, Attention::Unfused},
    {"tp_selective", "TP + selective", false, Recompute::Selective, Attention::Unfused},
    {"tp_sp_selective", "TP + SP + selective", true, Recompute::Selective, Attention::Unfused},
    {"full", "full recompute (2sbh)", false, Recompute::Full, Attention::Unfused},
    {"full_sp", "full + SP (2sbh/t)", true, Recompute::Full, Attention::Unfused},
    {"tp_flash", "TP + flash", false, Recompute::None, Attention::Flash},
    {"tp_sp_flash", "TP + SP + flash", true, Recompute::None, Attention::Flash},
};
constexpr int kNumLayouts = 8;
constexpr int kNumPaperLayouts = 6;  // the first six: the paper's attention, unless --attention flash
inline const int kTPFlash = 6, kTPSPFlash = 7;
// Figure 7's four bars, as indices into kLayouts.
inline const int kFig7Layouts[4] = {1, 2, 3, 4};
inline const char* const kFig7Names[4] = {"TP + SP", "TP + selective", "TP + SP + selective", "full recompute"};

struct StageMemory {
    double layers, extras, transient;  // activations: the layers' at the peak, outside the layers, one rebuilt layer
    double state, total;               // model states without the distributed optimizer, and the GPU's total
    double state_dist, total_dist;     // the same with it (NAN under --bytes-per-param)
    bool fits, fits_dist;
};

// What rank 0 (the first stage) of the pipeline schedule holds at its peak, from the schedule itself: the
// same pipe_schedule() ops the trainer runs, so the calculator and the trainer count alike.
struct PipelineCounts {
    int microbatches = 0;        // M per step on each data-parallel rank
    int warmup = 0;              // forwards rank 0 runs before its first backward
    int in_flight = 0;           // pipe_peak_in_flight: (micro-batch, chunk) pairs held at the peak
    int embed_in_flight = 0;     // of those, micro-batches whose first chunk (the embedding's) is held
    double chunk_layers = 0;     // layers of one chunk: L/(p·m)
    double in_flight_layers = 0; // in_flight · chunk_layers: layers' worth of activations held
    double paper_layers = 0;     // §4.3's statement: L·(1 + (p−1)/(pm)) (1F1B: m = 1), AFAB M·L/p
    double bubble = 0;           // pipe_ideal_bubble: (p − 1)/(m·M)
};


// One row of the context-parallelism table: the first stage's activations on one GPU at s/c tokens per GPU
// (flash attention, recompute none: CP is modelled with flash only) and the bytes one GPU sends per layer
// and micro-batch, ring attention's K/V against the TP (+ SP) collectives.
struct CPRow {
    double s = 0;
    int c = 1;
    double gpus = 0, tokens = 0;        // t·c·p·dp; s/c
    double acts_tp = 0, acts_tp_sp = 0; // TP + flash, TP + SP + flash: layers in flight + outside the layers
    double kv_fwd = 0, kv_bwd = 0;      // cp_kv_forward_bytes, cp_kv_backward_bytes
    double tp_fwd = 0;                  // tp_forward_bytes: the TP (+ SP) collectives' forward bytes
};

// One row of the zero-bubble table: a schedule's bubble at --pipe-times (one chunk per stage, synchronous
// step end) and the first stage of the TP + SP + selective layout under it.
struct ZBRow {
    BubbleSchedule schedule = BubbleSchedule::OneFOneB;
    double bubble = 0, rate = 0, idle_share = 0;  // pipeline_bubble_time (in the units of --pipe-times), its rates
    FirstStageScheduleMemory mem;                 // layers and W inputs at the peak
    double extras = 0, transient = 0, state = 0;  // the per-GPU totals' other terms (extras: in_flight masks)
    double total = 0;
    bool fits = false;
};
inline const int kZBLayout = 3;  // TP + SP + selective in kLayouts: the paper's layout for its largest models

struct Result {
    ModelSpec spec;
    double five_as_h, four_a_h;      // the attention core's 5as/h and flash's lse 4a/h, per sbh
    double table2[kTable2Rows];      // bytes per layer, Table 2 as printed (d = 2)
    double table2_flash[kTable2Rows];  // the same rows under flash attention (d = 2)
    double layer[kNumLayouts];       // bytes per layer, sum of layer_terms (d), each layout's own attention
    double fig7[4];                  // percent of the TP baseline (layer_terms, d)
    double fig7_flash[2];            // TP + flash, TP + SP + flash: percent of the same (unfused) baseline
    double saving_sel, saving_sel_tp; // selective's saving vs no-parallel / TP+SP baseline, and under plain TP
    double params, interleave;
    PipelineCounts pipe;
    StageParams stage_params;         // what one GPU of the first stage holds
    double bytes_per_param, bytes_per_param_dist;
    StageMemory stage[kNumLayouts];
    double flops_model, flops_sel, flops_full;
    double mfu_sel = NAN, hfu_sel = NAN, mfu_full = NAN, hfu_full = NAN, gain = NAN;
    std::vector<CPRow> cp_rows;       // empty unless spec.cp_table
    std::vector<ZBRow> zb_rows;       // empty unless spec.zb_table
};


// The numbers of one model (calculator_results.cu).
PipelineCounts first_stage_counts(const ModelSpec& m);
ModelFormulaInput model_input(const ModelSpec& m, const Layout& lay, int d, Attention attention, int c);
Result compute(const ModelSpec& m, const Options& o);
// The tables (calculator_print.cu).
void print_text(const std::vector<Result>& all, const Options& o);
void print_json(const std::vector<Result>& rs, const Options& o);
void write_chart(const std::vector<Result>& rs, const Options& o);
std::vector<BeyondModel> beyond_models(const std::vector<Result>& rs);
