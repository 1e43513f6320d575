// cuda_runtime.h for the EMULATED CUDA device (test/emulator): the CUDA runtime calls this project makes,
// implemented on the host (test/emulator/runtime.cpp), and the device side of CUDA C++ as host C++
// (emu_device.h). Test infrastructure only: a build for a real GPU uses the toolkit's cuda_runtime.h.
//
// The emulated device reports itself as one sm_90 GPU (H100/H200 limits): 1024 threads per block (z <= 64),
// grid y and z <= 65535, 48 KB of static shared memory per block, and 227 KB (232448 bytes) of dynamic
// shared memory per block after cudaFuncSetAttribute(MaxDynamicSharedMemorySize) — the value
// cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin) returns. sm_80 allows less (163 KB); code
// that passes here at 164..227 KB would fail on an A100.
//
// Only what the project calls is here; anything else fails to compile, on purpose.
//
// WHAT THE EMULATOR CHECKS (test/emulator/launch.cpp, runtime.cpp; each check has a negative control in
// test/emulator/cmake/emulator_tests.cmake):
//  - memcheck (build-emulated/, AddressSanitizer): every cudaMalloc, every static __shared__ array of a block
//    and the launch's dynamic shared memory is bounded to the byte; an access past one stops the kernel,
//    naming the kernel, block, thread, the allocation or array and the source line. Memory nobody wrote reads
//    as NaN (0xFF bytes): fresh allocations, shared memory at each block's start, an unsynchronized host read.
//  - Thread order (EMU_THREAD_ORDER=forward|reverse|shuffle[:seed]): the order in which the threads of a block
//    run between barriers; the kernel tests run forward and reverse, so a missing barrier is caught whichever
//    of its two threads writes first.
//  - racecheck (build-emulated-race/, ThreadSanitizer): two threads of a block touching a word between
//    barriers, one writing, with no __syncthreads or __syncwarp between them. A shuffle, ballot or
//    emu::warp_gather orders nothing but its own value.
//  - synccheck (every build): a __syncthreads reached at different source lines, a block that deadlocks, a warp
//    collective whose mask names an exited lane or not the caller, lanes at different collectives or masks:
//    each stops naming the kernel and the lines. The launch limits of sm_90.
//
// WHERE THE EMULATOR CANNOT BE FAITHFUL. Its times mean nothing: no benchmark may quote them, and a real
// GPU's check (bench/gpu_suite.sh) is not replaced by anything here.
//  - Performance: tensor cores and their timing, memory coalescing, bank conflicts, caches, occupancy and
//    register pressure (__launch_bounds__ is accepted and ignored), launch overheads: none is modelled.
//  - Scheduling: one block at a time per launch, blocks in order (x fastest), the threads of a block as
//    fibers that run until a barrier or a warp collective. Races between blocks (two blocks writing one
//    word, a block reading what another writes) are found by no mode: the race mode orders each block after
//    the previous one. Code that relies on blocks running concurrently (inter-block spinning) hangs.
//  - Timing between threads: a thread runs alone until it meets a barrier or a warp collective, so a read
//    that races with a write lands before or after it whole; the thread orders (and the race mode) cover the
//    orders of such segments, not an interleaving inside one.
//  - Warp collectives are meetings: every lane named in the mask arrives before any leaves (as with
//    independent thread scheduling, sm_70 on); disjoint masks used concurrently by two halves of a warp are
//    refused (one warp collective at a time per warp). Lanes at different source lines may meet at the same
//    collective (PTX allows it on sm_70 and later); at __syncthreads they may not.
//  - Memory model: device memory is host memory, so a write is visible at once to every later read of any
//    thread (no weaker ordering, no __threadfence needed, no stale cache); only the race mode holds a kernel to
//    CUDA's barriers, and only inside a block. Atomics are host atomics; the math intrinsics (__expf, rsqrtf,
//    ...) are the accurate host functions, not the GPU's approximations. memcheck finds accesses out of bounds
//    and after cudaFree (AddressSanitizer's quarantine), not a misaligned access (the host allows it; a GPU
//    faults on a 16-byte load that is not 16-byte aligned). A read of memory nobody wrote is not stopped, as
//    compute-sanitizer's initcheck would: its NaN shows only where it reaches a result.
//  - Limits: sm_90's values (below); an sm_80-only limit (163 KB of opt-in shared memory) is not checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vector_types.h"   // the toolkit's dim3, uint3, float4 ... (plain structs under a host compiler)
#include "library_types.h"  // the toolkit's cudaDataType_t (CUDA_R_32F, CUDA_R_16BF), used by cuBLAS calls

#define EMULATED_CUDA 1

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

struct CUstream_st;
struct CUevent_st;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

struct cudaUUID_st { char bytes[16]; };
typedef struct cudaUUID_st cudaUUID_t;

// The fields of the real struct that a program is likely to read; the others are left out.
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major;
    int minor;
    int multiProcessorCount;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
};

// ---- the runtime API (test/emulator/runtime.cpp) ---------------------------------------------------------
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
// The C++ overloads of the real header: any T** for the pointer.
template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(ptr), bytes); }
template <class T>
inline cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
    return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
typedef void (*cudaHostFn_t)(void* userData);
// The host function runs in stream order, on the stream's worker (CUDA: on a driver thread): it blocks the stream.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)entry, attr, value);
}

// ---- the device side: threads, shared memory, warps, atomics, intrinsics; kernel launches ----------------
#include "emu_device.h"
