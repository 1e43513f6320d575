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
// The parts: this file (the options and the models to compute), calculator_results.cu (each model's numbers),
// calculator_print.cu (the tables, the JSON and the charts); memory_calculator.h is what they share.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layers/tensor.h"  // mm_fatal
#include "layers/model_shape.h"    // padded_vocab_for
#include "tools/memory_calculator.h"

namespace {

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


}  // namespace

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

