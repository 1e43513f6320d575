// gpu_identity.cu — which GPU each rank uses, and the "two ranks on one GPU" refusal (see gpu_identity.h).
#include "gpu_identity.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include "../layers/runtime.h"  // MPI_CHECK

std::vector<GpuIdentity> gather_gpu_identities(MPI_Comm group, int cuda_device) {
    // Fixed-size records, so one MPI_Allgather moves them all.
    struct Record {
        int world_rank;
        char host[MPI_MAX_PROCESSOR_NAME];
        char bus[64];
    };
    Record mine;
    memset(&mine, 0, sizeof mine);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank));
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(mine.host, &len));
    CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus, (int)sizeof mine.bus, cuda_device));
    int size = 0;
    MPI_CHECK(MPI_Comm_size(group, &size));
    std::vector<Record> all(size);
    MPI_CHECK(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine, MPI_BYTE, group));
    std::vector<GpuIdentity> ids(size);
    for (int r = 0; r < size; r++) {
        ids[r].world_rank = all[r].world_rank;
        ids[r].host = std::string(all[r].host, strnlen(all[r].host, sizeof all[r].host));
        ids[r].pci_bus_id = std::string(all[r].bus, strnlen(all[r].bus, sizeof all[r].bus));
    }
    return ids;
}

static std::string lower(std::string s) {
    for (auto& ch : s) ch = (char)tolower((unsigned char)ch);
    return s;
}

std::string shared_gpu_error(const std::vector<GpuIdentity>& ids) {
    for (size_t a = 0; a < ids.size(); a++) {
        for (size_t b = a + 1; b < ids.size(); b++) {
            // Bus ids are compared case-insensitively ("0000:3B:00.0" and "0000:3b:00.0" are one GPU).
            if (ids[a].host == ids[b].host && lower(ids[a].pci_bus_id) == lower(ids[b].pci_bus_id)) {
                char msg[1024];
                snprintf(msg, sizeof msg,
                         "ranks %zu and %zu of this group (world ranks %d and %d) both use GPU %s on host %s: "
                         "NCCL cannot run two ranks on one GPU; use --comm mpi",
                         a, b, ids[a].world_rank, ids[b].world_rank, ids[a].pci_bus_id.c_str(),
                         ids[a].host.c_str());
                return msg;
            }
        }
    }
    return "";
}
