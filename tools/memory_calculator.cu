// memory_calculator.cu — the paper's memory and FLOPs numbers at paper scale, on any machine, no training.
//
// For the four models of Table 3 (22B, 175B, 530B, 1T), or a model described by flags, prints:
//   - Table 2: activation bytes of one transformer layer on one GPU, for the six configurations;
//   - Figure 7: each memory-saving configuration as a percentage of the tensor-parallel baseline, and the
//     share of activations selective recompute removes (§5: 70% for GPT-3, 65% for MT-NLG);
//   - the memory of one GPU of the first pipeline stage against the 80 GiB of an A100 (fits / does not
//     fit): its activations at the peak of the pipeline schedule (§4.3, Eq. 5/6 style), counted from the
//     same schedule the trainer runs (parallel/pipeline_schedule.h: rank 0's ops, their peak in flight),
//     plus the weights, gradients and AdamW state of the parameters the stage really holds (its L/p layers
//     and the embeddings, TP-sharded as the trainer shards them), with and without the distributed
//     optimizer; the paper's 530B run at data-parallel 8 (2240 GPUs) is added to the four models;
//   - FLOPs per iteration (Appendix A): model FLOPs (Eq. 7), hardware FLOPs with selective (Eq. 8) and full
//     recompute, and from iteration times MFU and HFU — the built-in Table 5 times reproduce its columns;
//   - beside the paper's columns, which stay as printed, the same under flash attention (not in the paper):
//     Table 2's rows with the 5as/h term traded for the fp32 lse's 4a/h, Figure 7's bars against the same
//     (unfused) TP baseline, and two flash layouts in the per-GPU totals; --attention flash computes every
//     layout of the per-GPU totals with flash attention (docs/paper.md "Flash attention and Table 2");
//   - context parallelism (not in the paper; --cp c, flash attention only): the per-GPU totals at s/c tokens
//     per GPU, and a table of the first stage's activations per GPU and ring attention's K/V bytes per layer
//     for c = 1, 2, 4, 8 at long sequences (docs/paper.md "Context parallelism: where it takes over from
//     sequence parallelism");
//   - zero-bubble pipeline schedules (not in the paper; Qi et al. 2024, arXiv 2401.10241): for the paper's
//     largest model in the default run (each model asked for with --model), the bubble of 1F1B, ZB-H1 and
//     ZB-H2 with a synchronous step end, at T_F : T_B : T_W = 1 : 1 : 1 unless --pipe-times says otherwise,
//     and the first stage's activations with the deferred W passes' inputs (docs/paper.md "Beyond the
//     paper: zero-bubble schedules").
//   - beyond the paper, its last section (tools/beyond_paper.h): for the runs with a measured step, ZeRO-1/2/3
//     and activation offloading next to full and selective recompute, what fits in 80 GiB and what each costs
//     (docs/paper.md "Beyond the paper"); --beyond-chart FILE.png draws their memory stacked by kind.
// --json prints the same numbers as JSON; --chart FILE.png draws Figure 7 (tools/chart.h).
// Every number comes from recompute/memory_formulas.h and recompute/formulas.h, the same code the trainer's memory report uses.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layers/tensor.h"  // mm_fatal
#include "layers/model_shape.h"    // padded_vocab_for
#include "parallel/pipeline_schedule.h"
#include "recompute/formulas.h"
#include "tools/beyond_paper.h"
#include "tools/chart.h"

namespace {

const double GiB = 1024.0 * 1024.0 * 1024.0;
const double MiB = 1024.0 * 1024.0;

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

ModelSpec from_paper(const PaperModel& pm) {
    ModelSpec m;
    m.name = pm.name;
    m.a = pm.heads, m.h = pm.hidden, m.L = pm.layers, m.s = pm.seq, m.v = pm.vocab;
    m.t = pm.tp, m.p = pm.pp, m.m = pm.interleave, m.dp = pm.gpus / (pm.tp * pm.pp);
    m.b = pm.micro_batch, m.B = pm.global_batch;
    m.iter_selective = pm.iter_selective_s, m.iter_full = pm.iter_full_s;
    m.paper = &pm;
    return m;
}

// The paper's 530B run with 8-way data parallelism (quoted in its abstract; docs/paper.md, Table 5: 2240
// GPUs, global batch 2240, 39.15 s per iteration, 54.2% MFU): Table 3's layout otherwise, so each GPU holds what it holds at dp 1,
// except that a distributed optimizer can shard the optimizer state 8 ways.
ModelSpec paper_530b_dp8() {
    ModelSpec m = from_paper(*find_paper_model("530B"));
    m.name = "530B-dp8";
    m.dp = 8, m.B = 2240;
    m.iter_selective = 39.15, m.iter_full = NAN;
    m.paper = nullptr;
    m.paper_quote = "54.2% MFU (abstract)";
    return m;
}

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

void print_help() {
    fputs(
        "memory_calculator — activation memory and FLOPs of Korthikanti et al. 2022 at paper scale\n"
        "\n"
        "Usage: memory_calculator [--model 22B|175B|530B|1T|530B-dp8|all] [model flags] [--json] [--chart FILE.png]\n"
        "\n"
        "Without flags: the four models of Table 3 (s = 2048, v = 51200, t = 8) and the paper's 530B run at\n"
        "data-parallel 8 (530B-dp8: 2240 GPUs), printing Table 2 (bytes of one layer per GPU), the Figure 7\n"
        "percentages of the tensor-parallel baseline, the memory of one GPU of the first pipeline stage\n"
        "(activations at the peak of the pipeline schedule, plus weights, gradients and AdamW state of the\n"
        "parameters it holds, with and without the distributed optimizer) against an 80 GiB A100, and\n"
        "model/hardware FLOPs with Table 5's iteration times (MFU and HFU at 312 TFLOP/s per GPU).\n"
        "\n"
        "Model (applied to the --model chosen; --layers, --heads and --hidden without --model describe a new\n"
        "model named 'custom', with defaults s = 2048, v = 51200, t = p = m = dp = 1, b = 1, B = b*dp):\n"
        "  --model NAME        22B, 175B, 530B, 1T, 530B-dp8 or all (default all)\n"
        "  --layers L          transformer layers\n"
        "  --heads A           attention heads\n"
        "  --hidden H          hidden size\n"
        "  --seq S             sequence length\n"
        "  --vocab V           vocabulary size\n"
        "  --micro-batch B     microbatch size b (sequences)\n"
        "  --global-batch B    global batch (sequences per iteration, all data-parallel ranks)\n"
        "  --tp T              tensor-parallel size\n"
        "  --pp P              pipeline-parallel size\n"
        "  --interleave M      interleaved-schedule chunks per stage (1 = plain 1F1B)\n"
        "  --dp N              data-parallel size (GPUs = tp * cp * pp * dp)\n"
        "  --cp C              context-parallel size (not in the paper): each GPU holds s/C tokens of every\n"
        "                      sequence through the whole layer (ring attention); flash attention only (the\n"
        "                      default with --cp > 1; --attention unfused is refused).\n"
        "                      Applied to the per-GPU totals; the CP table also shows C next to 1, 2, 4, 8\n"
        "  --schedule S        pipeline schedule: 1f1b, interleaved or afab (default: interleaved when\n"
        "                      --interleave > 1, else 1f1b); M = global batch / (micro-batch * dp)\n"
        "Changing any of these (or --schedule) drops the built-in Table 5 iteration times (give --iter-time).\n"
        "\n"
        "Memory:\n"
        "  --d BYTES           bytes per activation element (2 = bf16 as in the paper, 4 = fp32); masks\n"
        "                      are 1 byte and the logits fp32 whatever d is. Default 2\n"
        "  --attention A       core attention of every layout in the per-GPU totals: unfused (default, the\n"
        "                      paper's) or flash (no s x s tensors; a 4asb/t-byte fp32 lse instead, so\n"
        "                      selective recompute equals none). Table 2 and Figure 7 show both whatever\n"
        "                      it is. Also spelled --attention-backend (Megatron-LM's flag)\n"
        "  --param-dtype T     bf16 (default): bf16 weight 2 + fp32 gradient 4 + fp32 master weight 4 + Adam\n"
        "                      m, v 4 + 4 = 18 bytes per parameter, 6 + 12/dp with the distributed optimizer\n"
        "                      (Megatron-LM's accounting); fp32: 16, and 8 + 8/dp distributed. Under --cp\n"
        "                      the optimizer's shards span dp x cp ranks (dp reads dp * cp there)\n"
        "  --bytes-per-param X a fixed bytes per parameter instead (e.g. 16, ZeRO's accounting with 2-byte\n"
        "                      gradients); the distributed-optimizer columns are then left out\n"
        "  --gpu-mem-gib X     GPU memory for the fits / does-not-fit verdict. Default 80 (A100 80GB)\n"
        "\n"
        "Pipeline schedules (not in the paper):\n"
        "  --pipe-times F:B:W  relative times of one micro-batch's forward, input-gradient backward (B) and\n"
        "                      weight-gradient pass (W) on one stage, for the zero-bubble table (1F1B, ZB-H1,\n"
        "                      ZB-H2 with a synchronous step end). Default 1:1:1\n"
        "\n"
        "FLOPs:\n"
        "  --iter-time S       seconds per iteration with sequence parallelism + selective recompute\n"
        "                      (gives MFU from Eq. 7 and HFU from Eq. 8)\n"
        "  --iter-time-full S  seconds per iteration with full recompute (MFU, and HFU with the extra forward)\n"
        "  --peak FLOPS        peak FLOP/s of one GPU. Default 312e12 (A100 dense bf16, as Table 5)\n"
        "\n"
        "Output:\n"
        "  --json              print everything as one JSON object instead of tables\n"
        "  --chart FILE.png    also draw Figure 7 (grouped bars, % of the TP baseline) as a PNG\n"
        "  --beyond-chart FILE.png   also draw the memory of each technique beyond the paper (ZeRO, offloading;\n"
        "                      stacked by kind, the 80 GiB line) as a PNG\n"
        "  --help              this text\n"
        "\n"
        "Examples:\n"
        "  memory_calculator                                    # the paper's Tables 2, 5 and Figure 7\n"
        "  memory_calculator --chart docs/figure7.png\n"
        "  memory_calculator --model 530B --dp 8 --global-batch 2240 --iter-time 39.15   # 54.2% MFU\n"
        "  memory_calculator --layers 12 --heads 12 --hidden 768 --seq 1024 --vocab 50304 --tp 2 --d 4\n"
        "  memory_calculator --model 175B --attention flash          # the per-GPU totals under flash\n"
        "  memory_calculator --model 1T --seq 32768 --attention flash --cp 4   # context parallelism\n",
        stdout);
}

double parse_number(const char* flag, const char* text, bool integer) {
    char* end = nullptr;
    double v = strtod(text, &end);
    if (end == text || *end != 0 || !std::isfinite(v))
        mm_fatal("%s needs a number, got '%s' (see --help)", flag, text);
    if (!(v > 0)) mm_fatal("%s must be positive, got '%s'", flag, text);
    if (integer && v != std::floor(v)) mm_fatal("%s must be a whole number, got '%s'", flag, text);
    return v;
}

// "F:B:W", three positive numbers (e.g. 1:1:1 or 1:1.2:0.8).
void parse_pipe_times(const char* text, double out[3]) {
    const char* p = text;
    for (int i = 0; i < 3; i++) {
        char* end = nullptr;
        const double v = strtod(p, &end);
        const char want = i < 2 ? ':' : 0;
        if (end == p || *end != want || !std::isfinite(v) || !(v > 0))
            mm_fatal("--pipe-times needs three positive times F:B:W (e.g. 1:1:1), got '%s'", text);
        out[i] = v;
        p = end + 1;
    }
}

Options parse_args(int argc, char** argv) {
    Options o;
    bool attention_given = false;  // --cp alone picks flash, as the trainer does
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline = false;
        size_t eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1), arg = arg.substr(0, eq), has_inline = true;
        }
        auto next = [&]() -> const char* {
            if (has_inline) return value.c_str();
            if (i + 1 >= argc) mm_fatal("%s needs a value (see --help)", arg.c_str());
            return argv[++i];
        };
        auto num = [&](bool integer) { return parse_number(arg.c_str(), next(), integer); };
        auto no_value = [&]() {
            if (has_inline) mm_fatal("%s takes no value", arg.c_str());
        };
        if (arg == "--help" || arg == "-h") no_value(), print_help(), exit(0);
        else if (arg == "--json") no_value(), o.json = true;
        else if (arg == "--chart") o.chart = next();
        else if (arg == "--beyond-chart") o.beyond_chart = next();
        else if (arg == "--model") o.model = next(), o.model_given = true;
        else if (arg == "--layers") o.layers = num(true);
        else if (arg == "--heads") o.heads = num(true);
        else if (arg == "--hidden") o.hidden = num(true);
        else if (arg == "--seq") o.seq = num(true);
        else if (arg == "--vocab") o.vocab = num(true);
        else if (arg == "--micro-batch") o.micro = num(true);
        else if (arg == "--global-batch") o.global = num(true);
        else if (arg == "--tp") o.tp = (int)num(true);
        else if (arg == "--pp") o.pp = (int)num(true);
        else if (arg == "--interleave") o.interleave = (int)num(true);
        else if (arg == "--dp") o.dp = (int)num(true);
        else if (arg == "--cp") o.cp = (int)num(true);  // a whole number >= 1 (parse_number refuses 0 and below)
        else if (arg == "--d") o.d = (int)num(true);
        else if (arg == "--attention" || arg == "--attention-backend") {
            const char* v = next();
            if (!parse_attention(v, &o.attention)) mm_fatal("%s must be unfused or flash, got '%s'", arg.c_str(), v);
            attention_given = true;
        }
        else if (arg == "--bytes-per-param") o.bytes_per_param = num(false);
        else if (arg == "--schedule") {
            o.schedule = next();
            if (o.schedule != "1f1b" && o.schedule != "interleaved" && o.schedule != "afab")
                mm_fatal("--schedule must be 1f1b, interleaved or afab, got '%s'", o.schedule.c_str());
        } else if (arg == "--param-dtype") {
            std::string v = next();
            if (v != "bf16" && v != "fp32") mm_fatal("--param-dtype must be bf16 or fp32, got '%s'", v.c_str());
            o.bf16_states = v == "bf16";
        }
        else if (arg == "--gpu-mem-gib") o.gpu_mem_gib = num(false);
        else if (arg == "--peak") o.peak = num(false);
        else if (arg == "--iter-time") o.iter_time = num(false);
        else if (arg == "--iter-time-full") o.iter_time_full = num(false);
        else if (arg == "--pipe-times") parse_pipe_times(next(), o.pipe_times);
        else mm_fatal("unknown argument '%s' (see --help)", argv[i]);
    }
    // Ring attention merges the blocks of keys it receives by their log-sum-exp, which the online softmax of
    // flash attention has and the unfused core does not (the trainer refuses the same layout), so CP is
    // modelled with flash only.
    if (o.cp > 1 && !attention_given) o.attention = Attention::Flash;  // as the trainer: --cp alone means flash
    if (o.cp > 1 && o.attention != Attention::Flash)
        mm_fatal("--cp %d needs --attention flash: context parallelism runs ring attention on the flash path only "
                 "(its blocks merge by their log-sum-exp, which the unfused core does not keep)", o.cp);
    return o;
}

// The models to compute: the paper's (with overrides) or a custom one.
std::vector<ModelSpec> select_models(const Options& o) {
    const bool shape_override = std::isfinite(o.layers) || std::isfinite(o.heads) || std::isfinite(o.hidden) ||
                                std::isfinite(o.seq) || std::isfinite(o.vocab) || std::isfinite(o.micro) ||
                                std::isfinite(o.global) || o.tp > 0 || o.pp > 0 || o.interleave > 0 || o.dp > 0 ||
                                o.cp > 1 || !o.schedule.empty();
    std::vector<ModelSpec> models;
    const bool custom = !o.model_given && (std::isfinite(o.layers) || std::isfinite(o.heads) ||
                                           std::isfinite(o.hidden));
    if (custom) {
        if (!std::isfinite(o.layers) || !std::isfinite(o.heads) || !std::isfinite(o.hidden))
            mm_fatal("a custom model needs --layers, --heads and --hidden (or choose --model 22B|175B|530B|1T)");
        ModelSpec m;
        m.name = "custom";
        models.push_back(m);
    } else if (o.model == "all" || o.model == "ALL") {
        for (const PaperModel& pm : paper_models()) models.push_back(from_paper(pm));
        if (!shape_override) {  // with flags that change the layout it would be 530B again
            models.push_back(paper_530b_dp8());
            models.back().same_layers_as_previous = true;
        }
    } else if (o.model == "530B-dp8" || o.model == "530b-dp8") {
        models.push_back(paper_530b_dp8());
    } else {
        const PaperModel* pm = find_paper_model(o.model);
        if (!pm) mm_fatal("unknown --model '%s': choose 22B, 175B, 530B, 1T, 530B-dp8 or all", o.model.c_str());
        models.push_back(from_paper(*pm));
    }
    for (ModelSpec& m : models) {
        if (std::isfinite(o.layers)) m.L = o.layers;
        if (std::isfinite(o.heads)) m.a = o.heads;
        if (std::isfinite(o.hidden)) m.h = o.hidden;
        if (std::isfinite(o.seq)) m.s = o.seq;
        if (std::isfinite(o.vocab)) m.v = o.vocab;
        if (o.tp > 0) m.t = o.tp;
        if (o.pp > 0) m.p = o.pp;
        if (o.interleave > 0) m.m = o.interleave;
        if (o.dp > 0) m.dp = o.dp;
        m.c = o.cp;
        // The CP table: the paper's largest model in the default run (the one whose long-sequence numbers
        // docs/paper.md quotes), otherwise each model asked for.
        m.cp_table = !m.same_layers_as_previous && (custom || o.model_given || m.name == "1T");
        m.zb_table = m.cp_table;  // the same models: 1T in the default run, else each model asked for
        if (std::isfinite(o.micro)) m.b = o.micro;
        if (std::isfinite(o.global)) m.B = o.global;
        else if (custom) m.B = m.b * m.dp;
        if (shape_override) {  // the paper's iteration times describe the paper's configurations only
            m.iter_selective = m.iter_full = NAN;
            m.paper = nullptr;
            m.paper_quote.clear();
            m.same_layers_as_previous = false;
        }
        if (!o.schedule.empty()) {
            m.schedule = o.schedule == "afab" ? PipeSchedule::AFAB
                         : o.schedule == "1f1b" ? PipeSchedule::OneFOneB : PipeSchedule::Interleaved;
            // A plain schedule runs one chunk per stage: the paper's m = 3 gives way unless asked for.
            if (m.schedule != PipeSchedule::Interleaved && o.interleave < 0) m.m = 1;
        } else {
            m.schedule = m.m > 1 ? PipeSchedule::Interleaved : PipeSchedule::OneFOneB;
        }
        if (std::isfinite(o.iter_time)) m.iter_selective = o.iter_time;
        if (std::isfinite(o.iter_time_full)) m.iter_full = o.iter_time_full;
    }
    return models;
}

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
const Layout kLayouts[] = {
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
const int kTPFlash = 6, kTPSPFlash = 7;
// Figure 7's four bars, as indices into kLayouts.
const int kFig7Layouts[4] = {1, 2, 3, 4};
const char* const kFig7Names[4] = {"TP + SP", "TP + selective", "TP + SP + selective", "full recompute"};

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

PipelineCounts first_stage_counts(const ModelSpec& m) {
    PipelineCounts c;
    c.microbatches = (int)m.microbatches();
    c.warmup = pipe_warmup(m.schedule, m.p, 0, c.microbatches, m.m);
    const std::vector<PipeOp> ops = pipe_schedule(m.schedule, m.p, 0, c.microbatches, m.m);
    c.in_flight = pipe_peak_in_flight(ops);
    // Walk the ops again: at every moment the stage holds its peak, how many of the pairs are chunk 0's
    // (each keeps an embedding-dropout mask)? Interleaved, more than p can be (2p for 175B's m = 3).
    int live = 0, live0 = 0;
    for (const PipeOp& op : ops) {
        const int step = op.kind == PipeOp::Forward ? 1 : -1;
        live += step;
        if (op.chunk == 0) live0 += step;
        if (live == c.in_flight) c.embed_in_flight = std::max(c.embed_in_flight, live0);
    }
    c.chunk_layers = m.L / ((double)m.p * m.m);
    c.in_flight_layers = c.in_flight * c.chunk_layers;
    c.paper_layers = m.schedule == PipeSchedule::AFAB ? c.microbatches * m.L / m.p : m.L * interleave_factor(m.p, m.m);
    c.bubble = pipe_ideal_bubble(m.p, c.microbatches, m.m);
    return c;
}

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
const int kZBLayout = 3;  // TP + SP + selective in kLayouts: the paper's layout for its largest models

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

// c: the context-parallel size; 1 for the paper's per-layer tables (Table 2, Figure 7), m.c for the totals.
ModelFormulaInput model_input(const ModelSpec& m, const Layout& lay, int d, Attention attention, int c) {
    ModelFormulaInput in;
    // The logits are as wide as the trainer's padded vocabulary (layers/model_shape.h; 51200 is already padded).
    in.s = m.s, in.b = m.b, in.h = m.h, in.a = m.a, in.L = m.L, in.v = padded_vocab_for((int)m.v);
    in.t = m.t, in.p = m.p, in.m = m.m, in.sp = lay.sp, in.rc = lay.rc, in.d = d, in.attention = attention;
    in.c = c;
    return in;
}
// The attention of a layout in the per-GPU totals: a flash layout is flash; the paper's take --attention.
Attention stage_attention(const Layout& lay, const Options& o) {
    return lay.attention == Attention::Flash ? Attention::Flash : o.attention;
}

Result compute(const ModelSpec& m, const Options& o) {
    Result r;
    r.spec = m;
    r.five_as_h = 5 * m.a * m.s / m.h;
    r.four_a_h = 4 * m.a / m.h;
    for (int i = 0; i < kTable2Rows; i++) {
        r.table2[i] = table2_bytes((Table2Row)i, m.s, m.b, m.h, m.a, m.t);
        r.table2_flash[i] = table2_flash_bytes((Table2Row)i, m.s, m.b, m.h, m.a, m.t);
    }
    // Table 2 and Figure 7: each layout with its own attention (the paper's unfused, or flash), whatever
    // --attention says, so that the paper's columns stay the paper's.
    for (int i = 0; i < kNumLayouts; i++)
        r.layer[i] = layer_bytes(model_input(m, kLayouts[i], o.d, kLayouts[i].attention, 1).layer());
    for (int i = 0; i < 4; i++) r.fig7[i] = 100.0 * r.layer[kFig7Layouts[i]] / r.layer[0];
    r.fig7_flash[0] = 100.0 * r.layer[kTPFlash] / r.layer[0];
    r.fig7_flash[1] = 100.0 * r.layer[kTPSPFlash] / r.layer[0];
    r.saving_sel = selective_saving_fraction(m.s, m.h, m.a, m.t, true);
    r.saving_sel_tp = selective_saving_fraction(m.s, m.h, m.a, m.t, false);
    r.params = gpt_param_count(m.L, m.h, m.v, m.s);
    r.interleave = interleave_factor(m.p, m.m);
    r.pipe = first_stage_counts(m);
    r.stage_params = stage_params(m.L, m.h, m.v, m.s, m.t, m.p, 0);
    const bool fixed = std::isfinite(o.bytes_per_param);
    r.bytes_per_param = fixed ? o.bytes_per_param : model_state_bytes_per_param(o.bf16_states, m.dp, false);
    // The distributed optimizer shards over every rank that holds the same weights: dp x cp, as the trainer
    // shards it (CP ranks see different tokens of the same sequences and average their gradients).
    r.bytes_per_param_dist = fixed ? NAN : model_state_bytes_per_param(o.bf16_states, m.dp * m.c, true);
    const double state = r.stage_params.total() * r.bytes_per_param;
    const double state_dist = r.stage_params.total() * r.bytes_per_param_dist;
    for (int i = 0; i < kNumLayouts; i++) {
        ModelFormulaInput in = model_input(m, kLayouts[i], o.d, stage_attention(kLayouts[i], o), m.c);
        StageMemory& sm = r.stage[i];
        sm.layers = stage_layer_bytes_in_flight(in, r.pipe.in_flight);
        sm.extras = first_stage_extra_bytes(in, r.pipe.embed_in_flight);
        sm.transient = recompute_transient_bytes(in.layer());
        const double acts = sm.layers + sm.extras + sm.transient;
        sm.state = state, sm.state_dist = state_dist;
        sm.total = acts + state, sm.total_dist = acts + state_dist;
        sm.fits = sm.total <= o.gpu_mem_gib * GiB;
        sm.fits_dist = sm.total_dist <= o.gpu_mem_gib * GiB;  // false when NAN
    }
    r.flops_model = model_flops(m.B, m.L, m.s, m.h, m.v);
    r.flops_sel = hardware_flops_selective(m.B, m.L, m.s, m.h, m.v);
    r.flops_full = hardware_flops_full(m.B, m.L, m.s, m.h, m.v);
    if (std::isfinite(m.iter_selective)) {
        r.mfu_sel = 100 * flops_utilization(r.flops_model, m.iter_selective, o.peak, m.gpus());
        r.hfu_sel = 100 * flops_utilization(r.flops_sel, m.iter_selective, o.peak, m.gpus());
    }
    if (std::isfinite(m.iter_full)) {
        r.mfu_full = 100 * flops_utilization(r.flops_model, m.iter_full, o.peak, m.gpus());
        r.hfu_full = 100 * flops_utilization(r.flops_full, m.iter_full, o.peak, m.gpus());
    }
    if (std::isfinite(m.iter_selective) && std::isfinite(m.iter_full))
        r.gain = 100 * (m.iter_full / m.iter_selective - 1);
    if (m.zb_table) {
        const Layout& lay = kLayouts[kZBLayout];
        const ModelFormulaInput in = model_input(m, lay, o.d, stage_attention(lay, o), m.c);
        const double* T = o.pipe_times;
        for (BubbleSchedule s : {BubbleSchedule::OneFOneB, BubbleSchedule::ZeroBubbleH1, BubbleSchedule::ZeroBubbleH2}) {
            ZBRow row;
            const int M = r.pipe.microbatches;
            row.schedule = s;
            row.bubble = pipeline_bubble_time(s, m.p, M, T[0], T[1], T[2]);
            row.rate = pipeline_bubble_rate(s, m.p, M, T[0], T[1], T[2]);
            row.idle_share = pipeline_idle_share(s, m.p, M, T[0], T[1], T[2]);
            row.mem = first_stage_schedule_memory(in, s, M);
            // The masks of all in-flight micro-batches are added to the peak (after a B one fewer is held).
            row.extras = first_stage_extra_bytes(in, row.mem.in_flight);
            row.transient = recompute_transient_bytes(in.layer());
            row.state = state;
            row.total = row.mem.peak + row.extras + row.transient + row.state;
            row.fits = row.total <= o.gpu_mem_gib * GiB;
            r.zb_rows.push_back(row);
        }
    }
    if (m.cp_table) {
        // The model's own s when --seq is given, else two long sequences where CP is used in practice.
        std::vector<double> seqs = std::isfinite(o.seq) ? std::vector<double>{m.s} : std::vector<double>{32768, 131072};
        std::vector<int> cs = {1, 2, 4, 8};
        if (std::find(cs.begin(), cs.end(), o.cp) == cs.end()) cs.push_back(o.cp);
        std::sort(cs.begin(), cs.end());
        for (double s : seqs)
            for (int c : cs) {
                ModelSpec at = m;
                at.s = s, at.c = c;  // the schedule's counts (in flight) do not depend on s or c
                const ModelFormulaInput tp = model_input(at, kLayouts[kTPFlash], o.d, Attention::Flash, c);
                const ModelFormulaInput tp_sp = model_input(at, kLayouts[kTPSPFlash], o.d, Attention::Flash, c);
                CPRow row;
                row.s = s, row.c = c, row.gpus = at.gpus(), row.tokens = s / c;
                row.acts_tp = stage_layer_bytes_in_flight(tp, r.pipe.in_flight) + first_stage_extra_bytes(tp, r.pipe.embed_in_flight);
                row.acts_tp_sp =
                    stage_layer_bytes_in_flight(tp_sp, r.pipe.in_flight) + first_stage_extra_bytes(tp_sp, r.pipe.embed_in_flight);
                row.kv_fwd = cp_kv_forward_bytes(tp_sp.layer());
                row.kv_bwd = cp_kv_backward_bytes(tp_sp.layer());
                row.tp_fwd = tp_forward_bytes(tp_sp.layer());
                r.cp_rows.push_back(row);
            }
    }
    return r;
}

// ---- text output ---------------------------------------------------------------------------------------
std::string fmt(const char* f, double v) {
    if (!std::isfinite(v)) return "-";
    char buf[64];
    snprintf(buf, sizeof buf, f, v);
    return buf;
}
// A count or a bytes-per-element figure as it is: 18, 7.5, 6.375 (never rounded to a whole number).
std::string fmt_num(double v) { return fmt("%.6g", v); }

// The context-parallelism table (not in the paper): docs/paper.md "Context parallelism: where it takes over
// from sequence parallelism" quotes it.
void print_cp_table(const std::vector<Result>& all, const Options& o) {
    bool any = false;
    for (const Result& r : all) any = any || !r.cp_rows.empty();
    if (!any) return;
    printf("\nContext parallelism (not in the paper): c GPUs split each sequence, attention included (ring\n"
           "  attention, flash only). A GPU holds s/c tokens: its activations are the flash formulas at s/c\n"
           "  (first stage at the schedule's peak, recompute none, layers + outside, GiB; states unchanged by c).\n"
           "  Bytes one GPU sends per layer and micro-batch (MiB): ring K/V forward 2(c-1)(s/c)b(h/t)d, backward the\n"
           "  same + dK, dV in fp32 over c hops 2c(s/c)b(h/t)4 (point to point, overlapped with attention); the\n"
           "  TP + SP forward collectives 4(t-1)/t (s/c)bhd (on the critical path). d = %d.\n", o.d);
    printf("  %-8s %7s %3s %6s %7s %10s %13s | %9s %9s %11s\n", "model", "s", "c", "GPUs", "s/c", "TP + flash",
           "TP+SP+flash", "K/V fwd", "K/V bwd", "TP + SP fwd");
    for (const Result& r : all)
        for (const CPRow& row : r.cp_rows)
            printf("  %-8s %7.0f %3d %6.0f %7s %10.1f %13.1f | %9.1f %9.1f %11.1f\n", r.spec.name.c_str(), row.s, row.c,
                   row.gpus, fmt_num(row.tokens).c_str(), row.acts_tp / GiB, row.acts_tp_sp / GiB, row.kv_fwd / MiB,
                   row.kv_bwd / MiB, row.tp_fwd / MiB);
}

// The zero-bubble table (not in the paper): docs/paper.md "Beyond the paper: zero-bubble schedules" quotes it.
void print_zb_table(const std::vector<Result>& all, const Options& o) {
    bool any = false;
    for (const Result& r : all) any = any || !r.zb_rows.empty();
    if (!any) return;
    const double* T = o.pipe_times;
    printf("\nZero-bubble pipeline schedules (not in the paper; Qi et al. 2024, arXiv 2401.10241): each backward split\n"
           "  into B (input gradient, sent on) and W (weight gradients, deferred); one chunk per stage; the step ends\n"
           "  together on every stage (gradient norm, clip), so ZB-H2 keeps two triangles of idle time.\n"
           "  T_F : T_B : T_W = %s : %s : %s (--pipe-times). bubble = idle time per stage per step, in those units;\n"
           "  rate = bubble / (M(T_F + T_B + T_W)); idle = bubble / step. For M >= 2p - 1 (q = p - 1):\n"
           "    1f1b q(T_F + T_B + T_W), zb-h1 q max(T_F + T_B - T_W, T_F, T_B), zb-h2 q max(T_F + T_B - 2T_W, T_F, T_B - T_F)\n"
           "  First stage, %s, GiB: 'layers' = the n micro-batches in flight x L/p layers; 'W inputs'\n"
           "  = one micro-batch's copies of the 4 linears' inputs and output gradients, e sbh(4 + 12/t) per layer,\n"
           "  held from its B to its W; 'peak' = the larger of n micro-batches' layers (after a forward) and n - 1\n"
           "  micro-batches' plus the W inputs (after a B); + the masks of n micro-batches outside the layers, the\n"
           "  rebuilt core and the model states (no distributed optimizer).\n",
           fmt_num(T[0]).c_str(), fmt_num(T[1]).c_str(), fmt_num(T[2]).c_str(), kLayouts[kZBLayout].label);
    printf("  %-8s %-6s %5s %8s %7s %7s %7s | %9s %7s %8s %7s | %7s %7s %6s %7s %s\n", "model", "sched.", "p", "M",
           "bubble", "rate", "idle", "in flight", "layers", "W inputs", "peak", "outside", "rebuilt", "states", "total", "verdict");
    for (const Result& r : all)
        for (const ZBRow& row : r.zb_rows)
            printf("  %-8s %-6s %5d %8d %7s %6.2f%% %6.2f%% | %9d %7.2f %8.2f %7.2f | %7.2f %7.2f %6.1f %7.1f %s\n",
                   r.spec.name.c_str(), bubble_schedule_name(row.schedule), r.spec.p, r.pipe.microbatches,
                   fmt_num(row.bubble).c_str(), 100 * row.rate, 100 * row.idle_share, row.mem.in_flight,
                   row.mem.layers_at_peak / GiB, row.mem.w_inputs / GiB, row.mem.peak / GiB, row.extras / GiB,
                   row.transient / GiB, row.state / GiB, row.total / GiB, row.fits ? "fits" : "does not fit");
}

void print_text(const std::vector<Result>& all, const Options& o) {
    // The per-layer tables (Table 2, Figure 7) leave out a run whose layers are those of the model before it
    // (530B-dp8 is 530B's layout with more data parallelism).
    std::vector<Result> rs;
    for (const Result& r : all)
        if (!r.spec.same_layers_as_previous) rs.push_back(r);
    printf("Activation memory and FLOPs, Korthikanti et al. 2022 (formulas: recompute/formulas.h).\n");
    printf("Bytes per activation element d = %d (masks 1 byte, logits fp32); GiB = 2^30 bytes.\n\n", o.d);

    printf("Models (Table 3 unless changed by flags; 530B-dp8: the paper's 530B run at data-parallel 8)\n");
    printf("  %-8s %5s %6s %4s %6s %6s %3s %3s %3s %2s %3s %5s %3s %5s %10s\n", "model", "heads", "hidden", "L", "seq",
           "vocab", "t", "cp", "p", "m", "dp", "GPUs", "b", "B", "params");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        printf("  %-8s %5.0f %6.0f %4.0f %6.0f %6.0f %3d %3d %3d %2d %3d %5.0f %3.0f %5.0f %9.1fB\n", m.name.c_str(),
               m.a, m.h, m.L, m.s, m.v, m.t, m.c, m.p, m.m, m.dp, m.gpus(), m.b, m.B, r.params / 1e9);
    }

    printf("\nTable 2 — activation memory of one transformer layer on one GPU (MiB; t as above, d = 2 as printed)\n");
    printf("  %-50s %-27s", "configuration", "formula");
    for (const Result& r : rs) printf(" %9s", r.spec.name.c_str());
    printf("\n");
    for (int i = 0; i < kTable2Rows; i++) {
        printf("  %-50s %-27s", table2_row_name((Table2Row)i), table2_row_formula((Table2Row)i));
        for (const Result& r : rs) printf(" %9.1f", r.table2[i] / MiB);
        printf("\n");
    }
    printf("  %-50s %-27s", "full recompute + SP (what our trainer stores)", "2sbh/t");
    for (const Result& r : rs) printf(" %9.1f", r.table2[(int)Table2Row::FullRecompute] / r.spec.t / MiB);
    printf("\n");
    // Flash attention (not in the paper): the three s x s tensors behind 5as/h are never stored; one fp32
    // log-sum-exp per query per head (4asb/t bytes, sbh * 4a/(ht)) is kept instead.
    printf("  with flash attention (not in the paper): 5as/h -> 4a/h, the fp32 lse; selective = without it\n");
    for (int i = 0; i < kTable2Rows; i++) {
        printf("    %-48s %-27s", table2_row_name((Table2Row)i), table2_flash_formula((Table2Row)i));
        for (const Result& r : rs) printf(" %9.1f", r.table2_flash[i] / MiB);
        printf("\n");
    }
    if (o.d != 2) {
        printf("  with d = %d (per-tensor sums, sbh(16d + 2)/... + as^2b(2d + 1)/...; flash: 4asb/t, not d, for the\n"
               "  as^2b term):\n", o.d);
        for (int i = 0; i < kNumLayouts; i++) {
            printf("  %-78s", kLayouts[i].label);
            for (const Result& r : rs) printf(" %9.1f", r.layer[i] / MiB);
            printf("\n");
        }
    }

    printf("\nFigure 7 — activation memory per layer as %% of the tensor-parallel baseline (Table 2%s)\n",
           o.d == 2 ? "" : ", with d as given");
    printf("  %-8s %7s %9s %15s %20s %15s\n", "model", "5as/h", "TP + SP", "TP + selective", "TP + SP + selective",
           "full recompute");
    for (const Result& r : rs)
        printf("  %-8s %7.1f %8.1f%% %14.1f%% %19.1f%% %14.1f%%\n", r.spec.name.c_str(), r.five_as_h, r.fig7[0],
               r.fig7[1], r.fig7[2], r.fig7[3]);
    printf("  Selective recompute removes the attention core, 5as/h of 34 + 5as/h (§5; the same share without\n"
           "  parallelism or under TP + SP; plain TP keeps 10sbh unsplit, so there the share is smaller):\n");
    for (const Result& r : rs)
        printf("  %-8s saves %5.1f%% (under plain TP: %4.1f%%)\n", r.spec.name.c_str(), 100 * r.saving_sel,
               100 * r.saving_sel_tp);
    printf("  With flash attention (not in the paper), as %% of the same baseline, the paper's tensor-parallel\n"
           "  layer with unfused attention, sbh(10 + 24/t + 5as/(ht)) = 100%%. Flash keeps the fp32 lse (4a/h)\n"
           "  where selective recompute keeps nothing, so each flash bar sits just above its selective bar;\n"
           "  flash + selective is the same bar (nothing left to drop); full recompute is unchanged:\n");
    printf("  %-8s %7s %11s %15s %16s %20s\n", "model", "4a/h", "TP + flash", "TP + selective", "TP + SP + flash",
           "TP + SP + selective");
    for (const Result& r : rs)
        printf("  %-8s %7.5f %10.2f%% %14.2f%% %15.2f%% %19.2f%%\n", r.spec.name.c_str(), r.four_a_h, r.fig7_flash[0],
               r.fig7[1], r.fig7_flash[1], r.fig7[2]);

    printf("\nMemory of one GPU of the first pipeline stage (GiB = 2^30 bytes; verdict against %s GiB)\n"
           "  Activations at the peak of rank 0's pipeline schedule (parallel/pipeline_schedule.h, as the\n"
           "  trainer runs it): 'layers' = the (micro-batch, chunk) pairs in flight x L/(p*m) layers x one\n"
           "  layer's bytes; 'outside' = the embedding-dropout masks of the micro-batches whose first chunk is in\n"
           "  flight (+ final LN input, LM-head input, fp32 logits when p = 1); 'rebuilt' = one layer's tensors\n"
           "  recomputed during its backward (not in the paper's totals). 'states' = weights, gradients and AdamW\n"
           "  state of the parameters this GPU holds, without and with the distributed optimizer.\n"
           "  %s\n",
           fmt_num(o.gpu_mem_gib).c_str(),
           o.attention == Attention::Flash
               ? "Attention: flash in every layout (--attention flash): no s x s tensors, the fp32 lse instead;\n"
                 "  selective keeps what none keeps, and full recompute rebuilds a layer without them."
               : "Attention: the paper's unfused core in the first six layouts; the '+ flash' rows use flash attention\n"
                 "  (the same with selective, which has nothing left to drop).");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        const PipelineCounts& pc = r.pipe;
        const StageParams& sp = r.stage_params;
        printf("  %s: t = %d, p = %d, m = %d, dp = %d, micro-batch %s, M = %d per step, schedule %s\n",
               m.name.c_str(), m.t, m.p, m.m, m.dp, fmt_num(m.b).c_str(), pc.microbatches,
               pipe_schedule_name(m.schedule));
        if (m.c > 1)
            printf("    context parallel, cp = %d (%s GPUs): activations at s/c = %s of %s tokens per GPU; every CP\n"
                   "    rank holds the stage's weights, so the states change only where the distributed optimizer\n"
                   "    shards them, over dp x cp\n",
                   m.c, fmt_num(m.gpus()).c_str(), fmt_num(m.s / m.c).c_str(), fmt_num(m.s).c_str());
        printf("    rank 0: %d warm-up forwards; peak %d (micro-batch, chunk) pairs in flight x %s layers each = %s "
               "layers' worth\n",
               pc.warmup, pc.in_flight, fmt_num(pc.chunk_layers).c_str(), fmt_num(pc.in_flight_layers).c_str());
        const char* paper_form = m.schedule == PipeSchedule::AFAB ? "AFAB: M L/p"
                                 : m.m > 1                        ? "§4.3: L(1 + (p-1)/(pm))"
                                                                  : "§4.3: L, whatever p";
        printf("            (%s = %s%s); embedding-dropout masks held: %d; ideal bubble (p-1)/(mM) = %.1f%%\n",
               paper_form, fmt_num(pc.paper_layers).c_str(),
               m.schedule != PipeSchedule::AFAB && pc.microbatches < m.p ? ", stated for M >= p" : "",
               pc.embed_in_flight, 100 * pc.bubble);
        printf("    parameters on this GPU: %.3fB = %s layers %.3fB + word embedding %.3fB + positions %.3fB%s\n",
               sp.total() / 1e9, fmt_num(sp.layers).c_str(), sp.layer_params / 1e9, sp.word_embedding / 1e9,
               sp.position_embedding / 1e9, sp.final_ln > 0 ? " + final LN" : "");
        if (std::isfinite(r.bytes_per_param_dist) && m.c > 1)
            printf("    bytes per parameter: %s; with the distributed optimizer over dp x cp = %d x %d: %s\n",
                   fmt_num(r.bytes_per_param).c_str(), m.dp, m.c, fmt_num(r.bytes_per_param_dist).c_str());
        else if (std::isfinite(r.bytes_per_param_dist))
            printf("    bytes per parameter: %s; with the distributed optimizer over dp = %d: %s%s\n",
                   fmt_num(r.bytes_per_param).c_str(), m.dp, fmt_num(r.bytes_per_param_dist).c_str(),
                   m.dp == 1 ? " (nothing to shard at dp = 1)" : "");
        else
            printf("    bytes per parameter: %s (--bytes-per-param; the distributed optimizer not modelled)\n",
                   fmt_num(r.bytes_per_param).c_str());
        printf("    %-24s %7s %7s %7s %7s | %7s %7s %-12s | %s\n", "configuration", "layers", "outside", "acts",
               "rebuilt", "states", "total", "verdict", "distributed optimizer: states, total, verdict");
        std::string only_dist;
        // Under --attention flash the paper's six layouts are flash already: the '+ flash' rows would repeat them.
        const int rows = o.attention == Attention::Flash ? kNumPaperLayouts : kNumLayouts;
        for (int i = 0; i < rows; i++) {
            const StageMemory& sm = r.stage[i];
            printf("    %-24s %7.1f %7.2f %7.1f %7.2f | %7.1f %7.1f %-12s | %7s %7s %s\n", kLayouts[i].label,
                   sm.layers / GiB, sm.extras / GiB, (sm.layers + sm.extras) / GiB, sm.transient / GiB,
                   sm.state / GiB, sm.total / GiB, sm.fits ? "fits" : "does not fit",
                   fmt("%.1f", sm.state_dist / GiB).c_str(), fmt("%.1f", sm.total_dist / GiB).c_str(),
                   !std::isfinite(sm.total_dist) ? "-" : sm.fits_dist ? "fits" : "does not fit");
            if (sm.fits_dist && !sm.fits) only_dist += std::string(only_dist.empty() ? "" : ", ") + kLayouts[i].label;
        }
        if (!only_dist.empty()) printf("    fits only with the distributed optimizer: %s\n", only_dist.c_str());
    }

    print_cp_table(all, o);
    print_zb_table(all, o);

    printf("\nFLOPs per iteration (Appendix A) and Table 5 (peak %.0f TFLOP/s per GPU)\n", o.peak / 1e12);
    printf("  %-8s %10s %10s %10s %7s %7s\n", "model", "Eq.7 model", "Eq.8 sel.", "full rec.", "+sel", "+full");
    for (const Result& r : all)
        printf("  %-8s %10.3e %10.3e %10.3e %6.1f%% %6.1f%%\n", r.spec.name.c_str(), r.flops_model, r.flops_sel,
               r.flops_full, 100 * (r.flops_sel / r.flops_model - 1), 100 * (r.flops_full / r.flops_model - 1));
    printf("\n  %-8s %5s | %8s %6s %6s | %8s %6s %6s | %6s | %s\n", "model", "GPUs", "SP+sel s", "MFU", "HFU",
           "full s", "MFU", "HFU", "gain", "paper (MFU, HFU, gain)");
    for (const Result& r : all) {
        const ModelSpec& m = r.spec;
        std::string paper = m.paper ? fmt("%.1f%%, ", m.paper->table5_mfu) + fmt("%.1f%%, ", m.paper->table5_hfu) +
                                          fmt("%.1f%%", m.paper->table5_gain)
                            : !m.paper_quote.empty() ? m.paper_quote
                                                     : std::string("-");
        printf("  %-8s %5.0f | %8s %6s %6s | %8s %6s %6s | %6s | %s\n", m.name.c_str(), m.gpus(),
               fmt("%.2f", m.iter_selective).c_str(), fmt("%.1f%%", r.mfu_sel).c_str(),
               fmt("%.1f%%", r.hfu_sel).c_str(), fmt("%.2f", m.iter_full).c_str(), fmt("%.1f%%", r.mfu_full).c_str(),
               fmt("%.1f%%", r.hfu_full).c_str(), fmt("%.1f%%", r.gain).c_str(), paper.c_str());
    }
    printf("  MFU = Eq. 7 / time / (peak x GPUs); HFU = Eq. 8 (selective) or Eq. 7 + one more forward (full).\n");
}

// ---- JSON output ---------------------------------------------------------------------------------------
// A minimal writer: keys and values in order, commas and indentation handled here.
struct Json {
    std::string out;
    std::vector<bool> first{true};
    int depth = 0;
    void sep() {
        if (!first.back()) out += ",";
        first.back() = false;
        if (!out.empty()) out += "\n" + std::string(2 * depth, ' ');
    }
    bool pending_value = false;  // a key was written: the value that follows needs no separator
    void key(const char* k) {
        sep();
        out += "\"" + std::string(k) + "\": ";
        pending_value = true;
    }
    void value_prefix() {
        if (pending_value) {
            pending_value = false;
        } else {
            sep();
        }
    }
    void open(char c) {
        value_prefix();
        out += c;
        first.push_back(true);
        depth++;
    }
    void close(char c) {
        bool empty = first.back();
        first.pop_back();
        depth--;
        if (!empty) out += "\n" + std::string(2 * depth, ' ');
        out += c;
    }
    void num(double v) {
        value_prefix();
        if (!std::isfinite(v)) {
            out += "null";
            return;
        }
        char buf[64];
        snprintf(buf, sizeof buf, "%.10g", v);
        out += buf;
    }
    void str(const std::string& s) {
        value_prefix();
        out += "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += "\"";
    }
    void boolean(bool b) {
        value_prefix();
        out += b ? "true" : "false";
    }
    void kv(const char* k, double v) { key(k), num(v); }
    void kv(const char* k, const std::string& v) { key(k), str(v); }
    void kv(const char* k, const char* v) { key(k), str(v); }
    void kvb(const char* k, bool v) { key(k), boolean(v); }
};

void print_json(const std::vector<Result>& rs, const Options& o) {
    Json j;
    j.open('{');
    j.kv("paper", "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models");
    j.kv("bytes_per_activation", o.d);
    j.kv("attention", attention_name(o.attention));  // of the per-GPU totals' first six layouts
    j.kv("cp", o.cp);                                 // context-parallel size of the per-GPU totals
    j.kv("param_dtype", o.bf16_states ? "bf16" : "fp32");
    j.kv("bytes_per_param_override", o.bytes_per_param);
    j.kv("gpu_memory_gib", o.gpu_mem_gib);
    j.kv("peak_flops_per_gpu", o.peak);
    j.key("models");
    j.open('[');
    for (const Result& r : rs) {
        const ModelSpec& m = r.spec;
        j.open('{');
        j.kv("name", m.name);
        j.kv("paper_config", m.paper ? "Table 3" : !m.paper_quote.empty() ? "530B at data-parallel 8 (abstract)" : "custom");
        j.key("config");
        j.open('{');
        j.kv("heads", m.a), j.kv("hidden", m.h), j.kv("layers", m.L), j.kv("seq", m.s), j.kv("vocab", m.v);
        j.kv("tp", m.t), j.kv("cp", m.c), j.kv("pp", m.p), j.kv("interleave", m.m), j.kv("dp", m.dp);
        j.kv("gpus", m.gpus());
        j.kv("micro_batch", m.b), j.kv("global_batch", m.B), j.kv("params", r.params);
        j.close('}');
        j.key("table2_bytes_per_layer");
        j.open('[');
        for (int i = 0; i < kTable2Rows; i++) {
            j.open('{');
            j.kv("configuration", table2_row_name((Table2Row)i));
            j.kv("formula", table2_row_formula((Table2Row)i));
            j.kv("bytes", r.table2[i]);
            j.kv("flash_formula", table2_flash_formula((Table2Row)i));
            j.kv("flash_bytes", r.table2_flash[i]);
            j.close('}');
        }
        j.close(']');
        j.key("layer_bytes");
        j.open('{');
        for (int i = 0; i < kNumLayouts; i++) j.kv(kLayouts[i].key, r.layer[i]);
        j.close('}');
        j.key("figure7_percent_of_tp");
        j.open('{');
        j.kv("five_as_over_h", r.five_as_h);
        for (int i = 0; i < 4; i++) j.kv(kLayouts[kFig7Layouts[i]].key, r.fig7[i]);
        j.kv("four_a_over_h", r.four_a_h);
        j.kv(kLayouts[kTPFlash].key, r.fig7_flash[0]), j.kv(kLayouts[kTPSPFlash].key, r.fig7_flash[1]);
        j.close('}');
        j.kv("selective_saving_percent", 100 * r.saving_sel);
        j.kv("selective_saving_percent_plain_tp", 100 * r.saving_sel_tp);
        j.key("pipeline_first_stage");
        j.open('{');
        j.kv("schedule", pipe_schedule_name(m.schedule));
        j.kv("microbatches", r.pipe.microbatches), j.kv("warmup_forwards", r.pipe.warmup);
        j.kv("in_flight_chunks", r.pipe.in_flight), j.kv("layers_per_chunk", r.pipe.chunk_layers);
        j.kv("in_flight_layers", r.pipe.in_flight_layers), j.kv("paper_in_flight_layers", r.pipe.paper_layers);
        j.kv("embedding_masks_in_flight", r.pipe.embed_in_flight), j.kv("ideal_bubble", r.pipe.bubble);
        j.close('}');
        j.key("first_stage_params_per_gpu");
        j.open('{');
        j.kv("layers", r.stage_params.layers), j.kv("layer_params", r.stage_params.layer_params);
        j.kv("word_embedding", r.stage_params.word_embedding);
        j.kv("position_embedding", r.stage_params.position_embedding), j.kv("final_ln", r.stage_params.final_ln);
        j.kv("total", r.stage_params.total());
        j.close('}');
        j.kv("bytes_per_param", r.bytes_per_param);
        j.kv("bytes_per_param_distributed_optimizer", r.bytes_per_param_dist);
        j.key("first_stage_memory_bytes");
        j.open('{');
        j.kv("interleave_factor", r.interleave);
        for (int i = 0; i < kNumLayouts; i++) {
            const StageMemory& sm = r.stage[i];
            j.key(kLayouts[i].key);
            j.open('{');
            j.kv("layers", sm.layers), j.kv("outside_layers", sm.extras);
            j.kv("activations", sm.layers + sm.extras), j.kv("rebuilt_layer", sm.transient);
            j.kv("model_states", sm.state), j.kv("total", sm.total), j.kvb("fits", sm.fits);
            j.kv("model_states_distributed_optimizer", sm.state_dist);
            j.kv("total_distributed_optimizer", sm.total_dist);
            if (std::isfinite(sm.total_dist)) j.kvb("fits_distributed_optimizer", sm.fits_dist);
            else j.key("fits_distributed_optimizer"), j.num(NAN);
            j.close('}');
        }
        j.close('}');
        if (!r.zb_rows.empty()) {
            j.key("zero_bubble");
            j.open('{');
            j.key("times_f_b_w");
            j.open('[');
            for (double t : o.pipe_times) j.num(t);
            j.close(']');
            j.kv("layout", kLayouts[kZBLayout].key);
            j.key("schedules");
            j.open('[');
            for (const ZBRow& row : r.zb_rows) {
                j.open('{');
                j.kv("schedule", bubble_schedule_name(row.schedule));
                j.kv("bubble", row.bubble), j.kv("bubble_rate", row.rate), j.kv("idle_share", row.idle_share);
                j.kv("first_stage_in_flight", row.mem.in_flight), j.kv("layers_bytes", row.mem.layers_at_peak);
                j.kv("w_input_bytes", row.mem.w_inputs), j.kv("after_b_bytes", row.mem.after_b);
                j.kv("peak_bytes", row.mem.peak), j.kv("outside_layers_bytes", row.extras);
                j.kv("rebuilt_layer_bytes", row.transient), j.kv("model_states_bytes", row.state);
                j.kv("total_bytes", row.total), j.kvb("fits", row.fits);
                j.close('}');
            }
            j.close(']');
            j.close('}');
        }
        if (!r.cp_rows.empty()) {
            j.key("context_parallel");
            j.open('[');
            for (const CPRow& row : r.cp_rows) {
                j.open('{');
                j.kv("seq", row.s), j.kv("cp", row.c), j.kv("gpus", row.gpus), j.kv("tokens_per_gpu", row.tokens);
                j.kv("activations_tp_flash", row.acts_tp), j.kv("activations_tp_sp_flash", row.acts_tp_sp);
                j.kv("kv_forward_bytes_per_layer", row.kv_fwd), j.kv("kv_backward_bytes_per_layer", row.kv_bwd);
                j.kv("tp_sp_forward_bytes_per_layer", row.tp_fwd);
                j.close('}');
            }
            j.close(']');
        }
        j.key("flops_per_iteration");
        j.open('{');
        j.kv("model_eq7", r.flops_model), j.kv("hardware_selective_eq8", r.flops_sel);
        j.kv("hardware_full_recompute", r.flops_full);
        j.close('}');
        j.key("utilization");
        j.open('{');
        j.kv("iter_seconds_selective_sp", m.iter_selective), j.kv("iter_seconds_full", m.iter_full);
        j.kv("mfu_selective_sp_percent", r.mfu_sel), j.kv("hfu_selective_sp_percent", r.hfu_sel);
        j.kv("mfu_full_percent", r.mfu_full), j.kv("hfu_full_percent", r.hfu_full);
        j.kv("throughput_gain_percent", r.gain);
        if (m.paper) {
            j.kv("paper_mfu_percent", m.paper->table5_mfu), j.kv("paper_hfu_percent", m.paper->table5_hfu);
            j.kv("paper_gain_percent", m.paper->table5_gain);
        } else if (!m.paper_quote.empty()) {
            j.kv("paper_quote", m.paper_quote);
        }
        j.close('}');
        j.close('}');
    }
    j.close(']');
    j.close('}');
    printf("%s\n", j.out.c_str());
}

// ---- Figure 7 chart ------------------------------------------------------------------------------------
void write_chart(const std::vector<Result>& rs, const Options& o) {
    BarChart c;
    c.title = "Figure 7: activation memory per transformer layer";
    char sub[160];
    const ModelSpec& m0 = rs[0].spec;
    snprintf(sub, sizeof sub, "as %% of the tensor-parallel baseline; Table 2 formulas, t = %d, s = %.0f, d = %d", m0.t,
             m0.s, o.d);
    c.subtitle = sub;
    c.y_label = "% of TP baseline";
    c.x_label = "model (Table 3)";
    for (const Result& r : rs)
        if (!r.spec.same_layers_as_previous) c.groups.push_back(r.spec.name);
    for (int i = 0; i < 4; i++) {
        c.series.push_back(kFig7Names[i]);
        std::vector<double> row;
        for (const Result& r : rs)
            if (!r.spec.same_layers_as_previous) row.push_back(r.fig7[i]);
        c.values.push_back(row);
    }
    c.y_max = 110;
    c.reference_lines = {100};
    c.reference_labels = {"TP baseline = 100%"};
    std::string err;
    if (!write_bar_chart_png(c, o.chart, &err)) mm_fatal("--chart: %s", err.c_str());
    if (!o.json) printf("\nFigure 7 chart written to %s\n", o.chart.c_str());
}

}  // namespace

// The runs with a measured step (Table 5, the 530B run at dp 8) as tools/beyond_paper.h takes them.
std::vector<BeyondModel> beyond_models(const std::vector<Result>& rs) {
    std::vector<BeyondModel> out;
    for (const Result& r : rs) {
        const ModelSpec& m = r.spec;
        if (!std::isfinite(m.iter_selective) || m.c != 1) continue;  // costs need the measured step
        BeyondModel b;
        b.name = m.name;
        b.shape = model_input(m, kLayouts[0], 2, Attention::Unfused, 1);
        b.vocab = m.v, b.dp = m.dp, b.M = r.pipe.microbatches, b.global_batch = m.B, b.schedule = m.schedule;
        b.in_flight = r.pipe.in_flight, b.embed_in_flight = r.pipe.embed_in_flight, b.iter_seconds = m.iter_selective;
        out.push_back(b);
    }
    return out;
}

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    std::vector<ModelSpec> models = select_models(o);
    std::vector<Result> results;
    for (const ModelSpec& m : models) {
        if ((int)m.a % m.t != 0)
            fprintf(stderr, "warning: %s: %.0f heads do not divide by t = %d\n", m.name.c_str(), m.a, m.t);
        if (m.c > 1 && std::fmod(m.s, 2.0 * m.c) != 0)
            fprintf(stderr, "warning: %s: s = %.0f does not cut into 2c = %d equal chunks\n", m.name.c_str(), m.s, 2 * m.c);
        if ((int)m.L % m.p != 0)
            fprintf(stderr, "warning: %s: %.0f layers do not divide by p = %d\n", m.name.c_str(), m.L, m.p);
        // The schedule needs whole micro-batches and a layout it can run (pipe_schedule_problem's words).
        const double M = m.microbatches();
        if (M < 1 || M != std::floor(M))
            mm_fatal("%s: the global batch %.0f is not a whole number of micro-batches of %.0f sequences on each "
                     "of %d data-parallel ranks (give --global-batch a multiple of %.0f)",
                     m.name.c_str(), m.B, m.b, m.dp, m.b * m.dp);
        const std::string problem = pipe_schedule_problem(m.schedule, m.p, (int)M, m.m);
        if (!problem.empty()) mm_fatal("%s: %s", m.name.c_str(), problem.c_str());
        if (std::fmod(m.L / m.p, m.m) != 0)
            fprintf(stderr, "warning: %s: %.0f layers per stage do not divide into m = %d chunks\n", m.name.c_str(),
                    m.L / m.p, m.m);
        if (m.schedule != PipeSchedule::AFAB && M < m.p)
            fprintf(stderr, "note: %s: %.0f micro-batches are fewer than p = %d: the first stage holds %.0f, not "
                            "the paper's p (counted from the schedule)\n", m.name.c_str(), M, m.p, M);
        results.push_back(compute(m, o));
    }
    if (o.json) print_json(results, o);
    else print_text(results, o);
    if (!o.chart.empty()) write_chart(results, o);
    if (!o.json) print_beyond_paper(beyond_models(results), o.gpu_mem_gib * GiB);  // tools/beyond_paper.h
    std::string err;
    if (!o.beyond_chart.empty() && !write_beyond_paper_chart(beyond_models(results), o.gpu_mem_gib * GiB, o.beyond_chart, &err))
        mm_fatal("--beyond-chart: %s", err.c_str());
    if (!o.beyond_chart.empty() && !o.json) printf("\nthe techniques' memory written to %s\n", o.beyond_chart.c_str());
    return 0;
}
