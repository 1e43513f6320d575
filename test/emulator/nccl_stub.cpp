// Link-time stand-in for NCCL (see nccl_stub.h): every call stops the program.
#include "nccl_stub.h"
#include "device.h"

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "NCCL error"; }
#define EMU_NOT_YET(name, ...) \
    ncclResult_t name(__VA_ARGS__) { emu::fatal("%s: NCCL is not emulated in this build", #name); }
EMU_NOT_YET(ncclGetUniqueId, ncclUniqueId*)
EMU_NOT_YET(ncclCommInitRank, ncclComm_t*, int, ncclUniqueId, int)
EMU_NOT_YET(ncclCommInitAll, ncclComm_t*, int, const int*)
EMU_NOT_YET(ncclCommDestroy, ncclComm_t)
EMU_NOT_YET(ncclCommAbort, ncclComm_t)
EMU_NOT_YET(ncclCommGetAsyncError, ncclComm_t, ncclResult_t*)
EMU_NOT_YET(ncclGroupStart)
EMU_NOT_YET(ncclGroupEnd)
EMU_NOT_YET(ncclAllReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
EMU_NOT_YET(ncclAllGather, const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)
EMU_NOT_YET(ncclReduceScatter, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
EMU_NOT_YET(ncclBroadcast, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)
EMU_NOT_YET(ncclSend, const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)
EMU_NOT_YET(ncclRecv, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)
