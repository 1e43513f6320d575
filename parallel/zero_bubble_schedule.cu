// zero_bubble_schedule.cu — ZB-H1 and ZB-H2 as units of ops (see the header).
#include "zero_bubble_schedule.h"

#include <algorithm>

int zero_bubble_weight_lag(PipeSchedule s, int p, int rank) {
    (void)p;
    return s == PipeSchedule::ZeroBubbleH2 ? 2 * rank : rank;
}

std::vector<std::vector<PipeOp>> zero_bubble_units(PipeSchedule s, int p, int rank, int M, int w) {
    const int d = zero_bubble_weight_lag(s, p, rank);
    std::vector<std::vector<PipeOp>> units;
    std::vector<PipeOp> due;  // W's that lead the next unit (run while its exchange is in flight)
    int next_w = 0;           // the next micro-batch whose W is due (W's run in micro-batch order)
    auto unit = [&](std::vector<PipeOp> ops) {
        ops.insert(ops.begin(), due.begin(), due.end());
        due.clear();
        units.push_back(ops);
    };
    for (int k = 0; k < w; k++) unit({{PipeOp::Forward, k, 0}});  // warm-up
    for (int k = 0; k < M - w; k++) {                             // steady state: F, B, then a W d behind
        if (s == PipeSchedule::ZeroBubbleH2) {  // (F, B) in one unit: see the header
            unit({{PipeOp::Forward, w + k, 0}, {PipeOp::Backward, k, 0}});
        } else {
            unit({{PipeOp::Forward, w + k, 0}});
            unit({{PipeOp::Backward, k, 0}});
        }
        if (k - d >= next_w) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    }
    for (int k = std::max(M - w, 0); k < M; k++) {  // cool-down: each B, then the next W
        unit({{PipeOp::Backward, k, 0}});
        if (next_w <= k) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    }
    while (next_w < M) due.push_back({PipeOp::WeightGrad, next_w++, 0});
    if (!due.empty()) units.push_back(due);  // the W's after the last B
    return units;
}

ZeroBubblePeak zero_bubble_peak(const std::vector<PipeOp>& ops) {
    ZeroBubblePeak now, most;
    for (const PipeOp& op : ops) {
        if (op.kind == PipeOp::Forward) now.saved++;
        if (op.kind == PipeOp::Backward) now.saved--, now.pending++;
        if (op.kind == PipeOp::WeightGrad) now.pending--;
        now.held = now.saved + now.pending;
        if (now.held > most.held) most = now;
    }
    return most;
}
