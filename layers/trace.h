// trace.h — a timeline of training steps in the Chrome Trace Event Format (the trainer's --trace FILE.json),
// loadable in Perfetto (ui.perfetto.dev) or chrome://tracing, and drawn by tools/draw_pipeline.
//
// Each rank records its own events while recording is on: complete events ("ph":"X": a name, a start and a
// duration in µs) on two rows of its process, the compute thread (tid 0: the schedule's ops, the optimizer,
// evaluation) and the communication thread (tid 1: exchanges, collectives), plus flow events ("ph":"s"/"f")
// from a point-to-point send to its receive. At the end rank 0 gathers every rank's events, shifted to its
// own clock, into one document (trace_gather_json; train/bookkeeping.cu writes it).
//
// What a span means. On the CPU every op is synchronous, so [start, end) is the op, on the host's clock. On a
// GPU the host only queues the work: a span there is two points on a stream (TracePoint: an event recorded on
// the stream, the host never waits for it), the start when the stream reaches the work queued first in the
// span, the end when it has done the last; the events are turned into the host's clock when recording stops
// (trace_stop: against an anchor event, after one synchronization). The compute spans are on the device
// context's stream (trace_sync_context), an exchange or a collective on the stream it runs on (ctx.stream, or
// comm_stream for exchange_start and the overlapped all-gather): recording changes neither the order nor the
// overlap of the streams, so a W that runs while an exchange is in flight on the other stream shows as
// overlapping it (verified on the emulated device: test/train/trace_gpu_check.py).
//
// Cost when not recording: trace_recording() is one test of a flag; TraceScope tests it and stores nothing.
// The caller's arguments are still built (a short std::string such as "F3.0" fits in its own bytes, no
// allocation); where building them would cost, test trace_recording() first.
//
// A leaf module: it includes layers/runtime.h only (streams and events), and MPI for the clocks and the gather;
// nothing of the model or of the communicators.
#pragma once
#include <mpi.h>
#include <cstdint>
#include <string>
#include "runtime.h"  // cudaStream_t

// Compute: the schedule's ops (the compute stream on a GPU); Comm: exchanges and collectives (on a GPU, timed on
// the streams they run on); Host: on a GPU, what the host does with the communicators on its own clock (the step's
// host scalars, posting an exchange) — on the CPU that is the Comm row, where everything is the host's.
enum class TraceThread : int { Compute = 0, Comm = 1, Host = 2 };
// The row of a host-side communication event: Host on a CUDA context, Comm otherwise.
TraceThread trace_host_thread();

namespace trace_detail {
inline bool recording = false;  // between trace_start and trace_stop
}
// True while the current step is being recorded (cheap: one flag test).
inline bool trace_recording() { return trace_detail::recording; }
// This rank's clock in µs (std::chrono::steady_clock), the one all events use.
double trace_now_us();

// One complete event ("ph":"X") on this rank; args_json: "" or the inside of a JSON object, e.g. "\"bytes\":128".
// Recorded only while recording.
void trace_event(TraceThread thread, const char* cat, const std::string& name, double ts_us, double dur_us,
                 const std::string& args_json = "");
// A flow event from a send to its receive: phase 's' on the sender, 'f' on the receiver, the same id on both;
// each binds to the event that encloses ts on its thread (the exchange). args_json as for trace_event.
void trace_flow(char phase, uint64_t id, TraceThread thread, double ts_us, const std::string& args_json = "");

// A moment on a stream: on a CUDA context (trace_sync_context) with a stream given, an event recorded on that
// stream now, its time read when recording stops; otherwise (no stream, a CPU context) the host's clock now.
struct TracePoint {
    double host_us = 0;
    int event = -1;  // index of a recorded device event, or -1
};
TracePoint trace_point(cudaStream_t stream);
// A complete event between two points (recorded only while recording), and a flow event at a point.
void trace_event_between(TraceThread thread, const char* cat, const std::string& name, TracePoint t0, TracePoint t1,
                         const std::string& args_json = "");
void trace_flow_at(char phase, uint64_t id, TraceThread thread, TracePoint at, const std::string& args_json = "");
// The device context's streams: compute (ctx.stream) and communication (comm_stream); nullptr on the CPU.
cudaStream_t trace_compute_stream();
cudaStream_t trace_comm_stream();
// An instant event ("ph":"i") on the compute thread: the start of a recorded step.
void trace_instant(const std::string& name, double ts_us, const std::string& args_json = "");

// RAII: records [construction, destruction) as one event when recording; no-op (no allocation) otherwise.
// With a CUDA device context (trace_sync_context) its two ends are points on the context's stream.
struct TraceScope {
    TraceScope(TraceThread thread, const char* cat, std::string name, std::string args_json = "");
    ~TraceScope();
    TraceScope(const TraceScope&) = delete;
    TraceScope& operator=(const TraceScope&) = delete;
    // More args, known only once the work has run (appended to those given at construction).
    void add_args(const std::string& args_json);

private:
    bool on_ = false;
    TraceThread thread_ = TraceThread::Compute;
    const char* cat_ = "";
    std::string name_, args_;
    TracePoint t0_;
};

// A few words on what the collectives issued while it lives are for ("the gradients' shards"), appended to
// their event names by the communicators' hooks. Only the pointer is kept: `what` must outlive the scope (a
// string literal). Nothing happens when not recording.
struct TraceLabel {
    explicit TraceLabel(const char* what);
    ~TraceLabel();
    TraceLabel(const TraceLabel&) = delete;
    TraceLabel& operator=(const TraceLabel&) = delete;

private:
    const char* prev_ = nullptr;
    bool on_ = false;
};
const char* trace_label();  // the innermost TraceLabel's words, or nullptr

// The device context whose streams the spans are timed on (nullptr, the default, or a CPU context: the host's
// clock). It must outlive the recording.
void trace_sync_context(const Ctx* ctx);

// A communicator's short name ("tp", "pp", ...), registered once by the trainer for each group of its process
// grid and shown in the collectives' event names; `group` is the Comm's address. "" when unregistered.
void trace_name_group(const void* group, const std::string& name);
const std::string& trace_group_name(const void* group);

// ---- the job's side (train/): this rank's row, the clocks, the recording window, the gather -------------------
// This rank's row in the file: its process name ("stage 1 / tp 0 / dp 0") and sort index.
void trace_set_process(const std::string& name, int sort_index);
// Start recording (collective over `world`, once per run). First each rank's clock offset to rank 0's is
// measured, so that the events can be shifted to rank 0's clock: rank 0 ping-pongs with each rank in turn for
// several rounds, and the round with the smallest round trip gives offset = t_remote - (t0 + t1) / 2, within
// half that round trip (t0, t1: rank 0's clock when it sent and when the reply came). When every rank is on one
// node they share the clock: the offsets are 0, exactly, and nothing is measured. Rank 0's clock at this
// moment is the file's time origin (ts 0).
void trace_start(MPI_Comm world);
// Stop recording (collective over `world`): the offsets are measured again, and the events shifted by the
// offset interpolated between the two measurements (clocks of different machines drift apart).
void trace_stop(MPI_Comm world);
// This rank's clock (trace_now_us) minus rank 0's of `comm`, measured as trace_start measures it (ping-pong with
// rank 0, the shortest of several round trips); *uncertainty_us: half that round trip. Collective over comm.
double clock_offset_to_rank0(MPI_Comm comm, double* uncertainty_us = nullptr);
// Every rank's events in one JSON document on rank 0 (`doc` stays empty on the others): {"traceEvents": [...],
// "displayTimeUnit": "ms", "otherData": {...}}, times in µs on rank 0's clock from the origin. other_data_json:
// the inside of the otherData object (the trainer's layout and steps); the clock offsets are added. Stops
// recording first if it is on. Collective; false on every rank (with `err`) when the events do not fit one
// MPI gather.
bool trace_gather_json(MPI_Comm world, const std::string& other_data_json, std::string* doc, std::string* err);
// Events recorded on this rank so far.
size_t trace_event_count();

// s as a JSON string literal, quotes included (for args).
std::string trace_json_string(const std::string& s);
