// plot_log.cu — pictures of a training run from its --log file (one JSON object per line):
//   the loss curve (train and validation loss against the step), and
//   the memory report's per-tensor breakdown (one stacked bar per layer tensor group: measured bytes next to
//   the paper's formula), if the log holds a "memory_report" line.
//
//   build/plot_log build/train.jsonl --out-dir build/pictures   -> build/pictures/loss.png, memory.png
//
// A resumed run appends to its log, after a {"restart_after_step":N} line: the steps after N that the
// interrupted run had logged are run again, and only their last record counts (each step is plotted once).
//
// The log is the trainer's own simple format, so a few string searches read it; no JSON library needed.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>
#include "chart.h"
#include "../data/paths.h"

// The number after "key": in a JSON line, or NaN when the key is absent.
static double number_after(const std::string& line, const std::string& key, size_t from = 0) {
    size_t p = line.find("\"" + key + "\":", from);
    if (p == std::string::npos) return NAN;
    const char* at = line.c_str() + p + key.size() + 3;
    char* end = nullptr;
    const double x = strtod(at, &end);
    return end == at ? NAN : x;  // null (a skipped step's non-finite loss): no number
}

// The flat object that follows "key":{ ... } as (name, number) pairs, in order.
static std::vector<std::pair<std::string, double>> object_after(const std::string& line, const std::string& key) {
    std::vector<std::pair<std::string, double>> out;
    size_t p = line.find("\"" + key + "\":{");
    if (p == std::string::npos) return out;
    p += key.size() + 4;
    while (p < line.size() && line[p] != '}') {
        size_t q1 = line.find('"', p), q2 = line.find('"', q1 + 1);
        if (q1 == std::string::npos || q2 == std::string::npos) break;
        std::string name = line.substr(q1 + 1, q2 - q1 - 1);
        char* end = nullptr;
        double v = strtod(line.c_str() + q2 + 2, &end);
        out.push_back({name, v});
        p = (size_t)(end - line.c_str());
        if (p < line.size() && line[p] == ',') p++;
    }
    return out;
}

int main(int argc, char** argv) {
    std::string log, out_dir = ".";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out-dir") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: plot_log LOG.jsonl [--out-dir DIR]   writes DIR/loss.png and, with a memory report, DIR/memory.png\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "error: unknown flag %s (see --help)\n", argv[i]);
            return 2;
        } else log = argv[i];
    }
    if (log.empty()) {
        fprintf(stderr, "error: no log file given (the trainer writes one with --log FILE.jsonl)\n");
        return 2;
    }
    // Both paths before any work: the log readable, the output directory made and writable.
    std::string problem = input_file_problem("log", log);
    if (problem.empty()) problem = output_dir_problem("--out-dir", out_dir);
    if (!problem.empty()) {
        fprintf(stderr, "error: %s\n", problem.c_str());
        return 1;
    }
    std::ifstream in(log);
    if (!in) {
        fprintf(stderr, "error: cannot read %s\n", log.c_str());
        return 1;
    }
    // By step, so that a record logged again after a restart replaces the one before it.
    std::map<double, double> train_by_step, val_by_step;
    std::string memory_line, line;
    int restarts = 0;
    while (std::getline(in, line)) {
        double step = number_after(line, "step");
        const double restart = number_after(line, "restart_after_step");
        if (!std::isnan(restart)) {  // everything after the checkpoint's step is logged again
            restarts++;
            train_by_step.erase(train_by_step.upper_bound(restart), train_by_step.end());
            val_by_step.erase(val_by_step.upper_bound(restart), val_by_step.end());
        } else if (line.find("\"memory_report\"") != std::string::npos) memory_line = line;
        else if (!std::isnan(number_after(line, "train_loss"))) train_by_step[step] = number_after(line, "train_loss");
        else if (!std::isnan(number_after(line, "val_loss"))) val_by_step[step] = number_after(line, "val_loss");
    }
    LineSeries train{"train loss", {}, {}}, val{"val loss", {}, {}};
    for (const auto& kv : train_by_step) train.x.push_back(kv.first), train.y.push_back(kv.second);
    for (const auto& kv : val_by_step) val.x.push_back(kv.first), val.y.push_back(kv.second);
    if (train.x.empty() && val.x.empty()) {
        fprintf(stderr, "error: %s has no train_loss or val_loss lines\n", log.c_str());
        return 1;
    }
    std::string err;
    LinePlot p;
    p.title = "Loss";
    p.subtitle = log;
    p.x_label = "step";
    p.y_label = "cross-entropy (nats per token)";
    if (!train.x.empty()) p.series.push_back(train);
    if (!val.x.empty()) { p.series.push_back(val); p.series.back().name = "val loss"; }
    p.markers = train.x.size() < 60;
    std::string loss_png = out_dir + "/loss.png";
    if (!write_line_plot_png(p, loss_png, &err)) {
        fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }
    printf("wrote %s (%zu train points, %zu validation points%s)\n", loss_png.c_str(), train.x.size(), val.x.size(),
           restarts ? (", " + std::to_string(restarts) + " restart(s): steps logged again counted once").c_str() : "");

    if (!memory_line.empty()) {
        // Per saved tensor, a "measured" bar next to a "formula" bar: the picture of Table 2's terms.
        auto measured = object_after(memory_line, "tensors");
        auto formula = object_after(memory_line, "formula_tensors");
        BarChart c;
        char sub[256];
        snprintf(sub, sizeof sub, "s=%.0f b=%.0f h=%.0f a=%.0f t=%.0f sp=%s recompute=%s; layer 0 and outside the layers, one rank",
                 number_after(memory_line, "s"), number_after(memory_line, "b"), number_after(memory_line, "h"),
                 number_after(memory_line, "a"), number_after(memory_line, "t"),
                 memory_line.find("\"sp\":true") != std::string::npos ? "on" : "off",
                 memory_line.find("\"recompute\":\"selective\"") != std::string::npos ? "selective"
                 : memory_line.find("\"recompute\":\"full\"") != std::string::npos ? "full" : "none");
        c.title = "Saved activations: measured vs formula";
        c.subtitle = sub;
        c.series = {"measured", "paper's formula"};
        c.values.resize(2);
        c.y_label = "kB";
        c.width = 1700;
        std::map<std::string, double> fm(formula.begin(), formula.end());
        for (auto& kv : measured) {
            bool extra = kv.first.find("mean") != std::string::npos || kv.first.find("rstd") != std::string::npos ||
                         kv.first.rfind("ce_", 0) == 0;
            if (extra) continue;  // the paper ignores layer-norm and loss statistics
            std::string label = kv.first;  // keep labels short enough not to overlap: *_drop_mask -> *_dmask
            size_t d = label.find("_drop_mask");
            if (d != std::string::npos) label = label.substr(0, d) + "_dmask";
            c.groups.push_back(label);
            c.values[0].push_back(kv.second / 1e3);
            c.values[1].push_back(fm.count(kv.first) ? fm[kv.first] / 1e3 : NAN);
        }
        c.value_format = "";
        std::string mem_png = out_dir + "/memory.png";
        if (!write_bar_chart_png(c, mem_png, &err)) {
            fprintf(stderr, "error: %s\n", err.c_str());
            return 1;
        }
        printf("wrote %s (%zu tensors)\n", mem_png.c_str(), c.groups.size());
    }
    return 0;
}
