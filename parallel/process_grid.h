// process_grid.h — world = tp × dp × pp, in Megatron's default order: tp fastest, then dp, then pp.
//   tp_rank = rank % tp,  dp_rank = (rank / tp) % dp,  pp_rank = rank / (tp·dp)
// TP groups are consecutive ranks (as on a node, where NVLink joins them); a pipeline's stages are tp·dp
// ranks apart. With pp = 1 this is the plain tp × dp grid. One Comm per group:
//   tp_comm   the tp ranks of one (dp_rank, pp_rank)        tensor and sequence parallelism
//   dp_comm   the dp ranks of one (tp_rank, pp_rank)        gradient average
//   pp_comm   the pp ranks of one (tp_rank, dp_rank)        point-to-point between stages, ordered by stage
//   emb_comm  the first and the last stage of a pipeline    the tied word embedding's gradient sum
//             (a group of one rank on the other stages, and when pp = 1)
#pragma once
#include <string>
#include "comm.h"
#include "../layers/model_shape.h"

struct ProcessGrid {
    int rank = 0, world = 1;
    int tp = 1, dp = 1, pp = 1, tp_rank = 0, dp_rank = 0, pp_rank = 0;
    bool sp = false;  // sequence parallelism (meaningful when tp > 1)
    Comm tp_comm, dp_comm, pp_comm, emb_comm;
};

// Every divisibility rule of the layout, checked before anything is allocated. Returns "" when the layout
// is valid, else a message naming the numbers (e.g. "--tp 3 does not divide 4 heads").
std::string grid_validate(int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq, int pp = 1);

// Split MPI_COMM_WORLD into TP, DP and PP groups and create their communicators, all under `rules`
// (--comm mpi-strict, --comm-timeout; parallel/comm.h).
ProcessGrid grid_create(MPI_Comm world, int tp, bool sp, CommBackend backend, const Ctx& ctx, int pp = 1,
                        const CommRules& rules = {});
void grid_destroy(ProcessGrid& g);
