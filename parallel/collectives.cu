// collectives.cu — all-reduce, all-gather and reduce-scatter over NCCL or MPI (see collectives.h).
//
// Reading order: the ring model's byte count; the checks every collective makes; then one section per
// collective: what it computes, its bytes, the NCCL call and the MPI calls that do it. The MPI backend's
// plumbing (staging CUDA tensors through host memory, bf16 sums in fp32, waits under --comm-timeout) is the
// communicator's (comm.h, comm_detail) and is called down into here. The parallel layers only ever call the
// public functions, so tensor and sequence parallelism read the same whatever moves the bytes.
#include "collectives.h"

#include <nccl.h>
#include <cstring>
#include "../layers/trace.h"

using namespace comm_detail;

// ---- byte counters: the ring model ---------------------------------------------------------------------
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

// ---- the timeline (--trace, layers/trace.h) --------------------------------------------------------------------
// While a step is recorded, each collective is one event on the communication thread, named by its kind,
// its group ("all-reduce tp") and the caller's TraceLabel, with the ring-model bytes this rank sent (the
// counters' own figure) and the tensor's elements. On NCCL its ends are points on the stream it runs on
// (layers/trace.h: events, no synchronization), so the event spans the collective's device time; on MPI the
// host's (the collective is synchronous there). Nothing but a flag test when not recording.
struct CollectiveTrace {
    Comm& c;
    int kind;
    const char* how;
    int64_t elements;
    cudaStream_t stream;
    bool on = trace_recording();
    TracePoint t0;
    uint64_t bytes0 = 0;
    CollectiveTrace(Comm& c_, const Ctx& ctx, int kind_, int64_t elements_, const char* how_ = "", bool comm_stream = false)
        : c(c_), kind(kind_), how(how_), elements(elements_),
          stream(c_.backend == CommBackend::NCCL ? (comm_stream && ctx.comm_stream ? ctx.comm_stream : ctx.stream) : nullptr) {
        if (!on) return;
        bytes0 = c.counters.bytes[kind];
        t0 = trace_point(stream);
    }
    ~CollectiveTrace() {
        if (!on) return;
        const TracePoint t1 = trace_point(stream);
        const std::string& group = trace_group_name(&c);
        const char* label = trace_label();
        std::string name = std::string(collective_name(kind)) + how + " " + (group.empty() ? "group" : group);
        if (label) name += std::string(": ") + label;
        trace_event_between(TraceThread::Comm, "collective", name, t0, t1,
                    "\"group\":" + trace_json_string(group) + ",\"ranks\":" + std::to_string(c.size) + ",\"bytes\":" +
                        std::to_string(c.counters.bytes[kind] - bytes0) + ",\"elements\":" + std::to_string(elements) +
                        ",\"backend\":\"" + (c.backend == CommBackend::NCCL ? "nccl" : "mpi") + "\"");
    }
};

// ---- what every collective checks, and the backends' types -------------------------------------------------
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
static bool overlaps(Tensor a, Tensor b) {
    const char *a0 = (const char*)a.data, *b0 = (const char*)b.data;
    return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

// NCCL runs on the stream it is given and returns at once: the result is usable by later work on that
// stream, which is exactly the contract of collectives.h. Operations on one communicator run in the order
// they were issued, and every rank issues them in the same order (the program is SPMD).
static ncclComm_t nccl_of(const Comm& c) { return (ncclComm_t)c.nccl; }
static ncclDataType_t nccl_type(DType t) {
    if (t == DType::F32) return ncclFloat;
    if (t == DType::BF16) return ncclBfloat16;
    mm_fatal("comm: NCCL reductions and gathers take f32 or bf16 tensors, not %s", dtype_name(t));
}
// Element types for the MPI collectives that only move bytes (all-gather, broadcast): MPI counts are ints,
// so counting elements rather than bytes keeps the limit at 2^31 elements.
static MPI_Datatype mpi_type(DType t) {
    switch (t) {
        case DType::F32: return MPI_FLOAT;
        case DType::BF16: return MPI_UINT16_T;  // moved, never added: the bits are all that matter
        case DType::U8: return MPI_UINT8_T;
        case DType::I32: return MPI_INT32_T;
    }
    return MPI_BYTE;
}

// ---- all-reduce: buf = Σ (or max) over the ranks of buf -------------------------------------------------
// Bytes: 2(t-1)/t·n·d per rank. NCCL: ncclAllReduce in place on ctx.stream. Note on bf16 sums: NCCL adds in
// fp32 inside each step but stores bf16 between ring steps, so with more than two ranks it may round more
// than once; the MPI backend rounds exactly once. Both are what the respective libraries (and Megatron on
// them) do; the tests compare each against its own expectation.
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

void all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op) {
    check_tensor(c, ctx, buf, "all_reduce");
    check_reducible(buf, "all_reduce");
    if (is_noop(c) || buf.n == 0) return;
    CollectiveTrace trace(c, ctx, kAllReduce, buf.n);
    if (c.backend == CommBackend::NCCL)
        NCCL_CHECK(ncclAllReduce(buf.data, buf.data, (size_t)buf.n, nccl_type(buf.dtype),
                                 op == ReduceOp::SUM ? ncclSum : ncclMax, nccl_of(c), ctx.stream));
    else
        mpi_all_reduce(c, ctx, buf, op);
    count(c, kAllReduce, buf.bytes());
}

// ---- all-gather: out = [in of rank 0, in of rank 1, ...] -----------------------------------------------------
// Bytes: (t-1)/t·n·d per rank, n the gathered size. NCCL: ncclAllGather (in place when in == out + rank·in.n,
// the layout collectives.h describes). MPI: MPI_Iallgather, through a pinned host copy for CUDA tensors.
static void nccl_all_gather(Comm& c, cudaStream_t stream, Tensor out, Tensor in) {
    NCCL_CHECK(ncclAllGather(in.data, out.data, (size_t)in.n, nccl_type(in.dtype), nccl_of(c), stream));
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

void all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    check_pair(c, ctx, in, out, "all_gather");
    if (is_noop(c)) return copy_if_distinct(ctx, out, in);
    if (in.n == 0) return;
    CollectiveTrace trace(c, ctx, kAllGather, out.n);
    if (c.backend == CommBackend::NCCL) nccl_all_gather(c, ctx.stream, out, in);
    else mpi_all_gather(c, ctx, out, in);
    count(c, kAllGather, out.bytes());
}

// ---- reduce-scatter: out = Σ over the ranks of their in[rank·out.n .. (rank+1)·out.n) -----------------------
// Bytes: (t-1)/t·n·d per rank, n the full input's size. NCCL: ncclReduceScatter. MPI:
// MPI_Ireduce_scatter_block, straight on fp32 CPU tensors, otherwise on an fp32 host copy of the input.
static void mpi_reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    int n = mpi_count(out.n);
    if (in.device == Device::CPU && in.dtype == DType::F32 && !overlaps(in, out)) {
        MPI_Request req;
        MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, n, MPI_FLOAT, MPI_SUM, c.mpi, &req));
        mpi_wait_one(c, req, "reduce-scatter");
        return;
    }
    // With MPI_IN_PLACE the input is the receive buffer and this rank's reduced block lands at its start.
    float* w = (float*)host_buffer(c, c.wide, in.n * sizeof(float), in.device == Device::CUDA);
    load_f32(c, ctx, in, w);
    MPI_Request req;
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, w, n, MPI_FLOAT, MPI_SUM, c.mpi, &req));
    mpi_wait_one(c, req, "reduce-scatter");
    store_f32(c, ctx, out, w);
}

void reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    check_pair(c, ctx, out, in, "reduce_scatter");
    if (is_noop(c)) return copy_if_distinct(ctx, out, in);
    if (out.n == 0) return;
    CollectiveTrace trace(c, ctx, kReduceScatter, in.n);
    if (c.backend == CommBackend::NCCL)
        NCCL_CHECK(ncclReduceScatter(in.data, out.data, (size_t)out.n, nccl_type(in.dtype), ncclSum, nccl_of(c),
                                     ctx.stream));
    else
        mpi_reduce_scatter(c, ctx, out, in);
    count(c, kReduceScatter, in.bytes());
}

// ---- the overlapped all-gather ---------------------------------------------------------------------------
// Sequence parallelism's backward re-gathers the column-parallel linear's input while the GPU computes
// the input gradient (paper §4.2.2). For the all-gather to overlap, it must be issued first and on its own
// stream: ctx.comm_stream waits until ctx.stream has produced `in` (event `ready`), runs the all-gather,
// and marks its end (event `done`); comm_wait makes ctx.stream wait for `done` before using `out`.
// Until comm_wait, the caller must not overwrite `in` nor read `out` on ctx.stream.
// An exchange in flight (exchange_start, point_to_point.cu) uses the same two events on NCCL: refused on
// every backend, so that a CPU test catches what would break on the GPU.
void all_gather_async(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    if (c.inflight.active)
        mm_fatal("comm: all_gather_async while the exchange %s is in flight on the same communicator (exchange_start "
                 "without exchange_finish): the two share the communicator's events; call exchange_finish first",
                 c.inflight.what.c_str());
    if (c.backend != CommBackend::NCCL || is_noop(c) || in.n == 0) return all_gather(c, ctx, out, in);
    check_pair(c, ctx, in, out, "all_gather_async");
    CUDA_CHECK(cudaEventRecord(c.ready, ctx.stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx.comm_stream, c.ready, 0));
    CollectiveTrace trace(c, ctx, kAllGather, out.n, " (overlapped)", true);  // on comm_stream, once its input is there
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

// ---- used by tests only: broadcast ------------------------------------------------------------------------
// Bytes: (t-1)/t·n·d per rank. NCCL: ncclBroadcast of the raw bytes. MPI: MPI_Ibcast, staged for CUDA tensors.
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

void broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root) {
    check_tensor(c, ctx, buf, "broadcast");
    if (root < 0 || root >= c.size) mm_fatal("comm: broadcast root %d outside a group of %d", root, c.size);
    if (is_noop(c) || buf.n == 0) return;
    CollectiveTrace trace(c, ctx, kBroadcast, buf.n);
    if (c.backend == CommBackend::NCCL)  // any dtype: broadcast moves bytes
        NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.bytes(), ncclUint8, root, nccl_of(c), ctx.stream));
    else
        mpi_broadcast(c, ctx, buf, root);
    count(c, kBroadcast, buf.bytes());
}
