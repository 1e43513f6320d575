// comm.cu — communicators and collectives over MPI or NCCL (see comm.h).
//
// Reading order: byte counters (the ring model), host staging buffers, the MPI backend, the NCCL backend,
// then the public functions that pick a backend; at the end, the functions only tests use. The parallel
// layers only ever call the public functions, so tensor and sequence parallelism read the same whatever
// moves the bytes.
#include "comm.h"
#include "gpu_identity.h"

#include <nccl.h>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>

// Check a NCCL call's result, naming the call.
#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess)                                                                        \
            mm_fatal("NCCL error in %s at %s:%d: %s", #call, __FILE__, __LINE__,                      \
                     ncclGetErrorString(r_));                                                         \
    } while (0)

const char* collective_name(int kind) {
    switch (kind) {
        case kAllReduce: return "all-reduce";
        case kAllGather: return "all-gather";
        case kReduceScatter: return "reduce-scatter";
        case kBroadcast: return "broadcast";
    }
    return "?";
}

// ---- byte counters ---------------------------------------------------------------------------------
// `full_bytes` is n·d of the whole tensor: the buffer for all-reduce and broadcast, the gathered (full)
// size for all-gather and reduce-scatter. A ring all-reduce is a reduce-scatter followed by an all-gather
// (paper §4.2.2), each of which sends (t-1)/t of the full tensor per rank; that is why sequence
// parallelism's all-gather + reduce-scatter pair costs exactly the bytes of tensor parallelism's
// all-reduce. Broadcast: (t-1)/t·n·d, the per-rank average of a pipelined ring (every rank but the last
// forwards the tensor once).
static uint64_t ring_bytes(int kind, int t, uint64_t full_bytes) {
    uint64_t per_step = full_bytes * (uint64_t)(t - 1) / (uint64_t)t;
    return kind == kAllReduce ? 2 * per_step : per_step;
}

static void count(Comm& c, int kind, size_t full_bytes) {
    c.counters.calls[kind] += 1;
    c.counters.bytes[kind] += ring_bytes(kind, c.size, full_bytes);
}

// A group of one rank has nobody to talk to: every collective is a no-op (unless a test asked to
// exercise the backend anyway).
static bool is_noop(const Comm& c) { return c.size == 1 && !c.exercise_single_rank; }

// ---- host staging buffers (MPI backend) --------------------------------------------------------------
static void host_buffer_free(HostBuffer& b) {
    if (b.ptr) {
        if (b.pinned) CUDA_CHECK(cudaFreeHost(b.ptr));
        else free(b.ptr);
    }
    b = HostBuffer();
}

// At least `bytes` of host memory in `b`, pinned when it will stage CUDA tensors (pinned memory is what
// lets cudaMemcpyAsync run at full bandwidth). Grows, never shrinks: after warm-up no call allocates.
// A CPU-only run never asks for pinned memory, so it makes no CUDA call here.
static void* host_buffer(Comm& c, HostBuffer& b, size_t bytes, bool pinned) {
    if (b.ptr && bytes <= b.bytes && (b.pinned || !pinned)) return b.ptr;
    size_t want = std::max(bytes, std::max(b.bytes, (size_t)1 << 20));
    host_buffer_free(b);
    if (pinned) {
        CUDA_CHECK(cudaMallocHost(&b.ptr, want));
    } else {
        b.ptr = malloc(want);
        if (!b.ptr) mm_fatal("comm: out of host memory allocating a %zu-byte staging buffer", want);
    }
    b.bytes = want;
    b.pinned = pinned;
    c.host_allocs += 1;
    return b.ptr;
}

// Synchronous copies between a CUDA tensor and host memory, ordered after the work already queued on
// ctx.stream (the kernels that produced the tensor).
static void device_to_host(const Ctx& ctx, void* dst, Tensor src) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}
static void host_to_device(const Ctx& ctx, Tensor dst, const void* src) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, ctx.stream));
    // Synchronize so the staging buffer may be reused by the next collective right away.
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

// bf16 <-> fp32 on the host.
static void widen(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = to_f32(src[i]);
}
static void narrow(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = from_f32<bf16>(src[i]);
}

// Bring `t` (f32 or bf16, CPU or CUDA) into the fp32 host array `dst` of t.n floats, and back. The MPI
// backend reduces on such an fp32 copy, so a bf16 sum is accumulated in fp32 and rounded once at the end.
static void load_f32(Comm& c, const Ctx& ctx, Tensor t, float* dst) {
    if (t.device == Device::CPU) {
        if (t.dtype == DType::F32) memcpy(dst, t.data, t.bytes());
        else widen(dst, t.as<bf16>(), t.n);
    } else if (t.dtype == DType::F32) {
        device_to_host(ctx, dst, t);
    } else {
        bf16* raw = (bf16*)host_buffer(c, c.stage, t.bytes(), true);
        device_to_host(ctx, raw, t);
        widen(dst, raw, t.n);
    }
}
static void store_f32(Comm& c, const Ctx& ctx, Tensor t, const float* src) {
    if (t.device == Device::CPU) {
        if (t.dtype == DType::F32) memcpy(t.data, src, t.bytes());
        else narrow(t.as<bf16>(), src, t.n);
    } else if (t.dtype == DType::F32) {
        host_to_device(ctx, t, src);
    } else {
        bf16* raw = (bf16*)host_buffer(c, c.stage, t.bytes(), true);
        narrow(raw, src, t.n);
        host_to_device(ctx, t, raw);
    }
}

// ---- waiting under the timeout --------------------------------------------------------------------------
// With rules.timeout_s > 0 every MPI wait polls (MPI_Testall) against a deadline instead of blocking, so
// that a peer that stopped or died is reported by name instead of leaving this rank waiting forever. The
// first thousand polls spin (the common case: the peer is microseconds away); after that each poll sleeps
// 20 µs, so that a rank waiting out a long bubble leaves the cores to the ranks that compute. On expiry
// `pending(i)` describes the first request not done; the message names this rank (mm_fatal), and
// mm_fatal's MPI_Abort ends every rank.
static std::string g_activity;
void comm_set_activity(const std::string& doing) { g_activity = doing; }

// `who` names this rank in its group ("rank 1 of a group of 2").
static void wait_all(double timeout_s, const std::string& who, std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
                     const std::function<std::string(size_t)>& pending) {
    const int n = (int)reqs.size();
    statuses.resize(reqs.size());
    if (timeout_s <= 0) {
        MPI_CHECK(MPI_Waitall(n, reqs.data(), statuses.data()));
        return;
    }
    const double t0 = MPI_Wtime();
    for (long polls = 0;; polls++) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, reqs.data(), &done, statuses.data()));
        if (done) return;
        if (MPI_Wtime() - t0 > timeout_s) break;
        if (polls > 1000) {
            const timespec pause{0, 20000};
            nanosleep(&pause, nullptr);
        }
    }
    // Complete what has arrived meanwhile; the first request still open is what this rank waits for.
    int outcount = 0;
    std::vector<int> idx(reqs.size());
    MPI_CHECK(MPI_Testsome(n, reqs.data(), &outcount, idx.data(), statuses.data()));
    size_t first = 0;
    while (first + 1 < reqs.size() && reqs[first] == MPI_REQUEST_NULL) first++;
    mm_fatal("comm timeout: %s waited %.1f s (--comm-timeout) for %s%s%s; stopping every rank", who.c_str(), timeout_s,
             pending(first).c_str(), g_activity.empty() ? "" : "; this rank was running ", g_activity.c_str());
}
static void mpi_wait(const Comm& c, std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
                     const std::function<std::string(size_t)>& pending) {
    const std::string who = c.rules.timeout_s > 0 ? "rank " + std::to_string(c.rank) + " of a group of " + std::to_string(c.size) : "";
    wait_all(c.rules.timeout_s, who, reqs, statuses, pending);
}

void comm_wait_request(MPI_Request req, double timeout_s, const std::string& what) {
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    wait_all(timeout_s, "this rank", reqs, st, [&](size_t) { return what; });
}
// The group's members as world ranks ("world ranks 0 2"), for a collective's timeout message: one of them
// is the rank that does not answer.
static std::string world_ranks(const Comm& c) {
    MPI_Group mine, world;
    MPI_CHECK(MPI_Comm_group(c.mpi, &mine));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks((size_t)c.size), in_world((size_t)c.size);
    for (int r = 0; r < c.size; r++) ranks[(size_t)r] = r;
    MPI_CHECK(MPI_Group_translate_ranks(mine, c.size, ranks.data(), world, in_world.data()));
    MPI_CHECK(MPI_Group_free(&mine));
    MPI_CHECK(MPI_Group_free(&world));
    std::string s = "world ranks";
    for (int r : in_world) s += " " + std::to_string(r);
    return s;
}
// One collective's request.
static void mpi_wait_one(const Comm& c, MPI_Request req, const char* op) {
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return std::string("the ") + op + " of its group (" + world_ranks(c) + ")"; });
}

// ---- MPI backend ---------------------------------------------------------------------------------------
// Element types for the collectives that only move bytes (all-gather, broadcast): MPI counts are ints, so
// counting elements rather than bytes keeps the limit at 2^31 elements.
static MPI_Datatype mpi_type(DType t) {
    switch (t) {
        case DType::F32: return MPI_FLOAT;
        case DType::BF16: return MPI_UINT16_T;  // moved, never added: the bits are all that matter
        case DType::U8: return MPI_UINT8_T;
        case DType::I32: return MPI_INT32_T;
    }
    return MPI_BYTE;
}
static int mpi_count(int64_t n) {
    if (n > INT_MAX) mm_fatal("comm: %lld elements exceed one MPI call's limit (2^31 - 1)", (long long)n);
    return (int)n;
}
static bool overlaps(Tensor a, Tensor b) {
    const char *a0 = (const char*)a.data, *b0 = (const char*)b.data;
    return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

static void mpi_all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op) {
    MPI_Op mop = op == ReduceOp::SUM ? MPI_SUM : MPI_MAX;
    if (buf.device == Device::CPU && buf.dtype == DType::F32) {
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, mpi_count(buf.n), MPI_FLOAT, mop, c.mpi, &req));
        mpi_wait_one(c, req, "all-reduce");
        return;
    }
    // bf16 (widened so the sum is done in fp32) or a CUDA tensor (staged): reduce an fp32 host copy.
    float* w = (float*)host_buffer(c, c.wide, buf.n * sizeof(float), buf.device == Device::CUDA);
    load_f32(c, ctx, buf, w);
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, w, mpi_count(buf.n), MPI_FLOAT, mop, c.mpi, &req));
    mpi_wait_one(c, req, "all-reduce");
    store_f32(c, ctx, buf, w);
}

static void mpi_all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    int n = mpi_count(in.n);
    MPI_Datatype type = mpi_type(in.dtype);
    size_t my_offset = (size_t)c.rank * in.bytes();
    if (out.device == Device::CPU) {
        // In place when `in` already sits in this rank's slot of `out`.
        bool in_place = (char*)in.data == (char*)out.data + my_offset;
        MPI_Request req;
        MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, n, type, out.data, n, type, c.mpi, &req));
        mpi_wait_one(c, req, "all-gather");
        return;
    }
    char* h = (char*)host_buffer(c, c.stage, out.bytes(), true);
    device_to_host(ctx, h + my_offset, in);
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, n, type, c.mpi, &req));
    mpi_wait_one(c, req, "all-gather");
    host_to_device(ctx, out, h);
}

static void mpi_reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    int n = mpi_count(out.n);
    if (in.device == Device::CPU && in.dtype == DType::F32 && !overlaps(in, out)) {
        MPI_Request req;
        MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, n, MPI_FLOAT, MPI_SUM, c.mpi, &req));
        mpi_wait_one(c, req, "reduce-scatter");
        return;
    }
    // On an fp32 host copy of the whole input: with MPI_IN_PLACE the input is the receive buffer and this
    // rank's reduced block lands at its start.
    float* w = (float*)host_buffer(c, c.wide, in.n * sizeof(float), in.device == Device::CUDA);
    load_f32(c, ctx, in, w);
    MPI_Request req;
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, w, n, MPI_FLOAT, MPI_SUM, c.mpi, &req));
    mpi_wait_one(c, req, "reduce-scatter");
    store_f32(c, ctx, out, w);
}

// ---- NCCL backend --------------------------------------------------------------------------------------
// NCCL runs on ctx.stream and returns at once: the result is usable by later work on that stream, which
// is exactly the contract of comm.h. Operations on one communicator run in the order they were issued,
// and every rank issues them in the same order (the program is SPMD).
static ncclComm_t nccl_of(const Comm& c) { return (ncclComm_t)c.nccl; }

static ncclDataType_t nccl_type(DType t) {
    if (t == DType::F32) return ncclFloat;
    if (t == DType::BF16) return ncclBfloat16;
    mm_fatal("comm: NCCL reductions and gathers take f32 or bf16 tensors, not %s", dtype_name(t));
}

// Note on bf16 sums: NCCL adds in fp32 inside each step but stores bf16 between ring steps, so with more
// than two ranks it may round more than once; the MPI backend rounds exactly once. Both are what the
// respective libraries (and Megatron on them) do; the tests compare each against its own expectation.
static void nccl_all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op) {
    NCCL_CHECK(ncclAllReduce(buf.data, buf.data, (size_t)buf.n, nccl_type(buf.dtype),
                             op == ReduceOp::SUM ? ncclSum : ncclMax, nccl_of(c), ctx.stream));
}
static void nccl_all_gather(Comm& c, cudaStream_t stream, Tensor out, Tensor in) {
    // NCCL is in place when in == out + rank·in.n, the layout comm.h describes.
    NCCL_CHECK(ncclAllGather(in.data, out.data, (size_t)in.n, nccl_type(in.dtype), nccl_of(c), stream));
}
static void nccl_reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    NCCL_CHECK(ncclReduceScatter(in.data, out.data, (size_t)out.n, nccl_type(in.dtype), ncclSum, nccl_of(c),
                                 ctx.stream));
}

// ---- the ranks on this node ------------------------------------------------------------------------------
LocalRank local_rank(MPI_Comm world) {
    // Ranks that can share memory are the ranks on this node.
    int rank = 0;
    LocalRank local;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &local.rank));
    MPI_CHECK(MPI_Comm_size(node, &local.size));
    MPI_CHECK(MPI_Comm_free(&node));
    return local;
}

// ---- creation and destruction ------------------------------------------------------------------------
static Comm create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx, const CommRules& rules,
                   bool exercise) {
    Comm c;
    c.backend = backend;
    c.rules = rules;
    c.exercise_single_rank = exercise;
    MPI_CHECK(MPI_Comm_split(parent, color, key, &c.mpi));
    MPI_CHECK(MPI_Comm_rank(c.mpi, &c.rank));
    MPI_CHECK(MPI_Comm_size(c.mpi, &c.size));
    c.sent.assign((size_t)c.size, 0);
    c.received.assign((size_t)c.size, 0);
    if (backend != CommBackend::NCCL || is_noop(c)) return c;

    if (ctx.device != Device::CUDA) mm_fatal("comm: the NCCL backend needs a CUDA context; use --comm mpi on CPU");
    CUDA_CHECK(cudaSetDevice(ctx.cuda_device));
    // NCCL would hang or fail obscurely with two ranks on one GPU; check first and say what to do instead
    // (parallel/gpu_identity.h). Every rank sees the same list, so every rank stops with the same message.
    std::string err = shared_gpu_error(gather_gpu_identities(c.mpi, ctx.cuda_device));
    if (!err.empty()) mm_fatal("%s", err.c_str());

    // Group rank 0 creates the unique id; MPI carries it to the others.
    ncclUniqueId id;
    if (c.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c.mpi));
    ncclComm_t nc;
    NCCL_CHECK(ncclCommInitRank(&nc, c.size, id, c.rank));
    c.nccl = nc;
    CUDA_CHECK(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c.exchanged, cudaEventDisableTiming));
    return c;
}

Comm comm_create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx, const CommRules& rules) {
    return create(parent, color, key, backend, ctx, rules, false);
}
void comm_destroy(Comm& c) {
    if (!c.sends.empty()) mm_fatal("comm_destroy: %zu sends queued and never exchanged", c.sends.size());
    for (Comm::PendingSend& p : c.spare_sends) {
        if (p.device) CUDA_CHECK(cudaFree(p.device));
        host_buffer_free(p.host);
    }
    for (HostBuffer& b : c.recv_stage) host_buffer_free(b);
    if (c.exchanged) CUDA_CHECK(cudaEventDestroy(c.exchanged));
    if (c.nccl) NCCL_CHECK(ncclCommDestroy(nccl_of(c)));
    if (c.ready) CUDA_CHECK(cudaEventDestroy(c.ready));
    if (c.done) CUDA_CHECK(cudaEventDestroy(c.done));
    host_buffer_free(c.stage);
    host_buffer_free(c.wide);
    if (c.mpi != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c.mpi));
    c = Comm();
}

// ---- the collectives -----------------------------------------------------------------------------------
static void check_tensor(const Comm& c, const Ctx& ctx, Tensor t, const char* what) {
    if (t.n > 0 && !t.data) mm_fatal("comm: %s: null tensor", what);
    if (t.device == Device::CUDA && ctx.device != Device::CUDA)
        mm_fatal("comm: %s: a CUDA tensor needs a CUDA context", what);
    if (c.backend == CommBackend::NCCL && t.device != Device::CUDA)
        mm_fatal("comm: %s: the NCCL backend takes CUDA tensors only; use --comm mpi for CPU tensors", what);
}
static void check_reducible(Tensor t, const char* what) {
    if (t.dtype != DType::F32 && t.dtype != DType::BF16)
        mm_fatal("comm: %s takes f32 or bf16 tensors, not %s", what, dtype_name(t.dtype));
}
// The shapes of all-gather (out = size · in) and reduce-scatter (in = size · out).
static void check_pair(const Comm& c, const Ctx& ctx, Tensor small, Tensor full, const char* what) {
    check_tensor(c, ctx, small, what);
    check_tensor(c, ctx, full, what);
    check_reducible(small, what);
    if (small.dtype != full.dtype || small.device != full.device)
        mm_fatal("comm: %s: dtype/device mismatch between shard and full tensor", what);
    if (full.n != (int64_t)c.size * small.n)
        mm_fatal("comm: %s: full tensor has %lld elements, expected %d x %lld", what, (long long)full.n, c.size,
                 (long long)small.n);
}
// A 1-rank all-gather or reduce-scatter is a copy (nothing when in place).
static void copy_if_distinct(const Ctx& ctx, Tensor dst, Tensor src) {
    if (dst.data != src.data) tensor_convert(ctx, dst, src);
}

void all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op) {
    check_tensor(c, ctx, buf, "all_reduce");
    check_reducible(buf, "all_reduce");
    if (is_noop(c) || buf.n == 0) return;
    if (c.backend == CommBackend::NCCL) nccl_all_reduce(c, ctx, buf, op);
    else mpi_all_reduce(c, ctx, buf, op);
    count(c, kAllReduce, buf.bytes());
}

void all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    check_pair(c, ctx, in, out, "all_gather");
    if (is_noop(c)) return copy_if_distinct(ctx, out, in);
    if (in.n == 0) return;
    if (c.backend == CommBackend::NCCL) nccl_all_gather(c, ctx.stream, out, in);
    else mpi_all_gather(c, ctx, out, in);
    count(c, kAllGather, out.bytes());
}

void reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    check_pair(c, ctx, out, in, "reduce_scatter");
    if (is_noop(c)) return copy_if_distinct(ctx, out, in);
    if (out.n == 0) return;
    if (c.backend == CommBackend::NCCL) nccl_reduce_scatter(c, ctx, out, in);
    else mpi_reduce_scatter(c, ctx, out, in);
    count(c, kReduceScatter, in.bytes());
}

// Sequence parallelism's backward re-gathers the column-parallel linear's input while the GPU computes
// the input gradient (paper §4.2.2). For the all-gather to overlap, it must be issued first and on its own
// stream: ctx.comm_stream waits until ctx.stream has produced `in` (event `ready`), runs the all-gather,
// and marks its end (event `done`); comm_wait makes ctx.stream wait for `done` before using `out`.
// Until comm_wait, the caller must not overwrite `in` nor read `out` on ctx.stream.
void all_gather_async(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    if (c.backend != CommBackend::NCCL || is_noop(c) || in.n == 0) return all_gather(c, ctx, out, in);
    check_pair(c, ctx, in, out, "all_gather_async");
    CUDA_CHECK(cudaEventRecord(c.ready, ctx.stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx.comm_stream, c.ready, 0));
    nccl_all_gather(c, ctx.comm_stream, out, in);
    CUDA_CHECK(cudaEventRecord(c.done, ctx.comm_stream));
    count(c, kAllGather, out.bytes());
}

void comm_wait(Comm& c, const Ctx& ctx) {
    // Without NCCL the all-gather already completed synchronously. (Waiting on an event that was never
    // recorded would also be a no-op in CUDA.)
    if (c.backend != CommBackend::NCCL || !c.done) return;
    CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, c.done, 0));
}

// ---- point to point ---------------------------------------------------------------------------------------
// send_later copies the tensor into a buffer of its own (taken from spare_sends when one is big enough) and
// queues it; exchange posts the queued sends and the given receives together, then waits for all of them.
// Tensors cross between ranks of one job, so the bytes are moved as they are (bf16 stays bf16).
//
// Why grouping is needed (comm.h, rule 2), and why one stream: NCCL runs a communicator's operations one
// at a time in issue order whatever stream they are issued on, so a separate send stream buys no overlap
// between a stage's sends and receives; and pipeline sends on a stream of their own would run beside the
// other communicators' collectives on ctx.stream, which NCCL warns can deadlock (two communicators' kernels
// each waiting for the other's peers). So everything goes on ctx.stream, in program order.
static Comm::PendingSend take_send_buffer(Comm& c, size_t bytes, bool device) {
    for (size_t i = 0; i < c.spare_sends.size(); i++) {
        Comm::PendingSend& p = c.spare_sends[i];
        if ((device ? p.device_bytes : p.host.bytes) >= bytes) {
            Comm::PendingSend got = p;
            c.spare_sends.erase(c.spare_sends.begin() + (long)i);
            return got;
        }
    }
    Comm::PendingSend p;
    if (device) {
        CUDA_CHECK(cudaMalloc(&p.device, bytes));
        p.device_bytes = bytes;
    } else {
        host_buffer(c, p.host, bytes, false);
    }
    return p;
}

static void check_peer(const Comm& c, int peer, const char* what) {
    if (peer < 0 || peer >= c.size || peer == c.rank) mm_fatal("comm: %s rank %d of a group of %d", what, peer, c.size);
}

void send_later(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag, const std::string& what) {
    check_tensor(c, ctx, t, "send_later");
    check_peer(c, peer, "send_later to");
    const size_t bytes = t.bytes();
    Comm::PendingSend p = take_send_buffer(c, bytes, c.backend == CommBackend::NCCL);
    if (c.backend == CommBackend::NCCL) CUDA_CHECK(cudaMemcpyAsync(p.device, t.data, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
    else if (t.device == Device::CPU) memcpy(p.host.ptr, t.data, bytes);
    else device_to_host(ctx, p.host.ptr, t);
    p.bytes = bytes;
    p.peer = peer;
    p.tag = tag;
    p.what = what;
    c.sends.push_back(p);
    c.counters.p2p_sends += 1;
    c.counters.p2p_bytes += bytes;
}

// The order check's header, sent before each message in the same exchange (so it matches in the same
// order as the message): the caller's tag, the byte count and the message's index among those from this
// rank to that peer. The receiver compares it with what it expects.
static void check_header(const Comm& c, const P2PHeader& got, const P2PMessage& want, uint64_t index) {
    if (got.tag == want.tag && got.bytes == (int64_t)want.t.bytes() && got.index == (int64_t)index) return;
    mm_fatal("comm: message order broken: rank %d expected %s (tag %d, %lld bytes, message %llu from rank %d) but rank %d "
             "sent tag %lld, %lld bytes as its message %lld; the two ranks issue their messages in different orders, and "
             "NCCL, which matches by order, would put it in the wrong buffer",
             c.rank, want.what.c_str(), want.tag, (long long)want.t.bytes(), (unsigned long long)index, want.peer, want.peer,
             (long long)got.tag, (long long)got.bytes, (long long)got.index);
}

// MPI: every receive and send posted at once (MPI_Irecv, MPI_Isend or, strict, MPI_Issend), then one wait for
// all. Posting receives first lets MPI deliver straight into them.
// The exchange's requests are posted (mpi_exchange_post) and waited for (mpi_exchange_complete) apart, so that
// exchange_start can return in between; c.inflight keeps what the second half needs.
static void mpi_exchange_post(Comm& c, const std::vector<P2PMessage>& recvs) {
    Comm::InFlight& f = c.inflight;
    const bool check = c.rules.check_order;
    const int per = check ? 2 : 1;  // requests per message
    f.in_hdr.assign(recvs.size(), P2PHeader{});
    f.out_hdr.assign(c.sends.size(), P2PHeader{});
    f.reqs.clear();
    f.reqs.reserve((recvs.size() + c.sends.size()) * (size_t)per);
    if (c.recv_stage.size() < recvs.size()) c.recv_stage.resize(recvs.size());
    auto mpi_tag = [&](int tag) { return c.rules.strict ? 0 : tag; };  // strict: one tag, matched in order
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        void* dst = r.t.device == Device::CPU ? r.t.data : host_buffer(c, c.recv_stage[i], r.t.bytes(), true);
        MPI_Request q;
        if (check) {
            MPI_CHECK(MPI_Irecv(&f.in_hdr[i], (int)sizeof(P2PHeader), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &q));
            f.reqs.push_back(q);
        }
        MPI_CHECK(MPI_Irecv(dst, mpi_count((int64_t)r.t.bytes()), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &q));
        f.reqs.push_back(q);
    }
    for (size_t i = 0; i < c.sends.size(); i++) {
        Comm::PendingSend& p = c.sends[i];
        auto post = c.rules.strict ? MPI_Issend : MPI_Isend;
        MPI_Request q;
        if (check) {
            f.out_hdr[i] = P2PHeader{p.tag, (int64_t)p.bytes, (int64_t)c.sent[(size_t)p.peer]++};
            MPI_CHECK(post(&f.out_hdr[i], (int)sizeof(P2PHeader), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
            f.reqs.push_back(q);
        }
        MPI_CHECK(post(p.host.ptr, mpi_count((int64_t)p.bytes), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
        f.reqs.push_back(q);
    }
}

static void mpi_exchange_complete(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    const std::vector<P2PMessage>& recvs = f.recvs;
    const bool check = c.rules.check_order;
    const int per = check ? 2 : 1;
    std::vector<MPI_Status> st;
    mpi_wait(c, f.reqs, st, [&](size_t q) {
        const size_t m = q / (size_t)per;
        const std::string& which = m < recvs.size() ? recvs[m].what : c.sends[m - recvs.size()].what;
        return which + " in the exchange " + f.what;
    });
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        if (check) check_header(c, f.in_hdr[i], r, c.received[(size_t)r.peer]++);
        int got = 0;
        MPI_CHECK(MPI_Get_count(&st[i * (size_t)per + (size_t)(per - 1)], MPI_BYTE, &got));
        if ((size_t)got != r.t.bytes())
            mm_fatal("comm: %s: got %d bytes, expected %zu (the stages disagree on the shapes)", r.what.c_str(), got, r.t.bytes());
        if (r.t.device != Device::CPU) host_to_device(ctx, r.t, c.recv_stage[i].ptr);
    }
}

// NCCL: the exchange is one group on ctx.stream; the host returns at once. The timeout watches the previous
// exchange's end (event `exchanged`) before issuing the next, so the host runs at most one schedule unit
// ahead of the GPU, and a peer that never posts its side is reported here instead of hanging the stream.
static void nccl_watch(Comm& c) {
    if (c.rules.timeout_s <= 0 || c.exchanged_what.empty()) return;
    const double t0 = MPI_Wtime();
    for (;;) {
        cudaError_t e = cudaEventQuery(c.exchanged);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady)
            mm_fatal("CUDA error in cudaEventQuery(c.exchanged) at %s:%d (the exchange %s): %s", __FILE__, __LINE__,
                     c.exchanged_what.c_str(), cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(nccl_of(c), &async));
        if (async != ncclSuccess) mm_fatal("NCCL error during the exchange %s: %s", c.exchanged_what.c_str(), ncclGetErrorString(async));
        if (MPI_Wtime() - t0 > c.rules.timeout_s) {
            // Abort the communicator first, so that its kernels stop spinning, then every rank.
            NCCL_CHECK(ncclCommAbort(nccl_of(c)));
            c.nccl = nullptr;
            mm_fatal("comm timeout: rank %d of a group of %d waited %.1f s (--comm-timeout) for the exchange %s; stopping every rank",
                     c.rank, c.size, c.rules.timeout_s, c.exchanged_what.c_str());
        }
        const timespec pause{0, 50000};
        nanosleep(&pause, nullptr);
    }
    c.exchanged_what.clear();
}

static void nccl_exchange(Comm& c, cudaStream_t stream, const std::vector<P2PMessage>& recvs, const std::string& what) {
    nccl_watch(c);
    const bool check = c.rules.check_order;
    // The order check's headers: device copies of the headers, sent and received in the group before each
    // message; the received ones are read back (a host synchronization: debug builds only).
    Tensor hdr;
    std::vector<P2PHeader> host_hdr(c.sends.size() + recvs.size());
    if (check && !host_hdr.empty()) {
        for (size_t i = 0; i < c.sends.size(); i++)
            host_hdr[i] = P2PHeader{c.sends[i].tag, (int64_t)c.sends[i].bytes, (int64_t)c.sent[(size_t)c.sends[i].peer]++};
        hdr = tensor_alloc(Device::CUDA, DType::U8, (int64_t)(host_hdr.size() * sizeof(P2PHeader)));
        CUDA_CHECK(cudaMemcpyAsync(hdr.data, host_hdr.data(), c.sends.size() * sizeof(P2PHeader), cudaMemcpyHostToDevice, stream));
    }
    P2PHeader* dev_hdr = (P2PHeader*)hdr.data;
    NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        if (check) NCCL_CHECK(ncclRecv(dev_hdr + c.sends.size() + i, sizeof(P2PHeader), ncclUint8, r.peer, nccl_of(c), stream));
        NCCL_CHECK(ncclRecv(r.t.data, r.t.bytes(), ncclUint8, r.peer, nccl_of(c), stream));
    }
    for (size_t i = 0; i < c.sends.size(); i++) {
        const Comm::PendingSend& p = c.sends[i];
        if (check) NCCL_CHECK(ncclSend(dev_hdr + i, sizeof(P2PHeader), ncclUint8, p.peer, nccl_of(c), stream));
        NCCL_CHECK(ncclSend(p.device, p.bytes, ncclUint8, p.peer, nccl_of(c), stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(c.exchanged, stream));
    // For the timeout's message: the exchange and every message in it (their peers).
    c.exchanged_what = what + " (";
    for (const P2PMessage& r : recvs) c.exchanged_what += r.what + "; ";
    for (const Comm::PendingSend& p : c.sends) c.exchanged_what += p.what + "; ";
    c.exchanged_what.replace(c.exchanged_what.size() - 2, 2, ")");
    if (check && !host_hdr.empty()) {
        nccl_watch(c);
        CUDA_CHECK(cudaMemcpyAsync(host_hdr.data(), hdr.data, host_hdr.size() * sizeof(P2PHeader), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < recvs.size(); i++)
            check_header(c, host_hdr[c.sends.size() + i], recvs[i], c.received[(size_t)recvs[i].peer]++);
        tensor_free(hdr);
    }
}

void exchange_start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    if (c.inflight.active)
        mm_fatal("comm: exchange_start (%s) while the exchange %s is still in flight: finish it first", what.c_str(),
                 c.inflight.what.c_str());
    for (const P2PMessage& r : recvs) {
        check_tensor(c, ctx, r.t, "exchange");
        check_peer(c, r.peer, "exchange: receive from");
    }
    Comm::InFlight& f = c.inflight;
    f.active = true;
    f.what = what;
    f.recvs = recvs;
    f.stream = false;
    const double t0 = MPI_Wtime();
    if (recvs.empty() && c.sends.empty()) return;
    if (c.backend == CommBackend::NCCL) {
        // On the communication stream, after what ctx.stream has queued so far (the send copies, the
        // receive buffers' last readers); exchange_finish makes ctx.stream wait for its end.
        f.stream = ctx.comm_stream != nullptr;
        cudaStream_t s = f.stream ? ctx.comm_stream : ctx.stream;
        if (f.stream) {
            CUDA_CHECK(cudaEventRecord(c.ready, ctx.stream));
            CUDA_CHECK(cudaStreamWaitEvent(s, c.ready, 0));
        }
        nccl_exchange(c, s, recvs, what);
        if (f.stream) CUDA_CHECK(cudaEventRecord(c.done, s));
    } else {
        mpi_exchange_post(c, recvs);
    }
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void exchange_finish(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    if (!f.active) mm_fatal("comm: exchange_finish without an exchange_start");
    const double t0 = MPI_Wtime();
    if (!f.recvs.empty() || !c.sends.empty()) {
        if (c.backend == CommBackend::NCCL) {
            if (f.stream) CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, c.done, 0));
        } else {
            mpi_exchange_complete(c, ctx);
        }
    }
    // The send copies are free again: MPI has completed them; NCCL reads them on its stream before ctx.stream
    // (which waits for it) can run any later send_later's copy into them.
    for (Comm::PendingSend& p : c.sends) c.spare_sends.push_back(p);
    c.sends.clear();
    f.active = false;
    f.recvs.clear();
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void exchange(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    // The pipeline's exchanges run on ctx.stream itself (the next op needs what arrives at once).
    Ctx same = ctx;
    same.comm_stream = nullptr;
    exchange_start(c, same, recvs, what);
    exchange_finish(c, same);
}

void all_reduce_host(Comm& c, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what) {
    if (c.size == 1) return;
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, c.mpi, &req));
    mpi_wait_one(c, req, what);
}

void broadcast_host(Comm& c, void* data, int bytes, int root, const std::string& what) {
    if (c.size == 1) return;
    if (c.backend == CommBackend::NCCL) nccl_watch(c);
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(data, bytes, MPI_BYTE, root, c.mpi, &req));
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return what + " from rank " + std::to_string(root); });
}

// ---- used by tests only ----------------------------------------------------------------------------------
// Nothing in training calls these (comm.h); they stay here because they use the backends' internals.
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx,
                           const CommRules& rules) {
    return create(parent, color, key, backend, ctx, rules, true);
}

static void mpi_broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root) {
    int n = mpi_count(buf.n);
    MPI_Datatype type = mpi_type(buf.dtype);
    if (buf.device == Device::CPU) {
        MPI_Request req;
        MPI_CHECK(MPI_Ibcast(buf.data, n, type, root, c.mpi, &req));
        mpi_wait_one(c, req, "broadcast");
        return;
    }
    void* h = host_buffer(c, c.stage, buf.bytes(), true);
    if (c.rank == root) device_to_host(ctx, h, buf);
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(h, n, type, root, c.mpi, &req));
    mpi_wait_one(c, req, "broadcast");
    if (c.rank != root) host_to_device(ctx, buf, h);
}
static void nccl_broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root) {
    // Any dtype: broadcast moves bytes.
    NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.bytes(), ncclUint8, root, nccl_of(c), ctx.stream));
}

void broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root) {
    check_tensor(c, ctx, buf, "broadcast");
    if (root < 0 || root >= c.size) mm_fatal("comm: broadcast root %d outside a group of %d", root, c.size);
    if (is_noop(c) || buf.n == 0) return;
    if (c.backend == CommBackend::NCCL) nccl_broadcast(c, ctx, buf, root);
    else mpi_broadcast(c, ctx, buf, root);
    count(c, kBroadcast, buf.bytes());
}

void barrier(Comm& c) {
    if (c.size == 1) return;
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(c.mpi, &req));
    mpi_wait_one(c, req, "barrier");
}
