// pipeline_timeline.cu — the op timeline of a pipeline stage, its idle share, and the timed waits of
// --pipeline-op-times (see the header).
#include "pipeline_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include "../layers/trace.h"

// ---- --pipeline-op-times ---------------------------------------------------------------------------------------
std::string parse_pipe_op_times(const std::string& text, PipeOpTimes* out) {
    double v[3];
    const char* p = text.c_str();
    for (int i = 0; i < 3; i++) {
        char* end = nullptr;
        v[i] = strtod(p, &end);
        if (end == p || !(v[i] >= 0) || v[i] > 10000) break;
        p = end;
        if (i < 2 && *p++ != ':') break;
        if (i == 2 && *p == '\0') {
            if (v[0] + v[1] + v[2] <= 0) return "--pipeline-op-times " + text + ": every time is 0; give at least one op a time";
            *out = PipeOpTimes{v[0], v[1], v[2], true};
            return "";
        }
    }
    return "--pipeline-op-times expects F:B:W, three times in milliseconds from 0 to 10000 (e.g. 2:3:1.5), got '" + text + "'";
}

static void wait_until(double deadline_us) {
    // Sleep while more than 0.2 ms is left (a rank that shares a core with others leaves it to them), then poll.
    for (;;) {
        const double left = deadline_us - trace_now_us();
        if (left <= 0) return;
        if (left > 200) {
            const double s = (left - 150) * 1e-6;
            const timespec pause{(time_t)s, (long)((s - std::floor(s)) * 1e9)};
            nanosleep(&pause, nullptr);
        }
    }
}

static void host_wait(void* ms) { wait_until(trace_now_us() + *(const double*)ms * 1e3); }

void timed_wait(const Ctx& ctx, double ms) {
    if (ms <= 0) return;
    if (ctx.device != Device::CUDA) return wait_until(trace_now_us() + ms * 1e3);
    // The wait as a host function in stream order: the stream is busy for `ms` once it gets there. Its argument
    // must outlive the call: one slot per distinct time, kept for the run.
    static std::vector<double*> slots;
    double* slot = nullptr;
    for (double* s : slots)
        if (*s == ms) slot = s;
    if (!slot) slots.push_back(slot = new double(ms));
    CUDA_CHECK(cudaLaunchHostFunc(ctx.stream, host_wait, slot));
}

// ---- the timeline ----------------------------------------------------------------------------------------------
void StageTimeline::measure_clock(MPI_Comm pp) {
    if (measured_) return;
    MPI_Comm dup;  // a communicator of its own: its ping-pong tags meet no pipeline message
    MPI_CHECK(MPI_Comm_dup(pp, &dup));
    offset_ = clock_offset_to_rank0(dup);
    MPI_CHECK(MPI_Comm_free(&dup));
    measured_ = true;
}

void StageTimeline::begin_step(const Ctx& ctx) {
    if (open_) end_step(ctx);
    if (!summarized_) resolve(ctx);
    spans_.clear();
    open_ = true;
    if (ctx.device != Device::CUDA) return void(ready_ = trace_now_us());
    if (!ready_event_) CUDA_CHECK(cudaEventCreate(&ready_event_));
    CUDA_CHECK(cudaEventRecord(ready_event_, ctx.stream));
}

// P2PEvent's kinds are PipeExchangeEvent's, in the same order.
static std::vector<PipeExchangeEvent> as_record(std::vector<P2PEvent>& events) {
    std::vector<PipeExchangeEvent> out;
    for (const P2PEvent& e : events) out.push_back(PipeExchangeEvent{(PipeExchangeEvent::Kind)e.kind, e.peer, e.tag});
    events.clear();
    return out;
}
static_assert((int)P2PEvent::PostReceive == (int)PipeExchangeEvent::PostReceive && (int)P2PEvent::PostSend == (int)PipeExchangeEvent::PostSend &&
                  (int)P2PEvent::WaitReceive == (int)PipeExchangeEvent::WaitReceive && (int)P2PEvent::WaitSend == (int)PipeExchangeEvent::WaitSend,
              "the two event kinds name the same things");

void StageTimeline::record_start(Comm& pp) {
    recording_ = keep_record;
    if (!recording_) return;
    record_ = PipeStageRecord();
    exchanges_.clear();
    p2p_record(pp, &exchanges_);
}

void StageTimeline::record_stop(Comm& pp) {
    if (!recording_) return;
    p2p_record(pp, nullptr);
    record_.after = as_record(exchanges_);
    records_.push_back(record_);
    recording_ = false;
}

void StageTimeline::op_begin(const Ctx& ctx, const PipeOp& op) {
    if (recording_) record_.ops.push_back(PipeRecordedOp{op, as_record(exchanges_)});
    OpSpan s;
    s.op = op;
    if (ctx.device == Device::CUDA) {
        const size_t k = spans_.size() * 2;
        while (events_.size() < k + 2) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreate(&e));
            events_.push_back(e);
        }
        CUDA_CHECK(cudaEventRecord(events_[k], ctx.stream));
    } else {
        s.t0 = trace_now_us();
    }
    spans_.push_back(s);
}

void StageTimeline::op_end(const Ctx& ctx) {
    OpSpan& s = spans_.back();
    if (ctx.device == Device::CUDA) CUDA_CHECK(cudaEventRecord(events_[spans_.size() * 2 - 1], ctx.stream));
    else s.t1 = trace_now_us();
}

// CUDA: the spans' events in host time. An anchor event recorded now fires once the stream has done what was
// queued before it; the host's clock right after cudaEventSynchronize returns is its time (within the wake-up of
// the synchronization, a few µs), and every earlier event is the anchor's time less their distance.
void StageTimeline::resolve(const Ctx& ctx) {
    summarized_ = true;
    if (spans_.empty()) return;
    if (ctx.device == Device::CUDA) {
        cudaEvent_t anchor;
        CUDA_CHECK(cudaEventCreate(&anchor));
        CUDA_CHECK(cudaEventRecord(anchor, ctx.stream));
        CUDA_CHECK(cudaEventSynchronize(anchor));
        const double now = trace_now_us();
        for (size_t i = 0; i < spans_.size(); i++) {
            float ms0 = 0, ms1 = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms0, events_[2 * i], anchor));
            CUDA_CHECK(cudaEventElapsedTime(&ms1, events_[2 * i + 1], anchor));
            spans_[i].t0 = now - 1e3 * ms0, spans_[i].t1 = now - 1e3 * ms1;
        }
        float ms = 0;
        if (ready_event_) CUDA_CHECK(cudaEventElapsedTime(&ms, ready_event_, anchor));
        ready_ = ready_event_ ? now - 1e3 * ms : spans_[0].t0;
        CUDA_CHECK(cudaEventDestroy(anchor));
    }
    StepSpans st;
    st.ready = ready_ - offset_;
    st.first = INFINITY, st.last = -INFINITY;
    for (OpSpan& s : spans_) {
        s.t0 -= offset_, s.t1 -= offset_;  // on pipeline rank 0's clock
        const int k = s.op.kind == PipeOp::Forward ? 0 : s.op.kind == PipeOp::Backward ? 1 : 2;
        st.first = std::min(st.first, s.t0), st.last = std::max(st.last, s.t1);
        st.busy += s.t1 - s.t0, st.sum[k] += s.t1 - s.t0, st.count[k]++;
    }
    steps_.push_back(st);
    if (keep_spans) step_spans_.push_back(spans_);
}

void StageTimeline::end_step(const Ctx& ctx) {
    open_ = false;
    summarized_ = false;
    if (ctx.device != Device::CUDA) resolve(ctx);
}

void StageTimeline::flush(const Ctx& ctx) {
    if (!summarized_) resolve(ctx);
}

void StageTimeline::free_events() {
    for (cudaEvent_t e : events_) CUDA_CHECK(cudaEventDestroy(e));
    events_.clear();
    if (ready_event_) CUDA_CHECK(cudaEventDestroy(ready_event_));
    ready_event_ = nullptr;
}

// ---- the idle share --------------------------------------------------------------------------------------------
PipelineIdle pipeline_idle(const StageTimeline& t, Comm& pp, bool overlapped, size_t first_step) {
    // Every stage's summaries to every stage: 10 numbers per step (first, last, busy, sums, counts).
    constexpr int kFields = 9;
    const std::vector<StepSpans>& mine = t.steps();
    int n = (int)(mine.size() > first_step ? mine.size() - first_step : 0);
    int n_min = n;
    if (pp.size > 1) all_reduce_host(pp, &n_min, 1, MPI_INT, MPI_MIN, "all-reduce of the recorded steps");
    n = n_min;  // every stage recorded the same steps; a stage with fewer would be a bug upstream, the rest is cut
    std::vector<double> flat((size_t)n * kFields), all((size_t)n * kFields * (size_t)pp.size);
    for (int i = 0; i < n; i++) {
        const StepSpans& s = mine[first_step + (size_t)i];
        const double f[kFields] = {s.first, s.last, s.busy, s.sum[0], s.sum[1], s.sum[2], (double)s.count[0],
                                   (double)s.count[1], (double)s.count[2]};
        std::copy(f, f + kFields, flat.begin() + (long)i * kFields);
    }
    if (pp.size > 1) MPI_CHECK(MPI_Allgather(flat.data(), n * kFields, MPI_DOUBLE, all.data(), n * kFields, MPI_DOUBLE, pp.mpi));
    else all = flat;
    auto at = [&](int stage, int step, int field) { return all[((size_t)stage * n + step) * kFields + field]; };
    PipelineIdle out;
    out.steps = n;
    for (int i = 0; i < n; i++) {
        std::vector<double> ms(3, 0.0);
        for (int k = 0; k < 3; k++) {
            double sum = 0, cnt = 0;
            for (int q = 0; q < pp.size; q++) sum += at(q, i, 3 + k), cnt += at(q, i, 6 + k);
            ms[(size_t)k] = cnt > 0 ? sum / cnt / 1e3 : 0;
        }
        out.step_op_ms.push_back(ms);
    }
    double sum[3] = {0, 0, 0}, cnt[3] = {0, 0, 0};
    for (int r = 0; r < pp.size; r++) {
        StageIdle s;
        s.stage = r;
        double own_sum[3] = {0, 0, 0}, own_cnt[3] = {0, 0, 0};
        for (int i = 0; i < n; i++) {
            double window;
            if (overlapped) {  // the stage's own period: to its next step's first op (the last step has none)
                if (i + 1 >= n) break;
                window = at(r, i + 1, 0) - at(r, i, 0);
            } else {
                double lo = INFINITY, hi = -INFINITY;
                for (int q = 0; q < pp.size; q++) lo = std::min(lo, at(q, i, 0)), hi = std::max(hi, at(q, i, 1));
                window = hi - lo;
            }
            s.share.push_back(window > 0 ? 1 - at(r, i, 2) / window : 0);
            for (int k = 0; k < 3; k++) own_sum[k] += at(r, i, 3 + k), own_cnt[k] += at(r, i, 6 + k);
        }
        for (int k = 0; k < 3; k++) {
            s.mean_op_ms[k] = own_cnt[k] > 0 ? own_sum[k] / own_cnt[k] / 1e3 : 0;
            sum[k] += own_sum[k], cnt[k] += own_cnt[k];
        }
        if (!s.share.empty()) {
            double total = 0;
            s.min_share = s.max_share = s.share[0];
            for (double v : s.share) total += v, s.min_share = std::min(s.min_share, v), s.max_share = std::max(s.max_share, v);
            s.mean_share = total / (double)s.share.size();
        }
        out.stages.push_back(s);
    }
    for (int k = 0; k < 3; k++) out.mean_op_ms[k] = cnt[k] > 0 ? sum[k] / cnt[k] / 1e3 : 0;
    return out;
}
