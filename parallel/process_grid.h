// process_grid.h — world = tp × cp × dp × pp, in Megatron-LM's order: tp fastest, then cp, dp, pp.
//   tp_rank = rank % tp,  cp_rank = (rank / tp) % cp,  dp_rank = (rank / (tp·cp)) % dp,  pp_rank = rank / (tp·cp·dp)
// TP groups are consecutive ranks (as on a node, where NVLink joins them), a CP group's ranks are tp apart
// (the next-closest, for ring attention's traffic); a pipeline's stages are tp·cp·dp ranks apart. With
// cp = pp = 1 this is the plain tp × dp grid. One Comm per group:
//   tp_comm    the tp ranks of one (cp_rank, dp_rank, pp_rank)     tensor and sequence parallelism
//   cp_comm    the cp ranks of one (tp_rank, dp_rank, pp_rank)     context parallelism's ring (K and V)
//   dp_comm    the dp ranks of one (tp_rank, cp_rank, pp_rank)     which sequences of the batch a rank holds
//   dpcp_comm  the dp·cp ranks of one (tp_rank, pp_rank)           the gradient sum and the distributed
//              (only when cp > 1; weight_comm picks the group)     optimizer's shards: CP ranks hold the same
//                                                                  weights, as DP ranks do
//   pp_comm    the pp ranks of one (tp_rank, cp_rank, dp_rank)     point-to-point between stages, by stage
//   emb_comm   the first and the last stage of a pipeline          the tied word embedding's gradient sum
//              (a group of one rank on the other stages, and when pp = 1)
#pragma once
#include <string>
#include "comm.h"
#include "../layers/model_shape.h"

struct ProcessGrid {
    int rank = 0, world = 1;
    int tp = 1, dp = 1, pp = 1, tp_rank = 0, dp_rank = 0, pp_rank = 0;
    int cp = 1, cp_rank = 0;  // context parallelism (parallel/context_parallel.h)
    bool sp = false;  // sequence parallelism (meaningful when tp > 1)
    // ZB-V's placement of the virtual stages (parallel/pipeline_stage.h): rank 0 holds both ends of the model, so
    // emb_comm's sum is not needed. Set by the caller after grid_create, before the model is built.
    bool pipeline_v = false;
    Comm tp_comm, dp_comm, pp_comm, emb_comm, cp_comm, dpcp_comm;
};

// ZB-V's placement on this grid (parallel/pipeline_stage.h): its pairs of stages exchange activations and
// gradients both ways, each direction in its own order, so the pipeline communicator gets two channels
// (parallel/comm.h: --comm mpi-strict keeps each in order; NCCL would need a communicator per channel).
inline void grid_use_v_placement(ProcessGrid& g) {
    g.pipeline_v = true;
    g.pp_comm.channels = 2;
}

// The ranks that hold the same weights, every DP and CP rank of one (tp_rank, pp_rank): the gradients are
// summed over them and the distributed optimizer shards over them. dp_comm when cp = 1.
inline Comm& weight_comm(ProcessGrid& g) { return g.cp > 1 ? g.dpcp_comm : g.dp_comm; }
inline int weight_ranks(const ProcessGrid& g) { return g.dp * g.cp; }
inline int weight_rank(const ProcessGrid& g) { return g.dp_rank * g.cp + g.cp_rank; }
// World ranks per pipeline stage: stage s is world ranks s·ranks_per_stage .. (s+1)·ranks_per_stage − 1.
inline int ranks_per_stage(const ProcessGrid& g) { return g.tp * g.cp * g.dp; }

// Every divisibility rule of the layout, checked before anything is allocated. Returns "" when the layout
// is valid, else a message naming the numbers (e.g. "--tp 3 does not divide 4 heads").
std::string grid_validate(int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq, int pp = 1, int cp = 1);

// Split MPI_COMM_WORLD into TP, CP, DP and PP groups and create their communicators, all under `rules`
// (--comm mpi-strict, --comm-timeout; parallel/comm.h).
ProcessGrid grid_create(MPI_Comm world, int tp, bool sp, CommBackend backend, const Ctx& ctx, int pp = 1,
                        const CommRules& rules = {}, int cp = 1);
void grid_destroy(ProcessGrid& g);
