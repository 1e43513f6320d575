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
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data, mpi_count(buf.n), MPI_FLOAT, mop, c.mpi));
        return;
    }
    // bf16 (widened so the sum is done in fp32) or a CUDA tensor (staged): reduce an fp32 host copy.
    float* w = (float*)host_buffer(c, c.wide, buf.n * sizeof(float), buf.device == Device::CUDA);
    load_f32(c, ctx, buf, w);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, w, mpi_count(buf.n), MPI_FLOAT, mop, c.mpi));
    store_f32(c, ctx, buf, w);
}

static void mpi_all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    int n = mpi_count(in.n);
    MPI_Datatype type = mpi_type(in.dtype);
    size_t my_offset = (size_t)c.rank * in.bytes();
    if (out.device == Device::CPU) {
        // In place when `in` already sits in this rank's slot of `out`.
        bool in_place = (char*)in.data == (char*)out.data + my_offset;
        MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in.data, n, type, out.data, n, type, c.mpi));
        return;
    }
    char* h = (char*)host_buffer(c, c.stage, out.bytes(), true);
    device_to_host(ctx, h + my_offset, in);
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, n, type, c.mpi));
    host_to_device(ctx, out, h);
}

static void mpi_reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in) {
    int n = mpi_count(out.n);
    if (in.device == Device::CPU && in.dtype == DType::F32 && !overlaps(in, out)) {
        MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, n, MPI_FLOAT, MPI_SUM, c.mpi));
        return;
    }
    // On an fp32 host copy of the whole input: with MPI_IN_PLACE the input is the receive buffer and this
    // rank's reduced block lands at its start.
    float* w = (float*)host_buffer(c, c.wide, in.n * sizeof(float), in.device == Device::CUDA);
    load_f32(c, ctx, in, w);
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, w, n, MPI_FLOAT, MPI_SUM, c.mpi));
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
static Comm create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx, bool exercise) {
    Comm c;
    c.backend = backend;
    c.exercise_single_rank = exercise;
    MPI_CHECK(MPI_Comm_split(parent, color, key, &c.mpi));
    MPI_CHECK(MPI_Comm_rank(c.mpi, &c.rank));
    MPI_CHECK(MPI_Comm_size(c.mpi, &c.size));
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
    return c;
}

Comm comm_create(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx) {
    return create(parent, color, key, backend, ctx, false);
}
void comm_destroy(Comm& c) {
    wait_sends(c);
    for (Comm::PendingSend& p : c.spare_sends) {
        if (p.device) CUDA_CHECK(cudaFree(p.device));
        host_buffer_free(p.host);
    }
    if (c.send_stream) CUDA_CHECK(cudaStreamDestroy(c.send_stream));
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
// A send copies the tensor into a buffer of its own (taken from spare_sends when one is big enough) and
// starts the transfer: MPI_Isend from host memory, or ncclSend on send_stream after ctx.stream has produced
// the tensor. Receives are blocking (MPI) or queued on ctx.stream (NCCL). Tensors cross between ranks of one
// job, so the bytes are moved as they are (bf16 stays bf16).
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

void send_async(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag) {
    check_tensor(c, ctx, t, "send_async");
    if (peer < 0 || peer >= c.size || peer == c.rank) mm_fatal("comm: send_async to rank %d of a group of %d", peer, c.size);
    const size_t bytes = t.bytes();
    if (c.backend == CommBackend::NCCL) {
        if (!c.send_stream) CUDA_CHECK(cudaStreamCreateWithFlags(&c.send_stream, cudaStreamNonBlocking));
        Comm::PendingSend p = take_send_buffer(c, bytes, true);
        CUDA_CHECK(cudaMemcpyAsync(p.device, t.data, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
        CUDA_CHECK(cudaEventRecord(c.ready, ctx.stream));
        CUDA_CHECK(cudaStreamWaitEvent(c.send_stream, c.ready, 0));
        NCCL_CHECK(ncclSend(p.device, bytes, ncclUint8, peer, nccl_of(c), c.send_stream));
        c.sends.push_back(p);
    } else {
        Comm::PendingSend p = take_send_buffer(c, bytes, false);
        if (t.device == Device::CPU) memcpy(p.host.ptr, t.data, bytes);
        else device_to_host(ctx, p.host.ptr, t);
        MPI_CHECK(MPI_Isend(p.host.ptr, mpi_count((int64_t)bytes), MPI_BYTE, peer, tag, c.mpi, &p.request));
        c.sends.push_back(p);
    }
    c.counters.p2p_sends += 1;
    c.counters.p2p_bytes += bytes;
}

void recv(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag) {
    check_tensor(c, ctx, t, "recv");
    if (peer < 0 || peer >= c.size || peer == c.rank) mm_fatal("comm: recv from rank %d of a group of %d", peer, c.size);
    const size_t bytes = t.bytes();
    const double t0 = MPI_Wtime();
    if (c.backend == CommBackend::NCCL) {
        NCCL_CHECK(ncclRecv(t.data, bytes, ncclUint8, peer, nccl_of(c), ctx.stream));
    } else {
        void* dst = t.device == Device::CPU ? t.data : host_buffer(c, c.stage, bytes, true);
        MPI_Status status;
        MPI_CHECK(MPI_Recv(dst, mpi_count((int64_t)bytes), MPI_BYTE, peer, tag, c.mpi, &status));
        int got = 0;
        MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
        if ((size_t)got != bytes)
            mm_fatal("comm: recv from stage %d got %d bytes, expected %zu (the stages disagree on the shapes)", peer, got, bytes);
        if (t.device != Device::CPU) host_to_device(ctx, t, dst);
    }
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void wait_sends(Comm& c) {
    if (c.sends.empty()) return;
    if (c.backend == CommBackend::NCCL) {
        CUDA_CHECK(cudaStreamSynchronize(c.send_stream));
    } else {
        for (Comm::PendingSend& p : c.sends) MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE));
    }
    for (Comm::PendingSend& p : c.sends) c.spare_sends.push_back(p);
    c.sends.clear();
}

// ---- used by tests only ----------------------------------------------------------------------------------
// Nothing in training calls these (comm.h); they stay here because they use the backends' internals.
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx) {
    return create(parent, color, key, backend, ctx, true);
}

static void mpi_broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root) {
    int n = mpi_count(buf.n);
    MPI_Datatype type = mpi_type(buf.dtype);
    if (buf.device == Device::CPU) {
        MPI_CHECK(MPI_Bcast(buf.data, n, type, root, c.mpi));
        return;
    }
    void* h = host_buffer(c, c.stage, buf.bytes(), true);
    if (c.rank == root) device_to_host(ctx, h, buf);
    MPI_CHECK(MPI_Bcast(h, n, type, root, c.mpi));
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
    MPI_CHECK(MPI_Barrier(c.mpi));
}
