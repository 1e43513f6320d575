// test_gpu_comm.cu — the collectives on CUDA tensors.
//   test_gpu_comm mpi   (mpirun -np 2, both ranks may share one GPU): the MPI backend staging CUDA tensors
//                       through pinned host buffers; plus the live "two ranks on one GPU" detection.
//   test_gpu_comm nccl  (mpirun -np 1): a 1-rank NCCL communicator created anyway (comm_create_exercised)
//                       so that every NCCL call and the two-stream all_gather_async run on one GPU. With
//                       more ranks on distinct GPUs it runs the same checks on a real NCCL group, and a ring
//                       exchange (grouped ncclSend / ncclRecv of 16 MB, the order check on), and every
//                       pipeline schedule's exchanges with 16 MB messages (pipeline_exchange_checks.h).
//   test_gpu_comm nccl_shared  (manual, not in CTest: it is meant to stop the job) with 2 ranks on one GPU:
//                       comm_create(NCCL) must stop with "NCCL cannot run two ranks on one GPU; use --comm mpi".
// Without a GPU every rank exits 77 (CTest: skipped); mpirun passes 77 on when all ranks return it.
#include "comm_checks.h"
#include "pipeline_exchange_checks.h"
#include "../../parallel/point_to_point.h"
#include "../../parallel/gpu_identity.h"

static int g_rank = 0, g_size = 1;

// Every rank must skip, or none: a lone rank exiting would leave the others waiting in a collective.
static void skip_unless_every_rank_has_gpu(const char* name) {
    int mine = cuda_available() ? 1 : 0, all = 0;
    MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (all) return;
    MPI_Finalize();
    if (!mine) require_gpu_or_skip(name);  // prints the reason and exits 77
    printf("%s: another rank sees no CUDA GPU, skipping\n", name);
    exit(77);
}

// The gathered output is produced on ctx.comm_stream; reading it back on ctx.stream alone (no device-wide
// synchronize) is only correct if comm_wait ordered ctx.stream after the gather. The input is written on
// ctx.stream just before, so the gather must also wait for ctx.stream (event `ready`).
static void check_async_ordering(Comm& c, const Ctx& ctx) {
    const int64_t n = 1 << 20;
    std::vector<float> mine(n), expect;
    for (int64_t i = 0; i < n; i++) mine[i] = comm_value(c.rank, i);
    for (int r = 0; r < c.size; r++)
        for (int64_t i = 0; i < n; i++) expect.push_back(comm_value(r, i));
    Tensor in = tensor_alloc(Device::CUDA, DType::F32, n);
    Tensor out = tensor_alloc(Device::CUDA, DType::F32, c.size * n);
    CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.bytes(), ctx.stream));
    CUDA_CHECK(cudaMemcpyAsync(in.data, mine.data(), in.bytes(), cudaMemcpyHostToDevice, ctx.stream));
    all_gather_async(c, ctx, out, in);
    comm_wait(c, ctx);
    std::vector<float> got(c.size * n);
    CUDA_CHECK(cudaMemcpyAsync(got.data(), out.data, out.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    CHECK(bitwise_equal(got, expect), "all_gather_async + comm_wait, read back on ctx.stream");
    tensor_free(in);
    tensor_free(out);
}

// Point to point on CUDA tensors: every rank sends a tensor to the next rank of a ring and receives one from
// the previous, in one exchange (a ring of sends first would hang on NCCL without the group). 16 MB, more than
// NCCL's internal buffers (4 MB by default), so that NCCL's send must wait for the receive: the case an
// ungrouped order deadlocks on. The order check is on (headers sent and read back).
static void check_ring_exchange(Comm& c, const Ctx& ctx) {
    if (c.size < 2) return;
    const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
    const int64_t n = 4 << 20;
    std::vector<float> mine(n), want(n);
    for (int64_t i = 0; i < n; i++) mine[i] = comm_value(c.rank, i), want[i] = comm_value(prev, i);
    Tensor out = tensor_alloc(Device::CUDA, DType::F32, n), in = tensor_alloc(Device::CUDA, DType::F32, n);
    CUDA_CHECK(cudaMemcpyAsync(out.data, mine.data(), out.bytes(), cudaMemcpyHostToDevice, ctx.stream));
    for (int round = 0; round < 2; round++) {
        CUDA_CHECK(cudaMemsetAsync(in.data, 0, in.bytes(), ctx.stream));
        send_later(c, ctx, out, next, 1, "the ring's send");
        exchange(c, ctx, {P2PMessage{in, prev, 1, "the ring's receive"}}, "the ring");
        std::vector<float> got(n);
        CUDA_CHECK(cudaMemcpyAsync(got.data(), in.data, in.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        CHECK(bitwise_equal(got, want), "ring exchange of CUDA tensors (round %d, %s)", round,
              c.backend == CommBackend::NCCL ? "nccl" : "mpi");
    }
    tensor_free(out);
    tensor_free(in);
}

static CommRules checked_rules() {
    CommRules r;
    r.check_order = true;
    r.timeout_s = 120;
    return r;
}

static void run_mpi(const Ctx& ctx) {
    Comm world = comm_create(MPI_COMM_WORLD, 0, g_rank, CommBackend::MPI, ctx);
    check_collectives(world, ctx);
    // Pinned staging buffers are allocated on first use and then reused: a second round allocates nothing.
    uint64_t allocs = world.host_allocs;
    check_collectives(world, ctx);
    check_async_ordering(world, ctx);
    check_async_ordering(world, ctx);
    uint64_t after_warmup = world.host_allocs;
    check_async_ordering(world, ctx);
    check_collectives(world, ctx);
    CHECK(world.host_allocs == after_warmup, "staging grew after warm-up (%llu -> %llu)",
          (unsigned long long)after_warmup, (unsigned long long)world.host_allocs);
    CHECK(allocs > 0 || world.size == 1, "CUDA tensors were not staged");
    CHECK(world.stage.ptr == nullptr || world.stage.pinned, "staging buffer is not pinned");
    CHECK(world.wide.ptr == nullptr || world.wide.pinned, "fp32 staging buffer is not pinned");
    comm_destroy(world);
    {
        CommRules strict = checked_rules();
        strict.strict = true;
        Comm s = comm_create(MPI_COMM_WORLD, 0, g_rank, CommBackend::MPI, ctx, strict);
        check_ring_exchange(s, ctx);  // staged through pinned host buffers, one per receive
        check_pipeline_schedules(s, ctx, 1 << 18);
        comm_destroy(s);
    }

    // The live detection: ranks sharing a GPU (same host and PCI bus id) must be reported, distinct GPUs not.
    std::vector<GpuIdentity> ids = gather_gpu_identities(MPI_COMM_WORLD, ctx.cuda_device);
    bool shared = false;
    for (size_t a = 0; a < ids.size(); a++)
        for (size_t b = a + 1; b < ids.size(); b++)
            shared |= ids[a].host == ids[b].host && ids[a].pci_bus_id == ids[b].pci_bus_id;
    std::string msg = shared_gpu_error(ids);
    CHECK(msg.empty() == !shared, "shared-GPU detection: shared=%d, message '%s'", (int)shared, msg.c_str());
    if (g_rank == 0)
        printf("test_gpu_comm: %d ranks, %s: %s\n", g_size, shared ? "GPU shared" : "one GPU each",
               shared ? msg.c_str() : "NCCL usable");
}

static void run_nccl(const Ctx& ctx) {
    std::vector<GpuIdentity> ids = gather_gpu_identities(MPI_COMM_WORLD, ctx.cuda_device);
    if (!shared_gpu_error(ids).empty()) {
        // comm_create would stop the job with that message (by design); nothing NCCL can be run here.
        if (g_rank == 0) printf("test_gpu_comm nccl: ranks share a GPU; run it with -np 1\n");
        return;
    }
    // On one rank comm_create gives a no-op group with no NCCL communicator ...
    Comm plain = comm_create(MPI_COMM_WORLD, 0, g_rank, CommBackend::NCCL, ctx);
    CHECK((plain.nccl == nullptr) == (g_size == 1), "NCCL communicator created only for groups of 2+");
    check_collectives(plain, ctx);
    check_async_ordering(plain, ctx);
    comm_destroy(plain);
    // With a GPU per rank: a real NCCL group of sends and receives on the compute stream, the order check on.
    Comm p2p = comm_create(MPI_COMM_WORLD, 0, g_rank, CommBackend::NCCL, ctx, checked_rules());
    check_ring_exchange(p2p, ctx);
    check_pipeline_schedules(p2p, ctx, 4 << 20);  // 16 MB messages: NCCL's sends wait for their receives
    comm_destroy(p2p);
    // ... so the test asks for one anyway, and runs every collective through NCCL.
    Comm c = comm_create_exercised(MPI_COMM_WORLD, 0, g_rank, CommBackend::NCCL, ctx);
    CHECK(c.nccl != nullptr && c.ready != nullptr && c.done != nullptr, "NCCL communicator and events created");
    check_collectives(c, ctx);
    check_async_ordering(c, ctx);
    CHECK(c.host_allocs == 0, "the NCCL backend staged through host memory");
    comm_destroy(c);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    skip_unless_every_rank_has_gpu("test_gpu_comm");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    std::string mode = argc > 1 ? argv[1] : "mpi";

    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    Ctx ctx = ctx_create(Device::CUDA, local_rank(MPI_COMM_WORLD).rank % ndev);
    if (mode == "nccl") {
        run_nccl(ctx);
    } else if (mode == "nccl_shared") {
        Comm c = comm_create(MPI_COMM_WORLD, 0, g_rank, CommBackend::NCCL, ctx);  // expected to stop here
        printf("test_gpu_comm nccl_shared: rank %d got a NCCL communicator (ranks are on distinct GPUs)\n", g_rank);
        comm_destroy(c);
    } else {
        run_mpi(ctx);
    }
    ctx_destroy(ctx);

    int failed = g_failures > 0, any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char name[80];
    snprintf(name, sizeof name, "test_gpu_comm %s[rank %d of %d]", mode.c_str(), g_rank, g_size);
    int rc = test_finish(name);
    MPI_Finalize();
    return any_failed ? 1 : rc;
}
