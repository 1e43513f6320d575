// pipeline_timeline.h — when each op of a pipeline step ran on this stage, the idle share of the step that
// follows from it (the measured bubble, paper §2), and the test mode that replaces every op's work by a timed
// wait (--pipeline-op-times). Beyond the paper's path: the executor (model/pipeline_step.cu) records, the
// trainer (train/bookkeeping.cu) and the tests read.
//
// One clock for every backend. On the CPU an op's span is the host's time around it; on CUDA it is two events
// recorded on ctx.stream around the op's work (the host only queues it), turned into host time afterwards
// against an anchor event: nothing is synchronized while the step runs, so timing does not change the overlap.
// The stages' clocks are aligned to pipeline rank 0's (clock_offset_to_rank0, layers/trace.h), measured once.
//
// Idle share. For each step, the window runs from the first op's start on any stage to the last op's end on
// any stage; a stage's idle share is 1 − its busy time / the window (tools/draw_pipeline and the formulas of
// recompute/formulas.h count the same). Under optimizer post-validation (model/post_validation.h) the steps of
// different stages overlap, so there the window is the stage's own period: from its first op of one step to its
// first op of the next. This measured share is the trainer's end line and bench/pipeline_bubble.sh's; it depends
// on the machine (its load, its clock), and no test's verdict reads it.
//
// The logical record (keep_record; test_pipeline_bubble): for each op, in the order the stage ran it, what the
// stage posted and waited for since its previous op (the exchanges' own record: parallel/point_to_point.h's
// p2p_record), and after its last op the same. No time in it: which messages each op waited for (and so which
// earlier ops of other stages), and before which op each send was posted. parallel/pipeline_simulation.h's
// pipe_replay_record runs it in virtual time with fixed op times: the executor's own bubble, apart from the
// machine.
#pragma once
#include <map>
#include <string>
#include <vector>
#include "../layers/runtime.h"
#include "../parallel/comm.h"
#include "../parallel/pipeline_schedule.h"
#include "../parallel/pipeline_simulation.h"
#include "../parallel/point_to_point.h"

// --pipeline-op-times F:B:W: milliseconds per op and micro-batch. Every op keeps its messages (the same tensors
// go to the same stages), but its work is a timed wait inside the op: F for a forward, B for a zero-bubble B,
// W for a W, and B + W for the backward of a schedule without W. The loss is 0 and the gradients are left as
// they are; the exchanges, the gradient synchronization and the optimizer step run for real.
struct PipeOpTimes {
    double f_ms = 0, b_ms = 0, w_ms = 0;
    bool on = false;
};
// "F:B:W" into *out; "" when it parses (three numbers >= 0, at most 10000, one of them > 0), else the problem.
std::string parse_pipe_op_times(const std::string& text, PipeOpTimes* out);
// A wait of `ms` milliseconds in ctx's stream order: on the CPU the host waits (it sleeps until 0.2 ms before
// the deadline, then polls the clock: ranks that share cores do not take each other's time); on CUDA a host
// function queued on ctx.stream does the same, so the stream is busy for that long.
void timed_wait(const Ctx& ctx, double ms);

// One op's span, in µs on this rank's clock (layers/trace.h's trace_now_us).
struct OpSpan {
    PipeOp op;
    double t0 = 0, t1 = 0;
};
// One step of one stage, in its summary: when its ops could start (ready: the step's set-up done, begin_step),
// the first op's start, the last op's end, the busy time, and the sums and counts of its
// F, B and W op times.
struct StepSpans {
    double ready = 0, first = 0, last = 0, busy = 0;
    double sum[3] = {0, 0, 0};
    int count[3] = {0, 0, 0};
};

// The op spans of this stage, step by step.
class StageTimeline {
public:
    // Start a step's record, right before its first op's exchange: that moment is the step's `ready` (the
    // previous step's CUDA events are read now: they are done by then).
    void begin_step(const Ctx& ctx);
    void op_begin(const Ctx& ctx, const PipeOp& op);
    void op_end(const Ctx& ctx);
    // The step in flight ends. On the CPU its spans are summed into steps() at once; on CUDA when the next step
    // begins or at flush (its events are read then: the host does not wait for the device at the step's end).
    void end_step(const Ctx& ctx);
    void flush(const Ctx& ctx);
    // Every step recorded since the last clear, summarized; the clock offset is applied (rank 0's clock).
    const std::vector<StepSpans>& steps() const { return steps_; }
    // The same steps' spans, op by op (kept only while keep_spans is set: tests and the bench replay them).
    const std::vector<std::vector<OpSpan>>& step_spans() const { return step_spans_; }
    void clear_steps() { steps_.clear(), step_spans_.clear(), records_.clear(); }
    // Forget the last step recorded (post-validation: a step's forwards and backwards run again after a rollback;
    // the first run's time is then idle time of the step that replaced it).
    void drop_last_step() {
        if (!summarized_) return void(summarized_ = true);  // (CUDA: not read yet)
        if (!steps_.empty()) steps_.pop_back();
        if (keep_spans && !step_spans_.empty()) step_spans_.pop_back();
        if (keep_record && !records_.empty()) records_.pop_back();
    }
    bool keep_spans = false;
    // The logical record (the top of this file), step by step, while keep_record is set. record_start: right
    // before the step's first exchange, on the pipeline's communicator; op_begin files what came since the last
    // op under the op; record_stop: after the step's last exchange.
    bool keep_record = false;
    void record_start(Comm& pp);
    void record_stop(Comm& pp);
    const std::vector<PipeStageRecord>& step_records() const { return records_; }
    // This rank's clock minus pipeline rank 0's, measured once (collective over the pipeline group).
    void measure_clock(MPI_Comm pp);
    void free_events();

private:
    void resolve(const Ctx& ctx);
    std::vector<OpSpan> spans_;
    std::vector<cudaEvent_t> events_;  // CUDA: two per span (begin, end), reused from step to step
    cudaEvent_t ready_event_ = nullptr;  // CUDA: ops_ready's
    double ready_ = 0;
    std::vector<StepSpans> steps_;
    std::vector<std::vector<OpSpan>> step_spans_;
    bool recording_ = false;
    std::vector<P2PEvent> exchanges_;  // the exchanges since the last op (recording)
    PipeStageRecord record_;        // the step's so far
    std::vector<PipeStageRecord> records_;
    bool open_ = false, summarized_ = true;
    double offset_ = 0;
    bool measured_ = false;
};

// Each stage's idle over the recorded steps, from every stage's summaries (collective over `pp`; every rank
// gets the whole table). overlapped: the steps overlap across stages (post-validation): each stage's window is
// its own period. Steps [first_step, end) of the record are used.
struct StageIdle {
    int stage = 0;
    std::vector<double> share;    // per step: 1 − busy / window
    double mean_share = 0;        // over those steps
    double min_share = 0, max_share = 0;
    double mean_op_ms[3] = {0, 0, 0};  // this stage's mean F, B, W op times
};
struct PipelineIdle {
    std::vector<StageIdle> stages;
    double mean_op_ms[3] = {0, 0, 0};  // over every stage's ops: the formula's T_F, T_B, T_W
    std::vector<std::vector<double>> step_op_ms;  // the same per step (3 each)
    int steps = 0;
};
PipelineIdle pipeline_idle(const StageTimeline& t, Comm& pp, bool overlapped, size_t first_step = 0);

// What the executor keeps on the model from step to step (GPT::pipe): the test mode's times, the timeline, and
// the tensors ZB-V's turn hands from one chunk to the other on rank p − 1 (by message tag).
struct PipelineRunState {
    PipeOpTimes op_times;
    StageTimeline timeline;
    std::map<int, Tensor> handoff;
    // Optimizer post-validation (model/post_validation.h): the step's loss stays on the head stage (no broadcast at
    // the step's end), and the tied embedding's sum starts as soon as the stage's part of it is final.
    bool post_validation = false;
    // The tied embedding's sum started early: this stage's part (a copy, sent) and the other end's (received).
    std::vector<float> embedding_sent, embedding_received;
    MPI_Request embedding_requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool embedding_started = false;
};
