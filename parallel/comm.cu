// comm.cu — the communicator (see comm.h): its creation over MPI or NCCL, the ranks on a node, the host
// scalars' all-reduce, and the plumbing that collectives.cu and point_to_point.cu call down into.
//
// Reading order: host staging buffers and bf16 in fp32 (the MPI backend's way to move CUDA tensors and sum
// bf16), waiting under the timeout, the checks every operation makes, the ranks on a node, creation and
// destruction (the backends' set-up), the host scalars; at the end, the functions only tests use.
#include "comm.h"
#include "gpu_identity.h"

#include <nccl.h>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include "../layers/trace.h"

using namespace comm_detail;

const char* collective_name(int kind) {
    switch (kind) {
        case kAllReduce: return "all-reduce";
        case kAllGather: return "all-gather";
        case kReduceScatter: return "reduce-scatter";
        case kBroadcast: return "broadcast";
    }
    return "?";
}

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
void* comm_detail::host_buffer(Comm& c, HostBuffer& b, size_t bytes, bool pinned) {
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
void comm_detail::device_to_host(const Ctx& ctx, void* dst, Tensor src) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}
void comm_detail::host_to_device(const Ctx& ctx, Tensor dst, const void* src) {
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
void comm_detail::load_f32(Comm& c, const Ctx& ctx, Tensor t, float* dst) {
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
void comm_detail::store_f32(Comm& c, const Ctx& ctx, Tensor t, const float* src) {
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
// that a peer that stopped or died is reported by name instead of leaving this rank waiting forever. For its
// first kCommSpinUs (0.5 ms) the wait spins (the common case: the peer is microseconds away); after that each
// poll sleeps 20 µs, so that a rank waiting out a long bubble leaves the cores to the ranks that compute. (By
// time, not by a count of polls: how long a wait may spin is then the same on every machine.) On expiry `pending(i)` describes the first request not done; the message names this rank
// (mm_fatal), and mm_fatal's MPI_Abort ends every rank.
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
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, reqs.data(), &done, statuses.data()));
        if (done) return;
        const double waited = MPI_Wtime() - t0;
        if (waited > timeout_s) break;
        if (waited > kCommSpinUs * 1e-6) {
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
void comm_detail::mpi_wait(const Comm& c, std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
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
void comm_detail::mpi_wait_one(const Comm& c, MPI_Request req, const char* op) {
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return std::string("the ") + op + " of its group (" + world_ranks(c) + ")"; });
}

// ---- what every operation checks -------------------------------------------------------------------------
bool comm_detail::is_noop(const Comm& c) { return c.size == 1 && !c.exercise_single_rank; }

void comm_detail::check_tensor(const Comm& c, const Ctx& ctx, Tensor t, const char* what) {
    if (t.n > 0 && !t.data) mm_fatal("comm: %s: null tensor", what);
    if (t.device == Device::CUDA && ctx.device != Device::CUDA)
        mm_fatal("comm: %s: a CUDA tensor needs a CUDA context", what);
    if (c.backend == CommBackend::NCCL && t.device != Device::CUDA)
        mm_fatal("comm: %s: the NCCL backend takes CUDA tensors only; use --comm mpi for CPU tensors", what);
}
// MPI counts are ints.
int comm_detail::mpi_count(int64_t n) {
    if (n > INT_MAX) mm_fatal("comm: %lld elements exceed one MPI call's limit (2^31 - 1)", (long long)n);
    return (int)n;
}

static ncclComm_t nccl_of(const Comm& c) { return (ncclComm_t)c.nccl; }

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
    c.sent.assign((size_t)c.size * 2, 0);  // per (peer, channel): point_to_point.cu
    c.received.assign((size_t)c.size * 2, 0);
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
    if (!c.posted_recvs.empty()) mm_fatal("comm_destroy: %zu receives posted and never waited for", c.posted_recvs.size());
    for (Comm::PostedSend& p : c.posted_sends) {  // sends posted (exchange_post) that their peers receive as they finish
        std::vector<MPI_Request> reqs{p.reqs[0], p.reqs[1]};
        std::vector<MPI_Status> st;
        mpi_wait(c, reqs, st, [&](size_t) { return p.send.what + " (posted, waited for at the end)"; });
        c.spare_sends.push_back(p.send);
    }
    c.posted_sends.clear();
    for (HostBuffer& b : c.spare_stage) host_buffer_free(b);
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
    if (c.side != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c.side));
    if (c.mpi != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c.mpi));
    c = Comm();
}

// ---- the step's host scalars ---------------------------------------------------------------------------------
// While a step is recorded (--trace, layers/trace.h), each is one event on the communication thread, named by
// `what` and the group, with the bytes of the values.
void all_reduce_host(Comm& c, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what) {
    if (c.size == 1) return;
    const double t0 = trace_recording() ? trace_now_us() : 0;
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, c.mpi, &req));
    mpi_wait_one(c, req, what);
    if (trace_recording()) {
        int type_bytes = 0;
        MPI_CHECK(MPI_Type_size(type, &type_bytes));
        const std::string& group = trace_group_name(&c);
        trace_event(trace_host_thread(), "collective", std::string(what) + " (host, " + (group.empty() ? "group" : group) + ")", t0,
                    trace_now_us() - t0, "\"group\":" + trace_json_string(group) + ",\"ranks\":" + std::to_string(c.size) +
                                             ",\"bytes\":" + std::to_string((long long)count * type_bytes));
    }
}

// ---- used by tests only ----------------------------------------------------------------------------------
// Nothing in training calls these (comm.h). (The test-only broadcast is a collective: collectives.cu.)
Comm comm_create_exercised(MPI_Comm parent, int color, int key, CommBackend backend, const Ctx& ctx,
                           const CommRules& rules) {
    return create(parent, color, key, backend, ctx, rules, true);
}

void barrier(Comm& c) {
    if (c.size == 1) return;
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(c.mpi, &req));
    mpi_wait_one(c, req, "barrier");
}
