// runtime.h — the device context every op receives, error checking, and plain (uncounted) buffers.
//
// `Ctx` says where ops run (CPU or one CUDA device) and carries the CUDA stream and the cuBLAS/cuBLASLt
// handles. Every op dispatches on ctx.device: the fast CPU path (SIMD loops, OpenMP, OpenBLAS) and the CUDA
// kernels live side by side in the same layers/*.cu file.
#pragma once
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <string>
#include <vector>
#include "tensor.h"

// ---- error checking: every CUDA / cuBLAS / MPI call is checked, and the message names the call ----------
#define CUDA_CHECK(call)                                                                         \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess)                                                                 \
            mm_fatal("CUDA error in %s at %s:%d: %s", #call, __FILE__, __LINE__,                 \
                     cudaGetErrorString(err_));                                                  \
    } while (0)
#define CUBLAS_CHECK(call)                                                                       \
    do {                                                                                         \
        cublasStatus_t st_ = (call);                                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
            mm_fatal("cuBLAS error in %s at %s:%d: status %d (%s)", #call, __FILE__, __LINE__,   \
                     (int)st_, cublasGetStatusString(st_));                                      \
    } while (0)
// After every kernel launch: catches bad launch configurations at the launch site.
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())
// Check an MPI call's return code, naming the call (used where mpi.h is included: the communicators, the
// GPU-identity check, the model's gathers).
#define MPI_CHECK(call)                                                                               \
    do {                                                                                              \
        int rc_ = (call);                                                                             \
        if (rc_ != MPI_SUCCESS) {                                                                     \
            char s_[MPI_MAX_ERROR_STRING]; int l_ = 0; MPI_Error_string(rc_, s_, &l_);                \
            mm_fatal("MPI error in %s at %s:%d: %s", #call, __FILE__, __LINE__, s_);                  \
        }                                                                                             \
    } while (0)

// True when at least one CUDA device is usable. Any error from cudaGetDeviceCount (no driver, driver too
// old, no device) means "no GPU"; no other CUDA call is made on a machine without one.
bool cuda_available();

struct Ctx {
    Device device = Device::CPU;
    int cuda_device = -1;
    cudaStream_t stream = nullptr;        // all kernels of this rank run on this stream
    cudaStream_t comm_stream = nullptr;   // second stream: SP's backward all-gather, ring attention's exchanges
    cublasHandle_t cublas = nullptr;
    cublasLtHandle_t cublaslt = nullptr;
    void* lt_workspace = nullptr;         // cuBLASLt workspace (device)
    size_t lt_workspace_bytes = 0;
    // Device scratch for deterministic reductions (per-block partial sums); grown on demand, never shrunk.
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
    // Set while a zero-bubble schedule's B runs: linear_backward hands dW and db to it (layers/weight_grad_queue.h).
    class WeightGradQueue* deferred_weight_grads = nullptr;
};

// Create a context on `device`; for CUDA, selects `cuda_device` and creates streams and handles.
Ctx ctx_create(Device device, int cuda_device = 0);
void ctx_destroy(Ctx& ctx);
// Device scratch of at least `bytes` (CUDA contexts only). Grows (with a synchronize) when too small; after
// the first training step it never grows again.
void* ctx_scratch(Ctx& ctx, size_t bytes);
void ctx_sync(const Ctx& ctx);

// An op's argument check: `t` must live on ctx's device, have `dtype` and hold at least n elements; else stop
// with a message naming the op and the argument.
inline void check_tensor(const Ctx& ctx, const Tensor& t, DType dtype, int64_t n, const char* op, const char* name) {
    if (t.device != ctx.device || t.dtype != dtype || t.n < n)
        mm_fatal("%s: %s must be %s on %s with >= %lld elements (got %s on %s, %lld)", op, name, dtype_name(dtype),
                 device_name(ctx.device), (long long)n, dtype_name(t.dtype), device_name(t.device), (long long)t.n);
}

// How a backward op writes a parameter gradient. Accumulate (+=) is the general case: the micro-batches of a
// step, and the two uses of the tied embedding, add into one buffer. Overwrite (=) is the first write of a step:
// it stands for "zeroed, then accumulated" without zeroing the buffer beforehand, and the weight-gradient GEMM
// runs with beta = 0 instead of reading those zeros back. Both give the same bits on the CPU.
enum class GradWrite : uint8_t { Accumulate, Overwrite };

// ---- plain buffers (weights, gradients, optimizer state, scratch): not counted as activations ---------
// `what` names the buffer in the message of an allocation that cannot fit (out_of_memory).
Tensor tensor_alloc(Device device, DType dtype, int64_t n, const char* what = nullptr);  // uninitialized
Tensor tensor_zeros(Device device, DType dtype, int64_t n, const char* what = nullptr);
// `bytes` of host (aligned to `align`) or GPU memory for `what`; an allocation that cannot fit stops with
// out_of_memory's message.
void* mm_malloc(Device device, size_t bytes, size_t align, const std::string& what);
// An allocation that cannot fit: what it was for, its size in GiB and, on a GPU, the memory free and in all
// (mm_fatal: this rank's fault, every rank stops).
[[noreturn]] void out_of_memory(Device device, size_t bytes, const std::string& what);
void tensor_free(Tensor& t);
void tensor_zero(const Ctx& ctx, Tensor t);                  // async on ctx's stream for CUDA
void tensor_copy(const Ctx& ctx, Tensor dst, Tensor src);    // same dtype; any devices; synchronous
// Convert element-wise between f32 and bf16 (or copy when equal) on the tensors' (shared) device.
void tensor_convert(const Ctx& ctx, Tensor dst, Tensor src);
// The GPU kernel tensor_convert runs for a pair of dtypes, decided on the host (the coverage test,
// test/layers/test_kernel_coverage.cu, lists them against the GPU tests' shapes).
enum class ConvertKernel : uint8_t { Copy, F32ToBF16, BF16ToF32, Unsupported };
ConvertKernel tensor_convert_kernel(DType dst, DType src);
// Host round trips (tests, checkpoints, reports): any dtype of f32/bf16 <-> std::vector<float>. These wait
// for the whole device (cudaDeviceSynchronize), so that work on any stream is seen: setup, teardown and tests.
std::vector<float> tensor_to_host_f32(Tensor t);
void tensor_from_host_f32(Tensor t, const float* src);       // converts to t's dtype
// The same, ordered on ctx's stream: for a training step's path. They wait for ctx.stream only (never for
// the communication streams, which keep overlapping); the caller's data must come from (or go to) work on
// ctx.stream.
std::vector<float> tensor_to_host_f32(const Ctx& ctx, Tensor t);
void tensor_from_host_f32(const Ctx& ctx, Tensor t, const float* src);
void tensor_fill_f32(Tensor t, float value);                  // host-driven fill (tests: poisoning)
// The same on ctx's stream, in the step's path (ring attention's lse, a step's test hooks): a fill kernel
// queued on ctx.stream (no host buffer, no copy, no wait), the plain loop on the CPU.
void tensor_fill_f32(const Ctx& ctx, Tensor t, float value);
