// comm.h — a communicator over a group of ranks, with the collectives the parallel layers need (all-reduce,
// all-gather, reduce-scatter, and an all-gather that overlaps compute) and byte counters per collective kind.
//
// Backends:
//  - MPI:  CPU tensors; CUDA tensors are staged through host memory (also the way to run several ranks on
//          one GPU). bf16 sums are done in fp32.
//  - NCCL: CUDA tensors, one GPU per rank; the unique id is broadcast over MPI. NCCL refuses two ranks on
//          one GPU: comm_create detects that and stops with a message pointing to --comm mpi.
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
enum class ReduceOp { SUM, MAX };
enum CollectiveKind { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kBroadcast = 3, kNumCollectives = 4 };
const char* collective_name(int kind);

struct CommCounters {
    uint64_t calls[kNumCollectives] = {0, 0, 0, 0};
    uint64_t bytes[kNumCollectives] = {0, 0, 0, 0};  // ring-model bytes sent by this rank
    // Of the all-gather bytes: sequence parallelism's backward re-gathers of saved input shards (counted
    // apart, so the paper's "same bytes as TP" comparison can leave them out; sequence_parallel.cu).
    uint64_t regather_bytes = 0;
    // Point to point (pipeline parallelism, send_async / recv below): tensors sent, their bytes, and the
    // seconds this rank's host spent blocked in receives (a pipeline stage's idle time, the bubble; on
    // NCCL a receive is queued on the stream and the wait shows up as GPU time instead).
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

struct Comm {
    MPI_Comm mpi = MPI_COMM_NULL;  // always present (also used to bootstrap NCCL)
    int rank = 0, size = 1;
    CommBackend backend = CommBackend::MPI;
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
    // Point to point: sends in flight, each with its own copy of the tensor (the sender may free or reuse
    // the tensor at once), and copies kept for reuse, so that after warm-up no send allocates.
    struct PendingSend {
        MPI_Request request = MPI_REQUEST_NULL;  // MPI backend
        HostBuffer host;                         // MPI backend: the bytes being sent
        void* device = nullptr;                  // NCCL backend: the bytes being sent
        size_t device_bytes = 0;
    };
    std::vector<PendingSend> sends, spare_sends;
    cudaStream_t send_stream = nullptr;  // NCCL backend: sends run here, never blocking ctx.stream
};

// Split `parent` into groups by `color`, ordered by `key` (MPI_Comm_split), and set up the backend.
// For NCCL, ctx must be a CUDA context; every rank of the group must be on a different GPU
// (parallel/gpu_identity.h checks that first).
Comm comm_create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx);
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
// `peer` and the ranks are those of the group (pp_comm: rank = pipeline stage). send_async copies `t`
// (any dtype) and returns at once; the transfer finishes in the background, so a stage never waits for
// its neighbour to receive, and a schedule whose receives are satisfiable cannot deadlock
// (test/parallel/test_pipeline_schedule.cu simulates exactly that). recv blocks until `t` has arrived
// (NCCL: ctx.stream waits). The tag tells apart tensors of different micro-batches and directions.
// wait_sends completes every send in flight (at the end of a step).
void send_async(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag);
void recv(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag);
void wait_sends(Comm& c);

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
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx);
// buf of rank `root` to every rank of the group (any dtype: it moves bytes).
void broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root);
void barrier(Comm& c);
