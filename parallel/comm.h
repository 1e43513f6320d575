// comm.h — a communicator over a group of ranks, with the collectives the parallel layers need (all-reduce,
// all-gather, reduce-scatter, and an all-gather that overlaps compute) and byte counters per collective kind.
//
// Backends:
//  - MPI:  CPU tensors; CUDA tensors are staged through host memory (also the way to run several ranks on
//          one GPU). bf16 sums are done in fp32.
//  - NCCL: CUDA tensors, one GPU per rank; the unique id is broadcast over MPI. NCCL refuses two ranks on
//          one GPU: comm_create detects that and stops with a message pointing to --comm mpi.
//  - MPI under strict rules (--comm mpi-strict, CommRules below): NCCL's point-to-point semantics on CPUs,
//          so that a test without a GPU fails where NCCL would hang.
//  - A group of one rank is a no-op for every collective (and counts no bytes).
//
// Byte counters follow the ring algorithm's per-rank traffic, the model the paper reasons with
// (§4.2.2): for a tensor of n elements of d bytes on a group of t ranks, an all-reduce sends 2(t-1)/t·n·d
// bytes per rank, an all-gather or reduce-scatter (n = the full, gathered size) (t-1)/t·n·d. Hence
// "all-gather + reduce-scatter moves the same bytes as one all-reduce". A broadcast counts (t-1)/t·n·d: the
// per-rank average of a pipelined ring broadcast, where every rank but the last forwards the n·d bytes once.
#pragma once
#include <mpi.h>
#include <cstdint>
#include <string>
#include <vector>
#include "../layers/runtime.h"

enum class CommBackend { MPI, NCCL };

// How strictly a communicator behaves, beyond its backend (the trainer's --comm mpi-strict and --comm-timeout).
//  strict:      the MPI backend with NCCL's point-to-point semantics (below, "point to point"): an exchange
//               completes only when every one of its messages has been matched by the peer (MPI_Issend), and
//               every message travels with one tag, so messages between two ranks match in issue order. A
//               CPU run then deadlocks exactly where NCCL would, instead of getting by on MPI's buffering.
//  timeout_s:   > 0: an exchange or collective that waits longer prints what it waited for (this rank, the
//               operation, the peer, what the caller was doing) and aborts every rank. 0: wait forever.
//               MPI backend: every wait polls against the deadline. NCCL backend: each exchange's end is
//               watched before the next is issued (ncclCommAbort, then MPI_Abort); NCCL collectives are not
//               watched. Nor are MPI calls made outside this file, unless they wait with comm_wait_request.
//  check_order: every message is preceded by a small header (tag, bytes, sequence number per peer), checked
//               on arrival: a stage whose k-th message to a peer is not the peer's k-th expected one stops
//               with both descriptions (NCCL would silently deliver it into the wrong buffer). On by default
//               in debug builds; on NCCL it reads the headers back, a host synchronization per exchange.
struct CommRules {
    bool strict = false;
    double timeout_s = 0;
#ifdef NDEBUG
    bool check_order = false;
#else
    bool check_order = true;
#endif
};
enum class ReduceOp { SUM, MAX };
enum CollectiveKind { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kBroadcast = 3, kNumCollectives = 4 };
const char* collective_name(int kind);

struct CommCounters {
    uint64_t calls[kNumCollectives] = {0, 0, 0, 0};
    uint64_t bytes[kNumCollectives] = {0, 0, 0, 0};  // ring-model bytes sent by this rank
    // Of the all-gather bytes: sequence parallelism's backward re-gathers of saved input shards (counted
    // apart, so the paper's "same bytes as TP" comparison can leave them out; sequence_parallel.cu).
    uint64_t regather_bytes = 0;
    // Point to point (pipeline parallelism, send_later / exchange below): tensors sent, their bytes, and the
    // seconds this rank's host spent blocked in exchanges (a pipeline stage's idle time, the bubble; on
    // NCCL an exchange is queued on the stream and the wait shows up as GPU time instead).
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

// The order check's header (CommRules::check_order), sent before each point-to-point message in the same
// exchange, so it matches in the same order as the message: the caller's tag, the byte count and the
// message's index among those from this rank to that peer. The receiver compares it with what it expects.
struct P2PHeader {
    int64_t tag = 0, bytes = 0, index = 0;
};
struct P2PMessage {
    Tensor t;          // the receive buffer
    int peer = -1, tag = 0;
    std::string what;  // e.g. "the activation of micro-batch 3 from stage 0"
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
    // NCCL backend, all_gather_async: `ready` marks ctx.stream's point where the input is complete,
    // `done` marks comm_stream's point where the gathered output is complete.
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    // Point to point: the sends queued for the next exchange (send_later), each with its own copy of the
    // tensor (the caller may free or reuse the tensor at once), and copies kept for reuse, so that after
    // warm-up no send allocates. sent / received: messages to and from each peer so far (check_order).
    struct PendingSend {
        HostBuffer host;                         // MPI backend: the bytes to send
        void* device = nullptr;                  // NCCL backend: the bytes to send
        size_t device_bytes = 0;
        size_t bytes = 0;                        // of this message
        int peer = -1, tag = 0;
        std::string what;                        // for error messages
    };
    std::vector<PendingSend> sends, spare_sends;
    std::vector<uint64_t> sent, received;
    std::vector<HostBuffer> recv_stage;  // MPI backend: one staging buffer per CUDA receive of an exchange
    // NCCL backend: the end of the last exchange on ctx.stream, watched against the timeout by the next one.
    cudaEvent_t exchanged = nullptr;
    std::string exchanged_what;
    // The exchange between exchange_start and exchange_finish: its receives, and on MPI its requests and
    // order-check headers; on NCCL whether it runs on ctx.comm_stream.
    struct InFlight {
        bool active = false, stream = false;
        std::vector<P2PMessage> recvs;
        std::vector<MPI_Request> reqs;
        std::vector<P2PHeader> in_hdr, out_hdr;
        std::string what;
    } inflight;
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

// All collectives are in place or out of place on contiguous buffers of f32 or bf16 (broadcast, below: any
// dtype), on ctx's device and stream. They return when the result is usable on ctx's stream.
void all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op = ReduceOp::SUM);
// out[r·in.n .. (r+1)·in.n) = in of rank r. out.n == size · in.n.
void all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in);
// out = Σ over ranks of in[rank·out.n .. (rank+1)·out.n). in.n == size · out.n.
void reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in);

// The all-gather issued on a second stream (ctx.comm_stream) so that it overlaps work on ctx.stream
// (sequence parallelism's backward re-gather, paper §4.2.2). comm_wait makes ctx.stream wait for it.
// On CPU / MPI these simply run the collective synchronously.
void all_gather_async(Comm& c, const Ctx& ctx, Tensor out, Tensor in);
void comm_wait(Comm& c, const Ctx& ctx);

// ---- point to point: what crosses a pipeline stage boundary (model/pipeline_step.cu) ----------------
// `peer` and the ranks are those of the group (pp_comm: rank = pipeline stage).
//
// NCCL's rules, which both backends follow:
//  1. NCCL has no tags: between two ranks, the k-th message one sends is the k-th message the other
//     receives. Every directed pair of stages must therefore issue its sends and its receives in the same
//     order (test_pipeline_schedule checks it for every schedule). `tag` only names a message for the order
//     check and error messages; the MPI backend uses it as the MPI tag unless the rules are strict.
//  2. An NCCL send may wait, on the GPU, until the peer has posted the matching receive (always for
//     messages beyond NCCL's internal buffers), and a communicator runs its operations one at a time in
//     issue order. So a send followed by a receive, ungrouped, deadlocks as soon as two stages each send
//     first. Sends and receives that must progress together are issued as one exchange (an NCCL group),
//     which completes as a unit.
//
// send_later copies `t` (any dtype) and queues it; the next exchange sends it. exchange posts the queued
// sends and the receives `recvs` together and returns when all of them are done (NCCL: ctx.stream waits;
// the sends' bytes may be reused after that). The pipeline issues one exchange per schedule unit: the
// previous unit's sends with this unit's receives (model/pipeline_step.cu says why that order cannot
// deadlock). `what` says what the caller is doing, for the timeout message.
void send_later(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag, const std::string& what);
void exchange(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what);
// The same exchange in two halves, so that work runs while its messages travel (ring attention's K and V,
// parallel/context_parallel.cu): exchange_start posts the queued sends and the receives `recvs` and returns;
// exchange_finish waits for them (afterwards, as after exchange). In between, the caller leaves the receive
// buffers alone and starts no other exchange on c. NCCL: the group runs on ctx.comm_stream (when the context
// has one) after the work ctx.stream has queued so far, and exchange_finish makes ctx.stream wait for it. MPI:
// the requests are posted at once; MPI moves the bytes as it progresses, at the latest inside the wait.
void exchange_start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what);
void exchange_finish(Comm& c, const Ctx& ctx);
// Bytes of host memory `bytes` from rank `root` to every rank of the group, under the communicator's rules
// (timeout): the pipeline's loss, which the last stage computes.
void broadcast_host(Comm& c, void* data, int bytes, int root, const std::string& what);
// An all-reduce of `count` host values in place (the step's scalars: loss, norm, verdicts), under the
// communicator's rules (timeout; `what` names it in the message). A group of one rank is a no-op.
void all_reduce_host(Comm& c, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what);
// Wait for one MPI request (e.g. an MPI_Iallreduce on MPI_COMM_WORLD, outside any Comm) as the communicators
// wait: timeout_s > 0 stops every rank after that long with a message naming `what`; 0 waits forever.
void comm_wait_request(MPI_Request req, double timeout_s, const std::string& what);
// What this rank is doing, named in a timeout's message when a collective waits too long (the pipeline
// sets it per schedule unit: stage, forward or backward, micro-batch). Diagnostics only.
void comm_set_activity(const std::string& doing);

// Check an MPI call's return code, naming the call.
#define MPI_CHECK(call)                                                                               \
    do {                                                                                              \
        int rc_ = (call);                                                                             \
        if (rc_ != MPI_SUCCESS) {                                                                     \
            char s_[MPI_MAX_ERROR_STRING]; int l_ = 0; MPI_Error_string(rc_, s_, &l_);                \
            mm_fatal("MPI error in %s at %s:%d: %s", #call, __FILE__, __LINE__, s_);                  \
        }                                                                                             \
    } while (0)

// ---- used by tests only ----------------------------------------------------------------------------------
// The trainer never calls these; the tests use them to check the backends (test/parallel/test_comm.cu).

// As comm_create, but a group of one rank still sets up its backend and runs every collective through it,
// so that a machine with one GPU exercises the NCCL calls. Training code uses comm_create.
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx,
                           const CommRules& rules = {});
// buf of rank `root` to every rank of the group (any dtype: it moves bytes).
void broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root);
void barrier(Comm& c);
