// offload_schedule.h — activation offloading over a pipeline stage's schedule: which micro-batches the in-flight
// policy moves to host memory, and what the device and the host hold at the moment the memory report is taken.
// Pure host code on a stage's ops (pipeline_schedule.h), shared by the trainer (model/offload_model.cu, which
// moves the bytes) and the calculator (tools/beyond_paper.cu), so that the two count alike. Beyond the paper.
//
// The in-flight policy (the paper's future work on the first stage, §4.3: under 1F1B stage r holds p − r
// micro-batches): at each forward of micro-batch j on model chunk c, j stays on the device when fewer than
// keep[c] of chunk c's micro-batches are there already; otherwise all its layers of chunk c move to the host
// (and come back for its backward). With keep = the last stage's own counts every stage keeps on the device
// what the last one keeps.
#pragma once
#include <functional>
#include <vector>
#include "pipeline_schedule.h"

// The ops of one stage for M micro-batches: the schedule's at pp > 1, the accumulation loop (F0 B0 F1 B1 ...,
// 1F1B at one stage) at pp = 1.
std::vector<PipeOp> offload_stage_ops(PipeSchedule s, int p, int rank, int M, int chunks);
// The last stage's micro-batches in flight per chunk at its peak: the in-flight policy's default keep.
std::vector<int> offload_last_stage_keep(PipeSchedule s, int p, int M, int chunks);
// [micro-batch][chunk]: moved by the in-flight policy.
std::vector<std::vector<bool>> offload_in_flight_plan(const std::vector<PipeOp>& ops, int M, int chunks,
                                                      const std::vector<int>& keep);

// What a stage holds under a policy `moved(j, c, i)` (micro-batch j's i-th layer of chunk c goes to the host):
//   at the report's moment, the first forward that brings the stage to its peak (model/pipeline_step.cu's; under
//   a zero-bubble schedule, counted to the W), per chunk and layer, the micro-batches on the device and on the
//   host; over the step, the most layer-micro-batches on the host, and how many move out (and back) per step.
struct OffloadScheduleCounts {
    std::vector<std::vector<int>> device, host;  // [chunk][layer of the chunk]
    int host_peak = 0, moved = 0;
};
OffloadScheduleCounts offload_schedule_counts(const std::vector<PipeOp>& ops, bool zero_bubble, int chunks,
                                              int layers_per_chunk, const std::function<bool(int, int, int)>& moved);
