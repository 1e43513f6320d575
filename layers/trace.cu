// trace.cu — the timeline recorder (see trace.h): events kept per rank while recording, the clock offsets to
// rank 0, and the gather into one Chrome Trace Event Format document.
//
// Reading order: the clock and the state; recording events; the scopes; the clock offsets (ping-pong with
// rank 0); the recording window; serializing one rank's events and gathering them on rank 0.
#include "trace.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>
#include "runtime.h"

// ---- the clock and the state ---------------------------------------------------------------------------------
double trace_now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {
struct Event {
    char ph;           // 'X' complete, 's' / 'f' flow, 'i' instant
    int tid;
    const char* cat;
    std::string name;
    double ts, dur;    // this rank's clock, µs
    std::string args;  // the inside of a JSON object, or ""
    uint64_t id;       // flows
    int ev0 = -1, ev1 = -1;  // device events for ts and ts + dur (resolved at trace_stop), or -1
};
// One offset measurement of this rank's clock against rank 0's: offset = t_here - t_rank0, within
// `uncertainty`, sampled at rank 0's time `at`.
struct Offset {
    double offset = 0, uncertainty = 0, at = 0;
};
struct State {
    std::vector<Event> events;
    std::string process_name;
    int sort_index = 0;
    bool started = false, stopped = false;
    Offset start, stop;                      // this rank's two measurements
    std::vector<Offset> all_start, all_stop; // rank 0: every rank's
    double origin = 0;                       // rank 0's clock at trace_start
    const Ctx* ctx = nullptr;
    std::vector<cudaEvent_t> device_events;  // recorded by trace_point, reused from one recording to none after
    size_t device_used = 0;
    const char* label = nullptr;
    std::vector<std::pair<const void*, std::string>> groups;
};
State g;
}  // namespace

size_t trace_event_count() { return g.events.size(); }

// ---- recording events ---------------------------------------------------------------------------------------
void trace_event(TraceThread thread, const char* cat, const std::string& name, double ts_us, double dur_us,
                 const std::string& args_json) {
    if (!trace_recording()) return;
    g.events.push_back(Event{'X', (int)thread, cat, name, ts_us, std::max(0.0, dur_us), args_json, 0});
}

void trace_flow(char phase, uint64_t id, TraceThread thread, double ts_us, const std::string& args_json) {
    if (!trace_recording()) return;
    if (phase != 's' && phase != 'f') mm_fatal("trace_flow: phase '%c' is neither 's' nor 'f'", phase);
    g.events.push_back(Event{phase, (int)thread, "p2p", "message", ts_us, 0, args_json, id});
}

void trace_instant(const std::string& name, double ts_us, const std::string& args_json) {
    if (!trace_recording()) return;
    g.events.push_back(Event{'i', (int)TraceThread::Compute, "step", name, ts_us, 0, args_json, 0});
}

std::string trace_json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c == '\n') out += "\\n";
        else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else out += (char)c;
    }
    return out + "\"";
}

// ---- the device, the groups' names, the labels --------------------------------------------------------------
void trace_sync_context(const Ctx* ctx) { g.ctx = ctx; }

static bool on_device() { return g.ctx && g.ctx->device == Device::CUDA; }
cudaStream_t trace_compute_stream() { return on_device() ? g.ctx->stream : nullptr; }
TraceThread trace_host_thread() { return on_device() ? TraceThread::Host : TraceThread::Comm; }
cudaStream_t trace_comm_stream() { return on_device() ? g.ctx->comm_stream : nullptr; }

TracePoint trace_point(cudaStream_t stream) {
    TracePoint p;
    if (!on_device() || !stream) {
        p.host_us = trace_now_us();
        return p;
    }
    if (g.device_used == g.device_events.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        g.device_events.push_back(e);
    }
    p.event = (int)g.device_used++;
    CUDA_CHECK(cudaEventRecord(g.device_events[(size_t)p.event], stream));
    return p;
}

void trace_event_between(TraceThread thread, const char* cat, const std::string& name, TracePoint t0, TracePoint t1,
                         const std::string& args_json) {
    if (!trace_recording()) return;
    Event e{'X', (int)thread, cat, name, t0.host_us, std::max(0.0, t1.host_us - t0.host_us), args_json, 0};
    e.ev0 = t0.event, e.ev1 = t1.event;
    g.events.push_back(e);
}

void trace_flow_at(char phase, uint64_t id, TraceThread thread, TracePoint at, const std::string& args_json) {
    if (!trace_recording()) return;
    trace_flow(phase, id, thread, at.host_us, args_json);
    g.events.back().ev0 = at.event;
}

// The device events into the host's clock: after the device has done everything (one synchronization, outside
// the recorded steps), an anchor event recorded on the compute stream fires at once; the host's clock then is
// its time, and every event is that less its distance to the anchor (cudaEventElapsedTime, any stream).
static void resolve_device_events() {
    if (g.device_used == 0 || !on_device()) return;
    CUDA_CHECK(cudaStreamSynchronize(g.ctx->stream));
    if (g.ctx->comm_stream) CUDA_CHECK(cudaStreamSynchronize(g.ctx->comm_stream));
    cudaEvent_t anchor;
    CUDA_CHECK(cudaEventCreate(&anchor));
    CUDA_CHECK(cudaEventRecord(anchor, g.ctx->stream));
    CUDA_CHECK(cudaEventSynchronize(anchor));
    const double now = trace_now_us();
    auto at = [&](int ev) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g.device_events[(size_t)ev], anchor));
        return now - 1e3 * (double)ms;
    };
    for (Event& e : g.events) {
        if (e.ev0 < 0 && e.ev1 < 0) continue;
        const double t0 = e.ev0 >= 0 ? at(e.ev0) : e.ts, t1 = e.ev1 >= 0 ? at(e.ev1) : e.ts + e.dur;
        e.ts = t0, e.dur = std::max(0.0, t1 - t0), e.ev0 = e.ev1 = -1;
    }
    CUDA_CHECK(cudaEventDestroy(anchor));
    for (cudaEvent_t ev : g.device_events) CUDA_CHECK(cudaEventDestroy(ev));
    g.device_events.clear();
    g.device_used = 0;
}

void trace_name_group(const void* group, const std::string& name) {
    for (auto& e : g.groups)
        if (e.first == group) return void(e.second = name);
    g.groups.emplace_back(group, name);
}
const std::string& trace_group_name(const void* group) {
    static const std::string none;
    for (const auto& e : g.groups)
        if (e.first == group) return e.second;
    return none;
}

TraceLabel::TraceLabel(const char* what) {
    if (!trace_recording()) return;
    on_ = true;
    prev_ = g.label;
    g.label = what;
}
TraceLabel::~TraceLabel() {
    if (on_) g.label = prev_;
}
const char* trace_label() { return g.label; }

// ---- the scope -------------------------------------------------------------------------------------------------
// The synchronization at the start keeps work queued before the span (by code outside any span) out of it;
// the one at the end makes the end mean that the span's own work is done (trace.h).
TraceScope::TraceScope(TraceThread thread, const char* cat, std::string name, std::string args_json) {
    if (!trace_recording()) return;
    on_ = true;
    thread_ = thread;
    cat_ = cat;
    name_ = std::move(name);
    args_ = std::move(args_json);
    t0_ = trace_point(trace_compute_stream());
}

void TraceScope::add_args(const std::string& args_json) {
    if (!on_ || args_json.empty()) return;
    args_ += (args_.empty() ? "" : ",") + args_json;
}

TraceScope::~TraceScope() {
    if (!on_) return;
    if (g.stopped && t0_.event >= 0) return;  // recording stopped inside the span: its device start is gone
    const TracePoint t1 = trace_point(trace_compute_stream());
    // Recorded even if recording stopped inside the span: it began in the window.
    Event e{'X', (int)thread_, cat_, std::move(name_), t0_.host_us, std::max(0.0, t1.host_us - t0_.host_us), std::move(args_), 0};
    e.ev0 = t0_.event, e.ev1 = t1.event;
    g.events.push_back(std::move(e));
}

// ---- the clock offsets -----------------------------------------------------------------------------------------
// Rank 0 sends its time to rank r, r answers with its own at once, rank 0 notes when the answer came. The
// answer was taken somewhere within [t0, t1] on rank 0's clock; assuming the middle, offset = t_r - (t0 + t1)/2,
// wrong by at most (t1 - t0)/2. Of several rounds the shortest round trip is the least disturbed (a rank
// descheduled in between makes a long one). Each rank gets its own result back (MPI_Scatter); rank 0 keeps all.
constexpr int kRounds = 16;
constexpr int kTagPing = 7301, kTagPong = 7302;

static void measure_offsets(MPI_Comm world, Offset* mine, std::vector<Offset>* all) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    // Ranks on one node read one clock (std::chrono::steady_clock is the system's monotonic clock): their offset
    // is 0, exactly. A ping-pong on a loaded node would only add its own error (milliseconds when a rank waits
    // for a core), so it is measured only when the group spans nodes.
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    int on_node = 0, one_node = 0;
    MPI_CHECK(MPI_Comm_size(node, &on_node));
    MPI_CHECK(MPI_Comm_free(&node));
    one_node = on_node == size;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &one_node, 1, MPI_INT, MPI_LAND, world));
    MPI_CHECK(MPI_Barrier(world));
    std::vector<double> flat((size_t)size * 3, 0.0);  // offset, uncertainty, at
    if (one_node) {
        const double now = rank == 0 ? trace_now_us() : 0;
        for (int r = 0; r < size; r++) flat[(size_t)r * 3 + 2] = now;
    } else if (rank == 0) {
        for (int r = 1; r < size; r++) {
            double best = INFINITY;
            for (int k = 0; k < kRounds; k++) {
                double t0 = trace_now_us(), tr = 0;
                MPI_CHECK(MPI_Send(&t0, 1, MPI_DOUBLE, r, kTagPing, world));
                MPI_CHECK(MPI_Recv(&tr, 1, MPI_DOUBLE, r, kTagPong, world, MPI_STATUS_IGNORE));
                const double t1 = trace_now_us();
                if (t1 - t0 < best) {
                    best = t1 - t0;
                    flat[(size_t)r * 3 + 0] = tr - (t0 + t1) / 2;
                    flat[(size_t)r * 3 + 1] = (t1 - t0) / 2;
                    flat[(size_t)r * 3 + 2] = (t0 + t1) / 2;
                }
            }
        }
        flat[2] = trace_now_us();  // rank 0 against itself: offset 0, exactly
    } else if (!one_node) {
        for (int k = 0; k < kRounds; k++) {
            double t0 = 0;
            MPI_CHECK(MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kTagPing, world, MPI_STATUS_IGNORE));
            const double tr = trace_now_us();
            MPI_CHECK(MPI_Send(&tr, 1, MPI_DOUBLE, 0, kTagPong, world));
        }
    }
    double got[3];
    MPI_CHECK(MPI_Scatter(flat.data(), 3, MPI_DOUBLE, got, 3, MPI_DOUBLE, 0, world));
    *mine = Offset{got[0], got[1], got[2]};
    if (rank == 0) {
        all->resize((size_t)size);
        for (int r = 0; r < size; r++) (*all)[(size_t)r] = Offset{flat[(size_t)r * 3], flat[(size_t)r * 3 + 1], flat[(size_t)r * 3 + 2]};
    }
}

double clock_offset_to_rank0(MPI_Comm comm, double* uncertainty_us) {
    Offset mine;
    std::vector<Offset> all;
    measure_offsets(comm, &mine, &all);
    if (uncertainty_us) *uncertainty_us = mine.uncertainty;
    return mine.offset;
}

// ---- the recording window ----------------------------------------------------------------------------------------
void trace_set_process(const std::string& name, int sort_index) {
    g.process_name = name;
    g.sort_index = sort_index;
}

void trace_start(MPI_Comm world) {
    if (g.started) mm_fatal("trace_start: a run records one window of steps; recording was started already");
    measure_offsets(world, &g.start, &g.all_start);
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    g.origin = rank == 0 ? trace_now_us() : 0;
    MPI_CHECK(MPI_Bcast(&g.origin, 1, MPI_DOUBLE, 0, world));
    g.started = true;
    trace_detail::recording = true;
}

void trace_stop(MPI_Comm world) {
    if (!g.started || g.stopped) return;
    trace_detail::recording = false;
    resolve_device_events();
    measure_offsets(world, &g.stop, &g.all_stop);
    g.stopped = true;
}

// ---- one rank's events, and the gather -----------------------------------------------------------------------------
// A local time on rank 0's clock, from the origin: the offset interpolated between the two measurements (by
// rank 0's time; the first guess of it uses the start's offset, close enough for a drift of parts per million)
// when they differ by more than their uncertainties add up to (a drift the measurements can see); otherwise
// the one measured more tightly, for the whole window (on a loaded machine a ping-pong can take milliseconds,
// and interpolating towards a loose measurement would shift the events by its error).
static double to_rank0(double t) {
    const bool drift = std::fabs(g.stop.offset - g.start.offset) > g.start.uncertainty + g.stop.uncertainty;
    double off = g.stopped && !drift && g.stop.uncertainty < g.start.uncertainty ? g.stop.offset : g.start.offset;
    const double span = g.stop.at - g.start.at;
    if (g.stopped && drift && span > 0) {
        const double f = std::min(1.0, std::max(0.0, (t - g.start.offset - g.start.at) / span));
        off = g.start.offset + f * (g.stop.offset - g.start.offset);
    }
    return t - off - g.origin;
}

static std::string serialize_rank(int pid) {
    std::string s;
    char b[256];
    auto meta = [&](int tid, const char* what, const std::string& args) {
        snprintf(b, sizeof b, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{", pid, tid, what);
        s += b + args + "}},\n";
    };
    meta(0, "process_name", "\"name\":" + trace_json_string(g.process_name.empty() ? "rank " + std::to_string(pid) : g.process_name));
    meta(0, "process_sort_index", "\"sort_index\":" + std::to_string(g.sort_index));
    meta(0, "thread_name", "\"name\":\"compute\"");
    meta(1, "thread_name", "\"name\":\"communication\"");
    meta(0, "thread_sort_index", "\"sort_index\":0");
    meta(1, "thread_sort_index", "\"sort_index\":1");
    bool host_row = false;
    for (const Event& e : g.events) host_row = host_row || e.tid == (int)TraceThread::Host;
    if (host_row) meta(2, "thread_name", "\"name\":\"host communication\""), meta(2, "thread_sort_index", "\"sort_index\":2");
    for (const Event& e : g.events) {
        snprintf(b, sizeof b, "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"ts\":%.3f", e.ph, pid, e.tid, e.cat,
                 to_rank0(e.ts));
        s += b;
        if (e.ph == 'X') snprintf(b, sizeof b, ",\"dur\":%.3f", e.dur), s += b;
        if (e.ph == 's' || e.ph == 'f') snprintf(b, sizeof b, ",\"id\":%llu", (unsigned long long)e.id), s += b;
        if (e.ph == 'f') s += ",\"bp\":\"e\"";
        if (e.ph == 'i') s += ",\"s\":\"t\"";
        s += ",\"name\":" + trace_json_string(e.name);
        if (!e.args.empty()) s += ",\"args\":{" + e.args + "}";
        s += "},\n";
    }
    return s;
}

static std::string offsets_json(const std::vector<Offset>& all) {
    std::string s = "[";
    char b[128];
    for (size_t r = 0; r < all.size(); r++) {
        snprintf(b, sizeof b, "%s{\"rank\":%zu,\"offset_us\":%.3f,\"uncertainty_us\":%.3f}", r ? "," : "", r, all[r].offset,
                 all[r].uncertainty);
        s += b;
    }
    return s + "]";
}

bool trace_gather_json(MPI_Comm world, const std::string& other_data_json, std::string* doc, std::string* err) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    if (g.started) trace_stop(world);
    const std::string mine = serialize_rank(rank);
    // MPI counts are ints: every rank's part, and their sum, must stay under 2^31 bytes. Rank 0 decides for all.
    long long len = (long long)mine.size();
    std::vector<long long> lens((size_t)size);
    MPI_CHECK(MPI_Gather(&len, 1, MPI_LONG_LONG, lens.data(), 1, MPI_LONG_LONG, 0, world));
    long long total = 0;
    for (long long l : lens) total += l;
    int fits = rank != 0 || total < INT_MAX;
    MPI_CHECK(MPI_Bcast(&fits, 1, MPI_INT, 0, world));
    if (!fits) {
        *err = "--trace: the recorded events take " + std::to_string(total / 1000000) + " MB, more than one MPI gather "
               "moves (2 GB); record fewer steps (--trace-steps)";
        return false;
    }
    std::vector<int> counts((size_t)size), displs((size_t)size);
    for (int r = 0; r < size && rank == 0; r++) {
        counts[(size_t)r] = (int)lens[(size_t)r];
        displs[(size_t)r] = r ? displs[(size_t)r - 1] + counts[(size_t)r - 1] : 0;
    }
    std::string all(rank == 0 ? (size_t)total : 0, '\0');
    MPI_CHECK(MPI_Gatherv(mine.data(), (int)mine.size(), MPI_CHAR, rank == 0 ? &all[0] : nullptr, counts.data(), displs.data(),
                          MPI_CHAR, 0, world));
    if (rank != 0) return true;
    // The last event's ",\n" closes nothing: drop it.
    while (!all.empty() && (all.back() == '\n' || all.back() == ',')) all.pop_back();
    std::string other = other_data_json;
    other += std::string(other.empty() ? "" : ",") + "\"clock\":\"std::chrono::steady_clock of each rank, shifted to rank 0's\"";
    other += ",\"clock_offsets_start\":" + offsets_json(g.all_start);
    other += ",\"clock_offsets_stop\":" + offsets_json(g.all_stop);
    *doc = "{\"traceEvents\":[\n" + all + "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{" + other + "}}\n";
    return true;
}
