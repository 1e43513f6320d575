// process_grid.cu — the (tp, dp) process grid and the checks that refuse an impossible layout.
#include "process_grid.h"

#include <cstdio>

std::string grid_validate(int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq) {
    char m[512];
    if (tp < 1) return "--tp must be at least 1";
    if (world % tp != 0) {
        snprintf(m, sizeof m, "--tp %d does not divide the world size %d (mpirun -np %d): use a tp that divides it",
                 tp, world, world);
        return m;
    }
    int dp = world / tp;
    if (cfg.heads % tp != 0) {
        snprintf(m, sizeof m, "--tp %d does not divide %d heads (tensor parallelism splits attention heads)", tp,
                 cfg.heads);
        return m;
    }
    if ((4 * cfg.channels) % tp != 0) {
        snprintf(m, sizeof m, "--tp %d does not divide the MLP width 4*hidden = %d", tp, 4 * cfg.channels);
        return m;
    }
    if (cfg.padded_vocab % tp != 0) {
        snprintf(m, sizeof m, "--tp %d does not divide the padded vocabulary %d (vocab-parallel embedding)", tp,
                 cfg.padded_vocab);
        return m;
    }
    if (batch % dp != 0) {
        snprintf(m, sizeof m, "--batch %d is not divisible by the data-parallel size %d (= world %d / tp %d)", batch,
                 dp, world, tp);
        return m;
    }
    if (seq > cfg.max_seq) {
        snprintf(m, sizeof m, "--seq %d exceeds the model's maximum sequence length %d", seq, cfg.max_seq);
        return m;
    }
    if (sp && tp > 1 && seq % tp != 0) {
        snprintf(m, sizeof m, "--seq %d is not divisible by --tp %d: sequence parallelism splits the sequence into tp shards",
                 seq, tp);
        return m;
    }
    return "";
}

ProcessGrid grid_create(MPI_Comm world, int tp, bool sp, CommBackend backend, const Ctx& ctx) {
    ProcessGrid g;
    MPI_CHECK(MPI_Comm_rank(world, &g.rank));
    MPI_CHECK(MPI_Comm_size(world, &g.world));
    g.tp = tp;
    g.dp = g.world / tp;
    g.tp_rank = g.rank % tp;
    g.dp_rank = g.rank / tp;
    g.sp = sp && tp > 1;
    // TP group: the tp consecutive ranks sharing dp_rank. DP group: the ranks sharing tp_rank.
    g.tp_comm = comm_create(world, g.dp_rank, g.tp_rank, backend, ctx);
    g.dp_comm = comm_create(world, g.tp_rank, g.dp_rank, backend, ctx);
    return g;
}

void grid_destroy(ProcessGrid& g) {
    comm_destroy(g.tp_comm);
    comm_destroy(g.dp_comm);
}
