// process_grid.cu — the (tp, cp, dp, pp) process grid and the checks that refuse an impossible layout.
#include "process_grid.h"

#include <cstdio>

std::string grid_validate(int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq, int pp, int cp) {
    char m[512];
    if (tp < 1) return "--tp must be at least 1";
    if (pp < 1) return "--pp must be at least 1";
    if (cp < 1) return "--cp must be at least 1";
    if (world % tp != 0) {
        snprintf(m, sizeof m, "--tp %d does not divide the world size %d (mpirun -np %d): use a tp that divides it",
                 tp, world, world);
        return m;
    }
    if (cp == 1 && world % (tp * pp) != 0) {  // with cp > 1 the next check names every axis
        snprintf(m, sizeof m, "the world size %d (mpirun -np %d) is not divisible by tp x pp = %d x %d = %d", world, world,
                 tp, pp, tp * pp);
        return m;
    }
    if (world % (tp * cp * pp) != 0) {
        snprintf(m, sizeof m, "the world size %d (mpirun -np %d) is not divisible by tp x cp x pp = %d x %d x %d = %d",
                 world, world, tp, cp, pp, tp * cp * pp);
        return m;
    }
    if (pp > 1 && cfg.layers < pp) {
        snprintf(m, sizeof m, "--pp %d needs at least %d layers (one per stage); the model has %d", pp, pp, cfg.layers);
        return m;
    }
    if (cfg.layers % pp != 0) {
        snprintf(m, sizeof m, "--pp %d does not divide %d layers (every stage holds the same number of layers)", pp,
                 cfg.layers);
        return m;
    }
    int dp = world / (tp * cp * pp);
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
        if (cp > 1)
            snprintf(m, sizeof m, "--batch %d is not divisible by the data-parallel size %d (= world %d / (tp %d x cp %d x pp %d))",
                     batch, dp, world, tp, cp, pp);
        else if (pp > 1)
            snprintf(m, sizeof m, "--batch %d is not divisible by the data-parallel size %d (= world %d / (tp %d x pp %d))",
                     batch, dp, world, tp, pp);
        else
            snprintf(m, sizeof m, "--batch %d is not divisible by the data-parallel size %d (= world %d / tp %d)", batch,
                     dp, world, tp);
        return m;
    }
    if (seq > cfg.max_seq) {
        snprintf(m, sizeof m, "--seq %d exceeds the model's maximum sequence length %d (--max-seq, the rows of its position "
                 "embedding): a fresh model takes --max-seq %d; a model from --init or --resume keeps its own, so give --seq %d "
                 "or less", seq, cfg.max_seq, seq, cfg.max_seq);
        return m;
    }
    if (cp > 1 && seq % (2 * cp) != 0) {
        snprintf(m, sizeof m, "--seq %d is not divisible by 2 x cp = %d: context parallelism cuts the sequence into 2c "
                 "chunks of equal length (rank r holds chunks r and 2c-1-r)", seq, 2 * cp);
        return m;
    }
    if (cp > 1 && sp && tp > 1 && (seq / cp) % tp != 0) {
        snprintf(m, sizeof m, "--seq %d / cp %d = %d tokens per CP rank is not divisible by --tp %d: sequence parallelism "
                 "splits each CP rank's tokens into tp shards", seq, cp, seq / cp, tp);
        return m;
    }
    if (sp && tp > 1 && seq % tp != 0) {
        snprintf(m, sizeof m, "--seq %d is not divisible by --tp %d: sequence parallelism splits the sequence into tp shards",
                 seq, tp);
        return m;
    }
    return "";
}

ProcessGrid grid_create(MPI_Comm world, int tp, bool sp, CommBackend backend, const Ctx& ctx, int pp, const CommRules& rules,
                        int cp) {
    ProcessGrid g;
    MPI_CHECK(MPI_Comm_rank(world, &g.rank));
    MPI_CHECK(MPI_Comm_size(world, &g.world));
    g.tp = tp;
    g.cp = cp;
    g.pp = pp;
    g.dp = g.world / (tp * cp * pp);
    g.tp_rank = g.rank % tp;
    g.cp_rank = (g.rank / tp) % cp;
    g.dp_rank = (g.rank / (tp * cp)) % g.dp;
    g.pp_rank = g.rank / (tp * cp * g.dp);
    g.sp = sp && tp > 1;
    // Each group is the set of ranks that agree on the other coordinates (the colour), ordered by their own.
    const int in_stage = (g.dp_rank * cp + g.cp_rank) * tp + g.tp_rank;  // position inside one pipeline stage
    g.tp_comm = comm_create(world, (g.pp_rank * g.dp + g.dp_rank) * cp + g.cp_rank, g.tp_rank, backend, ctx, rules);
    g.dp_comm = comm_create(world, (g.pp_rank * cp + g.cp_rank) * tp + g.tp_rank, g.dp_rank, backend, ctx, rules);
    if (cp > 1) {
        g.cp_comm = comm_create(world, (g.pp_rank * g.dp + g.dp_rank) * tp + g.tp_rank, g.cp_rank, backend, ctx, rules);
        g.dpcp_comm = comm_create(world, g.pp_rank * tp + g.tp_rank, weight_rank(g), backend, ctx, rules);
    }
    g.pp_comm = comm_create(world, in_stage, g.pp_rank, backend, ctx, rules);
    // The first and last stage of each pipeline share a group; every other rank is a group of its own.
    const bool ends = g.pp_rank == 0 || g.pp_rank == pp - 1;
    g.emb_comm = comm_create(world, ends ? in_stage : g.world + g.rank, g.pp_rank, backend, ctx, rules);
    return g;
}

void grid_destroy(ProcessGrid& g) {
    comm_destroy(g.tp_comm);
    comm_destroy(g.dp_comm);
    comm_destroy(g.pp_comm);
    comm_destroy(g.emb_comm);
    if (g.cp > 1) {
        comm_destroy(g.cp_comm);
        comm_destroy(g.dpcp_comm);
    }
}
