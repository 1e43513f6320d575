// nccl.h (emulated) — the NCCL calls this project makes (parallel/comm.cu, bench/layer_bench.cu), on MPI, one
// emulated GPU per rank (test/emulator/nccl.cc). Test infrastructure only: real GPU builds use the real NCCL.
//
// Semantics kept from NCCL's documentation:
//  - every operation is queued on its stream and runs there in order; a communicator runs its operations
//    one at a time, in the order the host issued them (whatever their streams);
//  - ncclSend completes only when the peer has posted the matching ncclRecv (NCCL's behaviour for messages
//    beyond its internal buffers), and between two ranks messages match in issue order (no tags); so two
//    ranks that each send first, ungrouped, deadlock, as on a GPU;
//  - between ncclGroupStart and ncclGroupEnd operations are only collected; ncclGroupEnd queues them as one
//    unit, in which the sends and receives progress together (paired in any order);
//  - ncclCommAbort stops the communicator's pending operations; ncclCommGetAsyncError reports an error that
//    an operation met while it ran.
// EMU_NCCL_P2P_DELAY_MS=N in the environment starts every unit of sends and receives N ms late (a slow link),
// so that a missing wait for an exchange shows as a read of data that has not arrived.
// Not faithful: NCCL's ring/tree reduction order (bf16 sums here are added in fp32 and rounded once),
// its internal buffer sizes (every send here waits for its receive, even a small one), and all timing.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>  // cudaStream_t (the emulated runtime's)

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclNumTypes = 10
} ncclDataType_t;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

const char* ncclGetErrorString(ncclResult_t result);

// The id carries what the ranks need to find each other: the creating process's rank in MPI_COMM_WORLD and a
// number unique to it. The creating process must be one of the communicator's ranks.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
// Collective over the nranks processes that pass the same id, each with its own rank.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
// One process, one emulated GPU: only ndev = 1 (more devices in one process is refused).
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
// Waits for the communicator's queued operations, then frees it.
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

// Collectives; element counts, in place as NCCL defines it (all-gather: sendbuff == recvbuff + rank·count;
// reduce-scatter: recvbuff == sendbuff + rank·recvcount). Reductions take ncclFloat and ncclBfloat16.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
