// gpu_identity.h — one GPU per rank: NCCL's requirement, checked before a NCCL communicator is created.
//
// NCCL cannot run two ranks of one communicator on the same GPU: it would hang or fail with an obscure
// error. comm_create (comm.cu) gathers which GPU each rank of the group uses and stops with a message
// naming the two ranks and pointing to --comm mpi (the MPI backend stages CUDA tensors through host
// memory, so several ranks may share a GPU that way).
#pragma once
#include <mpi.h>
#include <string>
#include <vector>

// Which GPU a rank uses: its host and the PCI bus id of its CUDA device.
struct GpuIdentity {
    int world_rank = 0;
    std::string host;
    std::string pci_bus_id;
};

// Every rank of `group` contributes its identity (collective); element i is group rank i.
std::vector<GpuIdentity> gather_gpu_identities(MPI_Comm group, int cuda_device);

// A pure function (unit-testable without GPUs): "" when no two ranks share a GPU, otherwise the error
// message naming the first two that do.
std::string shared_gpu_error(const std::vector<GpuIdentity>& ids);
