// offload_schedule.cu — the in-flight offloading policy and its counts over a stage's schedule (see the header).
#include "offload_schedule.h"

#include <algorithm>
#include <utility>
#include "zero_bubble_schedule.h"

std::vector<PipeOp> offload_stage_ops(PipeSchedule s, int p, int rank, int M, int chunks) {
    if (p > 1) return pipe_schedule(s, p, rank, M, chunks);
    std::vector<PipeOp> ops;
    for (int j = 0; j < M; j++) ops.push_back({PipeOp::Forward, j, 0}), ops.push_back({PipeOp::Backward, j, 0});
    return ops;
}

std::vector<int> offload_last_stage_keep(PipeSchedule s, int p, int M, int chunks) {
    return pipe_in_flight_at_peak(offload_stage_ops(s, p, p - 1, M, chunks), chunks);
}

std::vector<std::vector<bool>> offload_in_flight_plan(const std::vector<PipeOp>& ops, int M, int chunks,
                                                      const std::vector<int>& keep) {
    std::vector<std::vector<bool>> plan((size_t)M, std::vector<bool>((size_t)chunks, false));
    std::vector<int> resident((size_t)chunks, 0);
    for (const PipeOp& op : ops) {
        const size_t c = (size_t)op.chunk;
        if (op.kind == PipeOp::Forward) {
            if (resident[c] >= keep[c]) plan[(size_t)op.microbatch][c] = true;
            else resident[c]++;
        } else if (op.kind == PipeOp::Backward && !plan[(size_t)op.microbatch][c]) {
            resident[c]--;  // its activations leave with its B (a zero-bubble W keeps only its own copies)
        }
    }
    return plan;
}

OffloadScheduleCounts offload_schedule_counts(const std::vector<PipeOp>& ops, bool zero_bubble, int chunks,
                                              int layers_per_chunk, const std::function<bool(int, int, int)>& moved) {
    OffloadScheduleCounts out;
    out.device.assign((size_t)chunks, std::vector<int>((size_t)layers_per_chunk, 0));
    out.host = out.device;
    const int peak = zero_bubble ? zero_bubble_peak(ops).held : pipe_peak_in_flight(ops);
    auto moved_layers = [&](int j, int c) {
        int n = 0;
        for (int i = 0; i < layers_per_chunk; i++) n += moved(j, c, i) ? 1 : 0;
        return n;
    };
    std::vector<std::pair<int, int>> held;  // (micro-batch, chunk): forward run, backward not
    int in_flight = 0, on_host = 0;
    bool marked = false;
    for (const PipeOp& op : ops) {
        if (op.kind == PipeOp::Forward) {
            held.push_back({op.microbatch, op.chunk});
            const int n = moved_layers(op.microbatch, op.chunk);
            on_host += n, out.moved += n;
            out.host_peak = std::max(out.host_peak, on_host);
            if (++in_flight == peak && !marked) {  // the executor's moment (model/pipeline_step.cu)
                marked = true;
                for (const auto& jc : held)
                    for (int i = 0; i < layers_per_chunk; i++)
                        (moved(jc.first, jc.second, i) ? out.host : out.device)[(size_t)jc.second][(size_t)i] += 1;
            }
        } else if (op.kind == PipeOp::Backward) {
            held.erase(std::find(held.begin(), held.end(), std::make_pair(op.microbatch, op.chunk)));
            on_host -= moved_layers(op.microbatch, op.chunk);
            if (!zero_bubble) in_flight--;
        } else {
            in_flight--;  // a W: the micro-batch leaves the zero-bubble count
        }
    }
    return out;
}
