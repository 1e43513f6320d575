// schedule_kinds.h — the names that every pipeline schedule's ops are written in: which schedule, and one op.
//
// The paper's three schedules come first (parallel/pipeline_schedule.h: their orders, and the messages between
// stages). The zero-bubble schedules come after them (parallel/zero_bubble_schedule.h, beyond the paper), with
// the third kind of op they add. One enum for all six, so that the trainer, the tools and the tests name any
// schedule the same way, and a checkpoint keeps a schedule as its number (model/train_state.h): the order of
// the values is part of that format, and pipeline_schedule.cu tells the paper's from the later ones by it.
#pragma once

enum class PipeSchedule { AFAB, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleH2, ZeroBubbleV };
// "afab" | "1f1b" | "interleaved" | "zb-h1" | "zb-h2" | "zb-v": the trainer's --pipeline-schedule values.
inline const char* pipe_schedule_name(PipeSchedule s) {
    static const char* const names[] = {"afab", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"};
    return names[(int)s];
}

struct PipeOp {
    // WeightGrad: a zero-bubble schedule's W (its Backward is then B: zero_bubble_schedule.h).
    enum Kind { Forward, Backward, WeightGrad } kind;
    int microbatch;  // 0..M−1
    int chunk;       // 0..m−1 (virtual stage chunk·p + rank)
    bool operator==(const PipeOp& o) const { return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk; }
};
