// nccl_test.cc — the emulated NCCL (nccl.cc) at 2 ranks (mpirun -np 2), one emulated GPU each:
//   checks    all-reduce (f32 sum and max, bf16 sum, in and out of place), all-gather and reduce-scatter in
//             place, broadcast, a grouped exchange where each rank sends to and receives from the other
//             (two messages each way, which must arrive in issue order: NCCL has no tags), an ungrouped send
//             answered by an ungrouped receive, operations of one communicator issued on two streams (run in
//             issue order), the refusals (bad peer, null buffer, unsupported datatype);
//   deadlock  both ranks send first, ungrouped: NCCL would hang, so must the emulator; after 3 s the test
//             aborts the communicator (ncclCommAbort must stop the pending send) and says so;
//   truncate  rank 1 receives fewer bytes than rank 0 sends: ncclCommGetAsyncError must report it.
#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

static int g_rank = 0, g_size = 1, g_checks = 0, g_failures = 0;

#define CUDA_OK(call)                                                                                         \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            std::fprintf(stderr, "CUDA error in %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                     \
        }                                                                                                     \
    } while (0)
#define NCCL_OK(call)                                                                                         \
    do {                                                                                                      \
        ncclResult_t r_ = (call);                                                                             \
        if (r_ != ncclSuccess) {                                                                              \
            std::fprintf(stderr, "NCCL error in %s at %s:%d: %s\n", #call, __FILE__, __LINE__, ncclGetErrorString(r_)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                     \
        }                                                                                                     \
    } while (0)

static void expect(bool ok, const std::string& what) {
    g_checks++;
    if (!ok) {
        g_failures++;
        std::printf("rank %d FAIL: %s\n", g_rank, what.c_str());
    }
}

template <class T>
static T* dev_upload(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_OK(cudaMalloc((void**)&d, h.size() * sizeof(T) + 1));
    CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T>
static std::vector<T> dev_download(const T* d, size_t n, cudaStream_t s) {
    CUDA_OK(cudaStreamSynchronize(s));
    std::vector<T> h(n);
    CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static uint16_t bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// Rank r's value of element i: distinct per rank and element, exact in bf16.
static float value(int r, size_t i) { return (float)((int)(i % 61) - 30) * 0.25f + (float)r; }

static ncclComm_t make_comm() {
    ncclUniqueId id;
    if (g_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c;
    NCCL_OK(ncclCommInitRank(&c, g_size, id, g_rank));
    return c;
}

static void checks(ncclComm_t c, cudaStream_t s, cudaStream_t s2) {
    const size_t n = 1000;
    const int peer = 1 - g_rank;
    // all-reduce f32 sum, out of place, and max in place
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
    float *a = dev_upload(h), *b = dev_upload(std::vector<float>(n, NAN));
    NCCL_OK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, c, s));
    std::vector<float> got = dev_download(b, n, s);
    bool ok = true;
    for (size_t i = 0; i < n; i++) ok = ok && got[i] == value(0, i) + value(1, i);
    expect(ok, "all-reduce f32 sum");
    NCCL_OK(ncclAllReduce(a, a, n, ncclFloat, ncclMax, c, s));
    got = dev_download(a, n, s);
    ok = true;
    for (size_t i = 0; i < n; i++) ok = ok && got[i] == std::max(value(0, i), value(1, i));
    expect(ok, "all-reduce f32 max, in place");
    // all-reduce bf16 sum in place
    std::vector<uint16_t> hb(n);
    for (size_t i = 0; i < n; i++) hb[i] = bf16(value(g_rank, i));
    uint16_t* db = dev_upload(hb);
    NCCL_OK(ncclAllReduce(db, db, n, ncclBfloat16, ncclSum, c, s));
    std::vector<uint16_t> gb = dev_download(db, n, s);
    ok = true;
    for (size_t i = 0; i < n; i++) ok = ok && f32(gb[i]) == f32(bf16(value(0, i) + value(1, i)));
    expect(ok, "all-reduce bf16 sum, in place");
    // all-gather in place: this rank's slot of the output is its input
    std::vector<float> hg(n * 2, NAN);
    for (size_t i = 0; i < n; i++) hg[(size_t)g_rank * n + i] = value(g_rank, i);
    float* g = dev_upload(hg);
    NCCL_OK(ncclAllGather(g + (size_t)g_rank * n, g, n, ncclFloat, c, s));
    got = dev_download(g, 2 * n, s);
    ok = true;
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < n; i++) ok = ok && got[(size_t)r * n + i] == value(r, i);
    expect(ok, "all-gather in place");
    // reduce-scatter in place: the rank's slot of the input receives the sum of that slot
    std::vector<float> hr(2 * n);
    for (size_t i = 0; i < 2 * n; i++) hr[i] = value(g_rank, i);
    float* rs = dev_upload(hr);
    NCCL_OK(ncclReduceScatter(rs, rs + (size_t)g_rank * n, n, ncclFloat, ncclSum, c, s));
    got = dev_download(rs + (size_t)g_rank * n, n, s);
    ok = true;
    for (size_t i = 0; i < n; i++) ok = ok && got[i] == value(0, (size_t)g_rank * n + i) + value(1, (size_t)g_rank * n + i);
    expect(ok, "reduce-scatter in place");
    // broadcast from rank 1
    std::vector<float> hbc(n);
    for (size_t i = 0; i < n; i++) hbc[i] = value(g_rank, i) * 3.f;
    float* bc = dev_upload(hbc);
    NCCL_OK(ncclBroadcast(bc, bc, n, ncclFloat, 1, c, s));
    got = dev_download(bc, n, s);
    ok = true;
    for (size_t i = 0; i < n; i++) ok = ok && got[i] == value(1, i) * 3.f;
    expect(ok, "broadcast from rank 1");

    // grouped exchange, two messages each way: the k-th send matches the k-th receive
    const size_t m = 3 << 20;  // 12 MB per message, beyond NCCL's internal buffers
    std::vector<float> s1(m, (float)(10 + g_rank)), s2v(m / 2, (float)(20 + g_rank));
    float *d1 = dev_upload(s1), *d2 = dev_upload(s2v);
    float *r1 = dev_upload(std::vector<float>(m, NAN)), *r2 = dev_upload(std::vector<float>(m / 2, NAN));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(d1, m, ncclFloat, peer, c, s));
    NCCL_OK(ncclSend(d2, m / 2, ncclFloat, peer, c, s));
    NCCL_OK(ncclRecv(r1, m, ncclFloat, peer, c, s));
    NCCL_OK(ncclRecv(r2, m / 2, ncclFloat, peer, c, s));
    NCCL_OK(ncclGroupEnd());
    std::vector<float> g1 = dev_download(r1, m, s), g2 = dev_download(r2, m / 2, s);
    expect(g1.front() == 10 + peer && g1.back() == 10 + peer && g2.front() == 20 + peer && g2.back() == 20 + peer,
           "grouped exchange: both messages, in issue order");
    // ungrouped: rank 0 sends then receives, rank 1 receives then sends (no deadlock)
    if (g_rank == 0) {
        NCCL_OK(ncclSend(d1, m, ncclFloat, peer, c, s));
        NCCL_OK(ncclRecv(r1, m, ncclFloat, peer, c, s));
    } else {
        NCCL_OK(ncclRecv(r1, m, ncclFloat, peer, c, s));
        NCCL_OK(ncclSend(d1, m, ncclFloat, peer, c, s));
    }
    g1 = dev_download(r1, m, s);
    expect(g1.front() == 10 + peer && g1.back() == 10 + peer, "ungrouped send answered by a receive");
    // one communicator on two streams: the all-reduce on s2 is issued after the broadcast on s and must run
    // after it (it reads the broadcast's result).
    float* x = dev_upload(std::vector<float>(n, (float)g_rank + 1));
    NCCL_OK(ncclBroadcast(x, x, n, ncclFloat, 0, c, s));
    NCCL_OK(ncclAllReduce(x, x, n, ncclFloat, ncclSum, c, s2));
    CUDA_OK(cudaStreamSynchronize(s));
    got = dev_download(x, n, s2);
    expect(got[0] == 2.f && got[n - 1] == 2.f, "one communicator, two streams: issue order kept");
    // refusals
    expect(ncclSend(d1, 4, ncclFloat, 2, c, s) == ncclInvalidArgument, "send to peer 2 of 2 refused");
    expect(ncclAllReduce(nullptr, a, 4, ncclFloat, ncclSum, c, s) == ncclInvalidArgument, "null sendbuff refused");
    expect(ncclAllReduce(a, a, 4, ncclFloat16, ncclSum, c, s) == ncclInvalidArgument, "fp16 reduction refused");
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(c, &async));
    expect(async == ncclSuccess, "no async error after the checks");
    for (void* p : {(void*)a, (void*)b, (void*)db, (void*)g, (void*)rs, (void*)bc, (void*)d1, (void*)d2, (void*)r1,
                    (void*)r2, (void*)x})
        CUDA_OK(cudaFree(p));
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const std::string mode = argc > 1 ? argv[1] : "checks";
    if (g_size != 2) {
        if (g_rank == 0) std::fprintf(stderr, "nccl_test: run with mpirun -np 2 (got %d ranks)\n", g_size);
        MPI_Finalize();
        return 1;
    }
    cudaStream_t s, s2;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    ncclComm_t c = make_comm();
    int rc = 0;
    if (mode == "checks") {
        checks(c, s, s2);
        NCCL_OK(ncclCommDestroy(c));
        int failures = 0;
        MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (g_rank == 0) std::printf("nccl_test: %d of %d checks passed on rank 0, %d failures on all ranks\n", g_checks - g_failures, g_checks, failures);
        rc = failures == 0 ? 0 : 1;
    } else if (mode == "deadlock" || mode == "truncate") {
        const size_t m = 1 << 18;
        float* out = dev_upload(std::vector<float>(m, 1.f));
        float* in = dev_upload(std::vector<float>(m, NAN));
        if (mode == "deadlock") {
            // Both ranks send first: the sends wait for receives that are queued behind them. Both calls return
            // at once (the work is queued on the stream), so both report success; the abort then stops the
            // pending send, and the receive queued behind it never runs.
            ncclResult_t sent = ncclInternalError, received = ncclInternalError;
            std::future<void> f = std::async(std::launch::async, [&] {
                sent = ncclSend(out, m, ncclFloat, 1 - g_rank, c, s);
                received = ncclRecv(in, m, ncclFloat, 1 - g_rank, c, s);
                CUDA_OK(cudaStreamSynchronize(s));
            });
            if (f.wait_for(std::chrono::seconds(3)) == std::future_status::ready) {
                std::printf("rank %d: both ranks sent first, ungrouped, and it completed: NCCL would have deadlocked\n", g_rank);
                rc = 1;
            } else {
                NCCL_OK(ncclCommAbort(c));
                const bool stopped = f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
                std::printf("rank %d: deadlock as on NCCL (both ranks send first, ungrouped); ncclCommAbort %s "
                            "(send: %s; the receive queued behind it: %s)\n", g_rank,
                            stopped ? "stopped the pending send" : "did NOT stop the pending send",
                            ncclGetErrorString(sent), ncclGetErrorString(received));
                rc = stopped && sent == ncclSuccess && received == ncclSuccess ? 0 : 1;
                if (!stopped) std::_Exit(1);
            }
        } else {
            if (g_rank == 0) NCCL_OK(ncclSend(out, m, ncclFloat, 1, c, s));
            else NCCL_OK(ncclRecv(in, m / 2, ncclFloat, 0, c, s));
            CUDA_OK(cudaStreamSynchronize(s));
            ncclResult_t async = ncclSuccess;
            NCCL_OK(ncclCommGetAsyncError(c, &async));
            if (g_rank == 1) {
                std::printf("rank 1: a receive of %zu bytes for a message of %zu: async error \"%s\"\n", m / 2 * 4, m * 4,
                            ncclGetErrorString(async));
                rc = async != ncclSuccess ? 0 : 1;
            }
            NCCL_OK(ncclCommDestroy(c));
        }
    } else {
        std::fprintf(stderr, "nccl_test: unknown mode %s (checks, deadlock, truncate)\n", mode.c_str());
        rc = 1;
    }
    MPI_Finalize();
    return rc;
}
