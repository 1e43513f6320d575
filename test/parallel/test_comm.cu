// test_comm.cu — the MPI backend on CPU tensors, run under mpirun with 2 and 4 ranks: every collective
// against values computed locally, the byte counters' ring model, sub-communicators (TP groups of
// consecutive ranks, DP groups striding, as docs/design.md's process grid), a 1-rank group's no-ops, barrier,
// local_rank, and the pure "two ranks on one GPU" check that guards NCCL (parallel/gpu_identity.cu). Point
// to point: a ring exchange, plain and under NCCL's rules (--comm mpi-strict), and every pipeline schedule's
// exchanges under those rules; with an argument, the expected failures (expected_failure below).
#include <unistd.h>
#include <sys/stat.h>
#include "comm_checks.h"
#include "pipeline_exchange_checks.h"
#include "../../parallel/point_to_point.h"
#include "../../parallel/gpu_identity.h"

static int g_world_rank = 0, g_world_size = 1;

// TP groups: consecutive ranks (color rank / tp); DP groups: ranks tp apart (color rank % tp).
static void check_sub_communicators(const Ctx& ctx) {
    const int tp = 2;
    if (g_world_size % tp != 0) return;
    Comm tpc = comm_create(MPI_COMM_WORLD, g_world_rank / tp, g_world_rank % tp, CommBackend::MPI, ctx);
    Comm dpc = comm_create(MPI_COMM_WORLD, g_world_rank % tp, g_world_rank / tp, CommBackend::MPI, ctx);
    CHECK(tpc.size == tp && tpc.rank == g_world_rank % tp, "TP group: size %d rank %d", tpc.size, tpc.rank);
    CHECK(dpc.size == g_world_size / tp && dpc.rank == g_world_rank / tp, "DP group: size %d rank %d", dpc.size,
          dpc.rank);

    // Gathering the world ranks lists each group's members in key order.
    auto members = [&](Comm& c) {
        Tensor me = make_tensor(Device::CPU, DType::F32, {(float)g_world_rank});
        Tensor all = tensor_alloc(Device::CPU, DType::F32, c.size);
        all_gather(c, ctx, all, me);
        std::vector<float> v = tensor_to_host_f32(all);
        tensor_free(me);
        tensor_free(all);
        return v;
    };
    std::vector<float> tp_expect, dp_expect;
    for (int i = 0; i < tp; i++) tp_expect.push_back((float)(g_world_rank / tp * tp + i));
    for (int i = 0; i < g_world_size / tp; i++) dp_expect.push_back((float)(g_world_rank % tp + i * tp));
    CHECK(bitwise_equal(members(tpc), tp_expect), "TP group members of world rank %d", g_world_rank);
    CHECK(bitwise_equal(members(dpc), dp_expect), "DP group members of world rank %d", g_world_rank);

    // Collectives stay inside their group: the sum of world ranks is the group's own.
    Tensor x = make_tensor(Device::CPU, DType::F32, {(float)g_world_rank});
    all_reduce(tpc, ctx, x, ReduceOp::SUM);
    float tp_sum = 0;
    for (float r : tp_expect) tp_sum += r;
    CHECK(tensor_to_host_f32(x)[0] == tp_sum, "TP all_reduce: %g, want %g", tensor_to_host_f32(x)[0], tp_sum);
    tensor_free(x);

    // The full suite on each group (a DP group of one rank, with 2 ranks in all, runs the no-op path).
    check_collectives(tpc, ctx);
    check_collectives(dpc, ctx);
    comm_destroy(tpc);
    comm_destroy(dpc);

    // `key` orders the ranks: a negated key reverses them.
    Comm rev = comm_create(MPI_COMM_WORLD, 0, -g_world_rank, CommBackend::MPI, ctx);
    CHECK(rev.rank == g_world_size - 1 - g_world_rank, "reversed key: rank %d", rev.rank);
    check_collectives(rev, ctx);
    comm_destroy(rev);
}

// A group of one rank: no-ops that count nothing; all_gather / reduce_scatter copy in -> out.
static void check_single_rank_group(const Ctx& ctx) {
    Comm one = comm_create(MPI_COMM_WORLD, g_world_rank, 0, CommBackend::MPI, ctx);
    CHECK(one.size == 1 && one.rank == 0, "single-rank group: size %d", one.size);
    std::vector<float> v = comm_input(g_world_rank, 6);
    Tensor a = make_tensor(Device::CPU, DType::F32, v), b = tensor_zeros(Device::CPU, DType::F32, 6);
    all_reduce(one, ctx, a, ReduceOp::SUM);
    CHECK(bitwise_equal(tensor_to_host_f32(a), v), "1-rank all_reduce changed its buffer");
    all_gather(one, ctx, b, a);
    CHECK(bitwise_equal(tensor_to_host_f32(b), v), "1-rank all_gather did not copy in -> out");
    tensor_zero(ctx, b);
    reduce_scatter(one, ctx, b, a);
    CHECK(bitwise_equal(tensor_to_host_f32(b), v), "1-rank reduce_scatter did not copy in -> out");
    broadcast(one, ctx, a, 0);
    barrier(one);
    for (int k = 0; k < kNumCollectives; k++)
        CHECK(one.counters.calls[k] == 0 && one.counters.bytes[k] == 0, "1-rank group counted a %s",
              collective_name(k));
    check_collectives(one, ctx);
    CHECK(one.host_allocs == 0, "a 1-rank group staged something");
    tensor_free(a);
    tensor_free(b);
    comm_destroy(one);
}

// No rank passes the barrier before every rank reached it: each rank writes a marker file (later ranks
// first, earlier ranks after a delay) and, after the barrier, must see every rank's marker.
static void check_barrier(Comm& world) {
    int job = (int)getpid();
    MPI_CHECK(MPI_Bcast(&job, 1, MPI_INT, 0, world.mpi));
    auto marker = [&](int r) { return "/tmp/mm_test_comm_" + std::to_string(job) + "_" + std::to_string(r); };
    usleep((useconds_t)(world.size - 1 - world.rank) * 50000);
    FILE* f = fopen(marker(world.rank).c_str(), "w");
    CHECK(f != nullptr, "cannot write %s", marker(world.rank).c_str());
    if (f) fclose(f);
    barrier(world);
    struct stat st;
    for (int r = 0; r < world.size; r++)
        CHECK(stat(marker(r).c_str(), &st) == 0, "rank %d passed the barrier before rank %d reached it", world.rank, r);
    barrier(world);  // nobody removes its marker while another rank may still be looking
    remove(marker(world.rank).c_str());
}

// The pure check behind "NCCL cannot run two ranks on one GPU", on made-up inputs.
static void check_shared_gpu_detection() {
    auto id = [](int w, const char* host, const char* bus) {
        GpuIdentity g;
        g.world_rank = w;
        g.host = host;
        g.pci_bus_id = bus;
        return g;
    };
    std::vector<GpuIdentity> ok = {id(0, "n1", "0000:07:00.0"), id(1, "n1", "0000:0F:00.0"),
                                   id(2, "n2", "0000:07:00.0"), id(3, "n2", "0000:0F:00.0")};
    CHECK(shared_gpu_error(ok).empty(), "distinct GPUs (same bus id on different hosts) flagged: %s",
          shared_gpu_error(ok).c_str());
    CHECK(shared_gpu_error({}).empty() && shared_gpu_error({id(0, "n1", "0000:07:00.0")}).empty(),
          "empty or single-rank lists flagged");

    std::vector<GpuIdentity> bad = ok;
    bad[3] = id(7, "n1", "0000:0f:00.0");  // group rank 3 (world rank 7) on group rank 1's GPU; case differs
    std::string msg = shared_gpu_error(bad);
    CHECK(msg.find("NCCL cannot run two ranks on one GPU; use --comm mpi") != std::string::npos,
          "message lacks the advice: '%s'", msg.c_str());
    CHECK(msg.find("ranks 1 and 3") != std::string::npos && msg.find("world ranks 1 and 7") != std::string::npos,
          "message does not name both ranks: '%s'", msg.c_str());
    CHECK(msg.find("n1") != std::string::npos, "message does not name the host: '%s'", msg.c_str());
}

// Point to point (pipeline parallelism): each rank sends two tensors to the next rank in a ring and
// receives two from the previous one in one exchange, receives posted in the order of the sends (NCCL matches
// by order, not by tag: point_to_point.h); the sender changes and frees its tensor at once (send_later copied it). A
// ring whose every rank sends before it receives needs the exchange to be a group: with rendezvous sends
// (strict rules) each rank's send waits for its neighbour's receive. The byte counter counts what was sent.
static void check_point_to_point(Comm& world, const Ctx& ctx) {
    if (world.size < 2) return;
    const int next = (world.rank + 1) % world.size, prev = (world.rank + world.size - 1) % world.size;
    std::vector<float> a(1000), b(37);
    for (size_t i = 0; i < a.size(); i++) a[i] = (float)(world.rank * 10000 + (int)i);
    for (size_t i = 0; i < b.size(); i++) b[i] = -(float)(world.rank * 100 + (int)i);
    Tensor ta = tensor_alloc(Device::CPU, DType::F32, (int64_t)a.size()), tb = tensor_alloc(Device::CPU, DType::BF16, (int64_t)b.size());
    tensor_from_host_f32(ta, a.data());
    tensor_from_host_f32(tb, b.data());
    world.counters.reset();
    send_later(world, ctx, ta, next, 7, "a");
    send_later(world, ctx, tb, next, 8, "b");
    tensor_zero(ctx, ta);  // the sends hold their own copies
    tensor_free(ta);
    Tensor ra = tensor_alloc(Device::CPU, DType::F32, (int64_t)a.size()), rb = tensor_alloc(Device::CPU, DType::BF16, (int64_t)b.size());
    exchange(world, ctx, {P2PMessage{ra, prev, 7, "a"}, P2PMessage{rb, prev, 8, "b"}}, "the ring");
    CHECK(world.sends.empty(), "the exchange left %zu sends queued", world.sends.size());
    std::vector<float> ga = tensor_to_host_f32(ra), gb = tensor_to_host_f32(rb);
    bool ok = true;
    for (size_t i = 0; i < a.size(); i++) ok = ok && ga[i] == (float)(prev * 10000 + (int)i);
    for (size_t i = 0; i < b.size(); i++) ok = ok && gb[i] == to_f32(from_f32<bf16>(-(float)(prev * 100 + (int)i)));
    CHECK(ok, "rank %d: point-to-point tensors from rank %d arrived wrong (strict %d)", world.rank, prev, (int)world.rules.strict);
    CHECK(world.counters.p2p_sends == 2 && world.counters.p2p_bytes == a.size() * 4 + b.size() * 2,
          "p2p counter: %llu sends, %llu bytes (expected 2, %zu)", (unsigned long long)world.counters.p2p_sends,
          (unsigned long long)world.counters.p2p_bytes, a.size() * 4 + b.size() * 2);
    // A second round reuses the send copies: no new host buffer.
    const uint64_t allocs = world.host_allocs;
    Tensor again = tensor_alloc(Device::CPU, DType::F32, (int64_t)a.size());
    tensor_zero(ctx, again);
    send_later(world, ctx, again, next, 9, "again");
    exchange(world, ctx, {P2PMessage{ra, prev, 9, "again"}}, "the second ring");
    CHECK(world.host_allocs == allocs, "point-to-point buffers grew on the second round");
    // An exchange with nothing to do returns at once.
    exchange(world, ctx, {}, "nothing");
    tensor_free(again);
    tensor_free(tb);
    tensor_free(ra);
    tensor_free(rb);
}

// Expected failures (registered with test/expect_error.sh; every rank must stop, none may hang):
//  --order-mismatch: rank 1 receives rank 0's two messages in the reverse of their send order. Legal MPI
//                    with tags, but NCCL would swap the buffers: the order check stops it, naming both.
//  --silent-peer:    rank 1 never posts its receive; rank 0's strict exchange times out after 1 s, naming
//                    the peer and the message.
//  --gather-during-exchange: every rank starts a ring exchange (exchange_start) and, before exchange_finish,
//                    an all_gather_async on the same communicator. On NCCL the two would share the Comm's
//                    events; the refusal, made on every backend, names both.
static int expected_failure(const std::string& mode, const Ctx& ctx) {
    CommRules rules;
    rules.strict = true;
    rules.check_order = true;
    rules.timeout_s = mode == "--silent-peer" ? 1 : 30;
    Comm c = comm_create(MPI_COMM_WORLD, 0, g_world_rank, CommBackend::MPI, ctx, rules);
    Tensor x = tensor_alloc(Device::CPU, DType::F32, 64), y = tensor_alloc(Device::CPU, DType::F32, 64);
    tensor_zero(ctx, x);
    if (mode == "--order-mismatch") {
        if (c.rank == 0) {
            send_later(c, ctx, x, 1, 7, "first");
            send_later(c, ctx, y, 1, 8, "second");
            exchange(c, ctx, {}, "rank 0's two sends");
        } else if (c.rank == 1) {
            exchange(c, ctx, {P2PMessage{y, 0, 8, "the second message from rank 0"}, P2PMessage{x, 0, 7, "the first message from rank 0"}},
                     "rank 1's two receives");
        }
    } else if (mode == "--gather-during-exchange") {
        const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
        Tensor full = tensor_alloc(Device::CPU, DType::F32, 64 * (int64_t)c.size);
        send_later(c, ctx, x, next, 7, "K to the next rank");
        exchange_start(c, ctx, {P2PMessage{y, prev, 7, "K from the previous rank"}}, "of the ring's K");
        all_gather_async(c, ctx, full, x);
        comm_wait(c, ctx);
        exchange_finish(c, ctx);
        tensor_free(full);
    } else if (c.rank == 0) {
        send_later(c, ctx, x, 1, 7, "the send of x to rank 1");
        exchange(c, ctx, {}, "rank 0's send");
    }
    barrier(c);  // rank 1 (--silent-peer) waits here until rank 0's timeout ends the job
    printf("rank %d: %s did not fail\n", c.rank, mode.c_str());
    return 1;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
    Ctx ctx = ctx_create(Device::CPU);
    if (argc > 1) {
        int rc = expected_failure(argv[1], ctx);
        MPI_Finalize();
        return rc;
    }

    Comm world = comm_create(MPI_COMM_WORLD, 0, g_world_rank, CommBackend::MPI, ctx);
    CHECK(world.size == g_world_size && world.rank == g_world_rank, "world comm: rank %d size %d", world.rank,
          world.size);
    check_collectives(world, ctx);
    // A second identical round reuses the staging buffers: nothing allocated after warm-up.
    uint64_t allocs = world.host_allocs;
    check_collectives(world, ctx);
    CHECK(world.host_allocs == allocs, "host buffers grew after warm-up (%llu -> %llu)",
          (unsigned long long)allocs, (unsigned long long)world.host_allocs);
    CHECK(!world.stage.pinned && !world.wide.pinned && world.stage.ptr == nullptr,
          "CPU tensors must not use pinned (CUDA) staging");

    check_sub_communicators(ctx);
    check_single_rank_group(ctx);
    check_point_to_point(world, ctx);
    {
        // The same under NCCL's rules (rendezvous sends, one tag), with the order check and a timeout.
        CommRules strict;
        strict.strict = true;
        strict.check_order = true;
        strict.timeout_s = 60;
        Comm s = comm_create(MPI_COMM_WORLD, 0, g_world_rank, CommBackend::MPI, ctx, strict);
        check_point_to_point(s, ctx);
        check_pipeline_schedules(s, ctx, 4096);  // every schedule's exchanges, on the ranks of the world
        check_collectives(s, ctx);  // the collectives polled against the timeout
        comm_destroy(s);
    }
    check_barrier(world);
    {
        // A request outside any Comm waited on under a timeout (what train_gpt's collective refusals can use).
        MPI_Request req;
        MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
        comm_wait_request(req, 30, "a barrier on MPI_COMM_WORLD");
    }
    check_shared_gpu_detection();
    // One node here: the node-local rank is the world rank, and every rank is on the node.
    LocalRank local = local_rank(MPI_COMM_WORLD);
    CHECK(local.rank == g_world_rank, "local_rank %d on world rank %d", local.rank, g_world_rank);
    CHECK(local.size == g_world_size, "%d ranks on this node, world size %d", local.size, g_world_size);

    comm_destroy(world);
    ctx_destroy(ctx);
    // Every rank's verdict: the job fails if any rank failed.
    int failed = g_failures > 0, any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_comm[rank %d of %d]", g_world_rank, g_world_size);
    int rc = test_finish(name);
    MPI_Finalize();
    return any_failed ? 1 : rc;
}
