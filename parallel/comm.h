// comm.h — the communicator: a group of ranks and the backend that moves bytes between them (MPI or NCCL),
// with its byte counters and its rules. What travels over it is in two files, split by what uses it:
//  - collectives.h:    all-reduce, all-gather, reduce-scatter and the overlapped all-gather that tensor,
//                      sequence and data parallelism call, and the ring model their bytes are counted with;
//  - point_to_point.h: the messages between pipeline stages and ring attention's exchanges, NCCL's rules for
//                      them, --comm mpi-strict, the order check and the exchange's timeout.
// This file holds the rest: the Comm itself, creating and destroying it (the backends' set-up), the ranks on
// a node, the step's host scalars (all_reduce_host), waiting under --comm-timeout, the entry points
// only tests use and, at the end, the plumbing those two files call down into.
//
// Backends:
//  - MPI:  CPU tensors; CUDA tensors are staged through host memory (also the way to run several ranks on
//          one GPU). bf16 sums are done in fp32.
//  - NCCL: CUDA tensors, one GPU per rank; the unique id is broadcast over MPI. NCCL refuses two ranks on
//          one GPU: comm_create detects that and stops with a message pointing to --comm mpi.
//  - MPI under strict rules (--comm mpi-strict, CommRules below): NCCL's point-to-point semantics on CPUs,
//          so that a test without a GPU fails where NCCL would hang.
//  - A group of one rank is a no-op for every collective (and counts no bytes).
#pragma once
#include <mpi.h>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <vector>
#include "../layers/runtime.h"
#include "../layers/trace.h"

enum class CommBackend { MPI, NCCL };

// How strictly a communicator behaves, beyond its backend (the trainer's --comm mpi-strict and --comm-timeout;
// point_to_point.h says what each rule does to the messages between ranks).
//  strict:      the MPI backend with NCCL's point-to-point semantics (rendezvous sends, matched in issue order).
//  timeout_s:   > 0: an exchange or collective that waits longer prints what it waited for (this rank, the
//               operation, the peer, what the caller was doing) and aborts every rank. 0: wait forever.
//               Every MPI wait of a communicator polls against the deadline (as do MPI calls made elsewhere
//               that wait with comm_wait_request); on NCCL only the exchanges are watched, not the collectives.
//  check_order: every point-to-point message is preceded by a header checked on arrival. On by default in
//               debug builds.
struct CommRules {
    bool strict = false;
    double timeout_s = 0;
#ifdef NDEBUG
    bool check_order = false;
#else
    bool check_order = true;
#endif
};
enum CollectiveKind { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kBroadcast = 3, kNumCollectives = 4 };
const char* collective_name(int kind);

struct CommCounters {
    uint64_t calls[kNumCollectives] = {0, 0, 0, 0};
    uint64_t bytes[kNumCollectives] = {0, 0, 0, 0};  // ring-model bytes sent by this rank (collectives.h)
    // Of the all-gather bytes: sequence parallelism's backward re-gathers of saved input shards (counted
    // apart, so the paper's "same bytes as TP" comparison can leave them out; sequence_parallel.cu).
    uint64_t regather_bytes = 0;
    // Point to point (pipeline parallelism, point_to_point.h): tensors sent, their bytes, and the seconds this
    // rank's host spent blocked in exchanges (a pipeline stage's idle time, the bubble; on NCCL an exchange
    // is queued on the stream and the wait shows up as GPU time instead).
    uint64_t p2p_sends = 0, p2p_bytes = 0;
    double recv_wait_s = 0;
    void reset() { *this = CommCounters(); }
};

// A host buffer that grows on demand and is never shrunk, so that after the first training step the MPI
// backend allocates nothing. Pinned (cudaMallocHost) when it stages CUDA tensors, plain malloc otherwise.
struct HostBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    bool pinned = false;
};

// One receive of an exchange (point_to_point.h).
struct P2PMessage {
    Tensor t;          // the receive buffer
    int peer = -1, tag = 0;
    std::string what;  // e.g. "the activation of micro-batch 3 from stage 0"
};
// The order check's header (CommRules::check_order, point_to_point.cu): the caller's tag, the byte count and
// the message's index among those from this rank to that peer.
struct P2PHeader {
    int64_t tag = 0, bytes = 0, index = 0;
};

struct Comm {
    MPI_Comm mpi = MPI_COMM_NULL;  // always present (also used to bootstrap NCCL)
    int rank = 0, size = 1;
    CommBackend backend = CommBackend::MPI;
    CommRules rules;
    void* nccl = nullptr;          // ncclComm_t when backend == NCCL
    CommCounters counters;
    // Used by tests only (comm_create_exercised): a 1-rank group still runs its backend instead of no-ops.
    bool exercise_single_rank = false;
    // MPI backend: `stage` holds a CUDA tensor's raw bytes on the host; `wide` the fp32 working copy used
    // to reduce bf16 in fp32. host_allocs counts their (re)allocations: it stops moving after warm-up.
    HostBuffer stage, wide;
    uint64_t host_allocs = 0;
    // NCCL backend, all_gather_async and exchange_start on ctx.comm_stream: `ready` marks ctx.stream's point
    // where the input is complete, `done` marks comm_stream's point where the output is complete. The two
    // share them, so at most one of them is in flight on a communicator (all_gather_async refuses to start
    // while an exchange is in flight).
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    // Point to point (point_to_point.cu): the sends queued for the next exchange (send_later), each with its
    // own copy of the tensor (the caller may free or reuse the tensor at once), and copies kept for reuse, so
    // that after warm-up no send allocates. sent / received: messages to and from each peer so far
    // (check_order).
    struct PendingSend {
        HostBuffer host;                         // MPI backend: the bytes to send
        void* device = nullptr;                  // NCCL backend: the bytes to send
        size_t device_bytes = 0;
        size_t bytes = 0;                        // of this message
        int peer = -1, tag = 0;
        std::string what;                        // for error messages
    };
    std::vector<PendingSend> sends, spare_sends;
    std::vector<uint64_t> sent, received;  // per (peer, channel)
    // Point-to-point channels per pair of ranks (point_to_point.h): 1, or 2 when the two directions of a pair's
    // messages (activations, gradients) each keep their own order (ZB-V: pipeline_v, set with the grid's).
    int channels = 1;
    std::vector<HostBuffer> recv_stage;  // MPI backend: one staging buffer per CUDA receive of an exchange
    // NCCL backend: the end of the last exchange on ctx.stream, watched against the timeout by the next one.
    cudaEvent_t exchanged = nullptr;
    std::string exchanged_what;
    // The exchange between exchange_start and exchange_finish: its receives, and on MPI its requests and
    // order-check headers; on NCCL whether it runs on ctx.comm_stream.
    // On the timeline (--trace, point_to_point.cu): traced, as one event (whole: exchange) or two
    // (exchange_start, exchange_finish), from trace_t0 (layers/trace.h's clock, µs).
    struct InFlight {
        bool active = false, stream = false;
        std::vector<P2PMessage> recvs;
        std::vector<MPI_Request> reqs;
        std::vector<P2PHeader> in_hdr, out_hdr;
        std::string what;
        bool traced = false, whole = false;
        double trace_t0 = 0;
        TracePoint device0, device1;  // NCCL: the group's start and end on its stream (layers/trace.h)
    } inflight;
    // The pipeline's posted exchanges (exchange_post, point_to_point.h): receives not yet waited for, by id,
    // and sends not yet completed (MPI: their requests; the order check's headers live here until done).
    struct PostedRecv {
        P2PMessage msg;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // header (order check), message
        P2PHeader hdr;
        uint64_t index = 0;      // its place among the messages from msg.peer (order check)
        HostBuffer stage;        // MPI backend, CUDA tensor: the bytes land here first
        std::string exchange;    // the exchange's words (the timeout's message)
        bool done = false;       // NCCL: the group has been queued (the stream orders the rest)
    };
    struct PostedSend {
        PendingSend send;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        P2PHeader hdr;
    };
    std::map<int64_t, PostedRecv> posted_recvs;
    int64_t next_recv_id = 0;
    std::list<PostedSend> posted_sends;  // a list: MPI reads each header where it was posted
    std::vector<HostBuffer> spare_stage;
    // A duplicate of mpi for the sums and pairs of messages that run beside the pipeline's (host_sum_post,
    // point_to_point.h): made on first use (collectively), freed with the Comm.
    MPI_Comm side = MPI_COMM_NULL;
};

// Split `parent` into groups by `color`, ordered by `key` (MPI_Comm_split), and set up the backend.
// For NCCL, ctx must be a CUDA context; every rank of the group must be on a different GPU
// (parallel/gpu_identity.h checks that first).
// rules: see CommRules (strict is for the MPI backend; NCCL is strict by nature).
Comm comm_create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx, const CommRules& rules = {});
void comm_destroy(Comm& c);

// This rank's index among the ranks on its node (MPI_COMM_TYPE_SHARED), and how many ranks share the node.
// The trainer picks its GPU with it (one GPU per local rank) and shares the node's CPU cores among them.
struct LocalRank {
    int rank = 0, size = 1;
};
LocalRank local_rank(MPI_Comm world);

// An all-reduce of `count` host values in place (the step's scalars: loss, norm, verdicts), under the
// communicator's rules (timeout; `what` names it in the message). A group of one rank is a no-op.
void all_reduce_host(Comm& c, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what);
// Wait for one MPI request (e.g. an MPI_Iallreduce on MPI_COMM_WORLD, outside any Comm) as the communicators
// wait: timeout_s > 0 stops every rank after that long with a message naming `what`; 0 waits forever.
void comm_wait_request(MPI_Request req, double timeout_s, const std::string& what);
// Such a wait (timeout_s > 0) polls without a pause for its first kCommSpinUs microseconds, then sleeps 20 us
// between polls: a rank that has gone to sleep sees its message later (on this machine some 100-200 us later;
// bench/pipeline_bubble.sh's wall-clock bubbles show it).
constexpr double kCommSpinUs = 500;
// What this rank is doing, named in a timeout's message when a collective waits too long (the pipeline
// sets it per schedule unit: stage, forward or backward, micro-batch). Diagnostics only.
void comm_set_activity(const std::string& doing);

// ---- used by tests only ----------------------------------------------------------------------------------
// The trainer never calls these; the tests use them to check the backends (test/parallel/test_comm.cu).

// As comm_create, but a group of one rank still sets up its backend and runs every collective through it,
// so that a machine with one GPU exercises the NCCL calls. Training code uses comm_create.
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx,
                           const CommRules& rules = {});
void barrier(Comm& c);

// ---- the plumbing under collectives.cu and point_to_point.cu (not for the layers) ---------------------------
namespace comm_detail {
// A group of one rank has nobody to talk to: every collective is a no-op (unless a test asked to exercise
// the backend anyway).
bool is_noop(const Comm& c);
// Refuse a tensor the communicator cannot move (null data, a CUDA tensor without a CUDA context, a CPU tensor
// on NCCL), naming the operation `what`.
void check_tensor(const Comm& c, const Ctx& ctx, Tensor t, const char* what);
// At least `bytes` of host memory in `b` (HostBuffer above); counted in c.host_allocs when it (re)allocates.
void* host_buffer(Comm& c, HostBuffer& b, size_t bytes, bool pinned);
// Synchronous copies between a CUDA tensor and host memory, ordered after the work queued on ctx.stream.
void device_to_host(const Ctx& ctx, void* dst, Tensor src);
void host_to_device(const Ctx& ctx, Tensor dst, const void* src);
// `t` (f32 or bf16, CPU or CUDA) into the fp32 host array `dst` of t.n floats, and back: the MPI backend
// reduces on such a copy, so a bf16 sum is accumulated in fp32 and rounded once at the end.
void load_f32(Comm& c, const Ctx& ctx, Tensor t, float* dst);
void store_f32(Comm& c, const Ctx& ctx, Tensor t, const float* src);
// An element count as one MPI call's int count (refused beyond 2^31 - 1).
int mpi_count(int64_t n);
// Wait for MPI requests under c.rules.timeout_s; on expiry `pending(i)` describes the first request not done.
void mpi_wait(const Comm& c, std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
              const std::function<std::string(size_t)>& pending);
// Wait for one collective's request; a timeout names `op` and the group's world ranks.
void mpi_wait_one(const Comm& c, MPI_Request req, const char* op);
}  // namespace comm_detail

// Check a NCCL call's result, naming the call (for files that include <nccl.h>).
#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess)                                                                        \
            mm_fatal("NCCL error in %s at %s:%d: %s", #call, __FILE__, __LINE__,                      \
                     ncclGetErrorString(r_));                                                         \
    } while (0)
