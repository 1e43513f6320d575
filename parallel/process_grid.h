// process_grid.h — world = tp × dp. TP groups are consecutive ranks (as on a node, where NVLink joins
// them): tp_rank = rank % tp, dp_rank = rank / tp. One Comm per group.
#pragma once
#include <string>
#include "comm.h"
#include "../model/config.h"

struct ProcessGrid {
    int rank = 0, world = 1;
    int tp = 1, dp = 1, tp_rank = 0, dp_rank = 0;
    bool sp = false;  // sequence parallelism (meaningful when tp > 1)
    Comm tp_comm, dp_comm;
};

// Every divisibility rule of the layout, checked before anything is allocated. Returns "" when the layout
// is valid, else a message naming the numbers (e.g. "--tp 3 does not divide 4 heads").
std::string grid_validate(int world, int tp, bool sp, const GPTConfig& cfg, int batch, int seq);

// Split MPI_COMM_WORLD into TP and DP groups and create their communicators.
ProcessGrid grid_create(MPI_Comm world, int tp, bool sp, CommBackend backend, const Ctx& ctx);
void grid_destroy(ProcessGrid& g);
