// op_times.cu — --op-times (see op_times.h).
#include "op_times.h"

#include <algorithm>
#include <cstdio>

void op_times_begin_step(OpTimes& t, bool enabled, int step, int start_step, int last_step) {
    if (!enabled) return;
    if (t.first == 0) t.first = std::min(start_step + 2, last_step);
    t.timing = step >= t.first;
    if (t.timing) op_timer_start();
}

void op_times_end_step(OpTimes& t, double step_seconds) {
    if (!t.timing) return;
    for (const OpTime& o : op_timer_collect()) {
        auto it = std::find_if(t.totals.begin(), t.totals.end(), [&](const OpTime& x) { return x.name == o.name; });
        if (it == t.totals.end()) {
            t.totals.push_back(o);
        } else {
            it->calls += o.calls, it->ms += o.ms, it->flops += o.flops;
        }
    }
    op_timer_stop();
    t.timing = false;
    t.steps++;
    t.step_ms += step_seconds * 1e3;
}

std::string op_times_table(const OpTimes& t) {
    if (t.steps == 0) return "";
    std::string s;
    char b[256];
    snprintf(b, sizeof b,
             "op times (--op-times, rank 0): steps %d-%d, %.2f ms a step; per step, parts of an op indented under it\n"
             "  %-44s %7s %10s %7s %9s\n",
             t.first, t.first + t.steps - 1, t.step_ms / t.steps, "op", "calls", "ms", "share", "GFLOP/s");
    s += b;
    // Rows by time, each op followed by its parts (the scopes one level inside it), also by time.
    std::vector<const OpTime*> rows;
    for (const OpTime& o : t.totals) rows.push_back(&o);
    std::stable_sort(rows.begin(), rows.end(), [](const OpTime* a, const OpTime* b) { return a->ms > b->ms; });
    double top_ms = 0;
    auto print = [&](const OpTime& o) {
        const std::string name = o.name.substr(o.name.rfind('/') == std::string::npos ? 0 : o.name.rfind('/') + 1);
        char rate[32] = "";
        if (o.flops > 0 && o.ms > 0) snprintf(rate, sizeof rate, "%9.1f", o.flops / (o.ms * 1e-3) / 1e9);
        snprintf(b, sizeof b, "  %*s%-*s %7.1f %10.3f %6.1f%% %9s\n", 2 * o.depth, "", 44 - 2 * o.depth, name.c_str(),
                 (double)o.calls / t.steps, o.ms / t.steps, 100.0 * o.ms / t.step_ms, rate);
        s += b;
    };
    for (const OpTime* o : rows) {
        if (o->depth != 0) continue;
        top_ms += o->ms;
        print(*o);
        for (const OpTime* part : rows)
            if (part->depth == 1 && part->name.compare(0, o->name.size() + 1, o->name + "/") == 0) print(*part);
    }
    snprintf(b, sizeof b, "  %-44s %7s %10.3f %6.1f%%   (the rest of the step, communication included: %.3f ms)\n", "all ops", "", top_ms / t.steps,
             100.0 * top_ms / t.step_ms, (t.step_ms - top_ms) / t.steps);
    s += b;
    return s;
}
