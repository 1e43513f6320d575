// test_process_grid.cu — the (tp, dp) process grid (parallel/process_grid.cu), run under mpirun with 1, 2
// and 4 ranks: for every tp that divides the world, each rank's coordinates (tp_rank = rank % tp,
// dp_rank = rank / tp), the members of its TP group (tp consecutive ranks) and of its DP group (ranks tp
// apart), and collectives that stay inside their group; then grid_validate's message for each layout it
// must refuse, word for word (the trainer prints them as they are).
#include "../../parallel/collectives.h"
#include "../../parallel/process_grid.h"
#include "../test_util.h"

static int g_world_rank = 0, g_world_size = 1;

// The world ranks of a group's members, in group-rank order (each rank contributes its own).
static std::vector<float> members(Comm& c, const Ctx& ctx) {
    Tensor me = make_tensor(Device::CPU, DType::F32, {(float)g_world_rank});
    Tensor all = tensor_alloc(Device::CPU, DType::F32, c.size);
    all_gather(c, ctx, all, me);
    std::vector<float> v = tensor_to_host_f32(all);
    tensor_free(me);
    tensor_free(all);
    return v;
}

static void check_grid(const Ctx& ctx, int tp, bool sp) {
    ProcessGrid g = grid_create(MPI_COMM_WORLD, tp, sp, CommBackend::MPI, ctx);
    const int dp = g_world_size / tp;
    CHECK(g.rank == g_world_rank && g.world == g_world_size, "tp %d: rank %d world %d", tp, g.rank, g.world);
    CHECK(g.tp == tp && g.dp == dp, "tp %d: grid is tp %d x dp %d, want %d x %d", tp, g.tp, g.dp, tp, dp);
    CHECK(g.tp_rank == g_world_rank % tp && g.dp_rank == g_world_rank / tp,
          "tp %d, world rank %d: tp_rank %d dp_rank %d", tp, g_world_rank, g.tp_rank, g.dp_rank);
    // Sequence parallelism only means something with more than one TP rank.
    CHECK(g.sp == (sp && tp > 1), "tp %d, --sp %d: grid.sp %d", tp, (int)sp, (int)g.sp);
    // Each communicator's own rank is the grid coordinate along it.
    CHECK(g.tp_comm.size == tp && g.tp_comm.rank == g.tp_rank, "tp %d: TP comm size %d rank %d", tp, g.tp_comm.size,
          g.tp_comm.rank);
    CHECK(g.dp_comm.size == dp && g.dp_comm.rank == g.dp_rank, "tp %d: DP comm size %d rank %d", tp, g.dp_comm.size,
          g.dp_comm.rank);

    // TP group: dp_rank·tp + 0 .. tp-1 (consecutive, as on one node). DP group: tp_rank + i·tp (strided).
    std::vector<float> tp_expect, dp_expect;
    for (int i = 0; i < tp; i++) tp_expect.push_back((float)(g.dp_rank * tp + i));
    for (int i = 0; i < dp; i++) dp_expect.push_back((float)(g.tp_rank + i * tp));
    std::vector<float> tp_got = members(g.tp_comm, ctx), dp_got = members(g.dp_comm, ctx);
    CHECK(bitwise_equal(tp_got, tp_expect), "tp %d, world rank %d: TP group starts at %g, want %g", tp, g_world_rank,
          tp_got.empty() ? -1.0 : tp_got[0], tp_expect[0]);
    CHECK(bitwise_equal(dp_got, dp_expect), "tp %d, world rank %d: DP group starts at %g, want %g", tp, g_world_rank,
          dp_got.empty() ? -1.0 : dp_got[0], dp_expect[0]);

    // A sum over each group is the sum of that group's world ranks: the groups do not leak into each other.
    float tp_sum = 0, dp_sum = 0;
    for (float r : tp_expect) tp_sum += r;
    for (float r : dp_expect) dp_sum += r;
    Tensor x = make_tensor(Device::CPU, DType::F32, {(float)g_world_rank});
    all_reduce(g.tp_comm, ctx, x, ReduceOp::SUM);
    CHECK(tensor_to_host_f32(x)[0] == tp_sum, "tp %d: TP all_reduce %g, want %g", tp, tensor_to_host_f32(x)[0], tp_sum);
    tensor_free(x);
    x = make_tensor(Device::CPU, DType::F32, {(float)g_world_rank});
    all_reduce(g.dp_comm, ctx, x, ReduceOp::SUM);
    CHECK(tensor_to_host_f32(x)[0] == dp_sum, "tp %d: DP all_reduce %g, want %g", tp, tensor_to_host_f32(x)[0], dp_sum);
    tensor_free(x);

    grid_destroy(g);
    CHECK(g.tp_comm.mpi == MPI_COMM_NULL && g.dp_comm.mpi == MPI_COMM_NULL, "grid_destroy left a communicator");
}

static GPTConfig small_config() {
    GPTConfig c;
    c.layers = 2;
    c.heads = 4;
    c.channels = 64;
    c.vocab = 257;
    c.padded_vocab = 384;
    c.max_seq = 256;
    return c;
}

// grid_validate(world, tp, sp, cfg, batch, seq) must return exactly `want` ("" = a valid layout).
static void expect_validate(const char* want, int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq) {
    std::string got = grid_validate(world, tp, sp, cfg, batch, seq);
    CHECK(got == want, "grid_validate(world %d, tp %d, sp %d, batch %d, seq %d):\n  got  '%s'\n  want '%s'", world, tp,
          (int)sp, batch, seq, got.c_str(), want);
}

static void check_validate() {
    const GPTConfig c = small_config();
    // Layouts that work: every divisibility rule holds.
    expect_validate("", 1, 1, false, c, 8, 64);
    expect_validate("", 4, 2, true, c, 8, 64);
    expect_validate("", 4, 4, true, c, 1, 64);
    expect_validate("", 8, 2, false, c, 4, 256);
    // Without SP the sequence need not split into tp shards; with --sp but tp 1 there is nothing to split.
    expect_validate("", 2, 2, false, c, 2, 63);
    expect_validate("", 1, 1, true, c, 2, 63);

    expect_validate("--tp must be at least 1", 2, 0, false, c, 8, 64);
    expect_validate("--tp 3 does not divide the world size 4 (mpirun -np 4): use a tp that divides it", 4, 3, false, c,
                    8, 64);
    expect_validate("--tp 2 does not divide the world size 1 (mpirun -np 1): use a tp that divides it", 1, 2, false, c,
                    8, 64);
    GPTConfig six_heads = c;
    six_heads.heads = 6;
    six_heads.channels = 96;
    expect_validate("--tp 4 does not divide 6 heads (tensor parallelism splits attention heads)", 4, 4, false,
                    six_heads, 8, 64);
    GPTConfig narrow = c;  // 8 heads, but the MLP width 4·5 = 20 does not split 8 ways
    narrow.heads = 8;
    narrow.channels = 5;
    expect_validate("--tp 8 does not divide the MLP width 4*hidden = 20", 8, 8, false, narrow, 8, 64);
    GPTConfig odd_vocab = c;  // 8 heads and 4·64 MLP columns split 8 ways; 260 vocabulary rows do not
    odd_vocab.heads = 8;
    odd_vocab.padded_vocab = 260;
    expect_validate("--tp 8 does not divide the padded vocabulary 260 (vocab-parallel embedding)", 8, 8, false,
                    odd_vocab, 8, 64);
    expect_validate("--batch 3 is not divisible by the data-parallel size 2 (= world 4 / tp 2)", 4, 2, false, c, 3, 64);
    expect_validate("--batch 6 is not divisible by the data-parallel size 4 (= world 4 / tp 1)", 4, 1, false, c, 6, 64);
    expect_validate("--seq 512 exceeds the model's maximum sequence length 256 (--max-seq, the rows of its position "
                    "embedding): a fresh model takes --max-seq 512; a model from --init or --resume keeps its own, so "
                    "give --seq 256 or less",
                    1, 1, false, c, 8, 512);
    expect_validate("--seq 30 is not divisible by --tp 4: sequence parallelism splits the sequence into tp shards", 4, 4,
                    true, c, 4, 30);
    expect_validate("--seq 63 is not divisible by --tp 2: sequence parallelism splits the sequence into tp shards", 2, 2,
                    true, c, 2, 63);

    // This job's own world size: every tp from 1 to 4 is either valid or refused for not dividing it.
    for (int tp = 1; tp <= 4; tp++) {
        char want[256] = "";
        if (g_world_size % tp != 0)
            snprintf(want, sizeof want,
                     "--tp %d does not divide the world size %d (mpirun -np %d): use a tp that divides it", tp,
                     g_world_size, g_world_size);
        expect_validate(want, g_world_size, tp, true, c, 4 * g_world_size, 64);
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
    Ctx ctx = ctx_create(Device::CPU);

    int grids = 0;
    for (int tp = 1; tp <= g_world_size; tp++) {
        if (g_world_size % tp != 0) continue;
        check_grid(ctx, tp, false);
        check_grid(ctx, tp, true);
        grids++;
    }
    CHECK(grids == (g_world_size == 4 ? 3 : g_world_size), "%d layouts checked on %d ranks", grids, g_world_size);
    check_validate();

    ctx_destroy(ctx);
    // Every rank's verdict: the job fails if any rank failed.
    int failed = g_failures > 0, any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_process_grid[rank %d of %d]", g_world_rank, g_world_size);
    int rc = test_finish(name);
    MPI_Finalize();
    return any_failed ? 1 : rc;
}
