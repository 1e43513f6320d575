// runtime.cu — contexts, checked CUDA calls and plain buffers (see runtime.h).
#include "runtime.h"

#include <mpi.h>
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

void mm_fatal(const char* fmt, ...) {
    int mpi_up = 0, mpi_down = 0, rank = 0, world = 1;
    MPI_Initialized(&mpi_up);
    if (mpi_up) MPI_Finalized(&mpi_down);
    if (mpi_up && !mpi_down) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
    }
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (world > 1) fprintf(stderr, "[rank %d] error: %s\n", rank, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    // On a multi-rank job one rank's error must end every rank, never leave the others waiting in a
    // collective.
    if (mpi_up && !mpi_down && world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

bool cuda_available() {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        cudaError_t err = cudaGetDeviceCount(&n);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();  // clear the sticky error; treat any failure as "no GPU"
            n = 0;
        }
        cached = n > 0 ? 1 : 0;
    }
    return cached == 1;
}

Ctx ctx_create(Device device, int cuda_device) {
    Ctx ctx;
    ctx.device = device;
    if (device == Device::CUDA) {
        if (!cuda_available()) mm_fatal("--device cuda was asked for, but no CUDA GPU is visible; use --device cpu");
        ctx.cuda_device = cuda_device;
        CUDA_CHECK(cudaSetDevice(cuda_device));
        CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.comm_stream, cudaStreamNonBlocking));
        CUBLAS_CHECK(cublasCreate(&ctx.cublas));
        CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
        CUBLAS_CHECK(cublasLtCreate(&ctx.cublaslt));
        ctx.lt_workspace_bytes = 32u << 20;
        CUDA_CHECK(cudaMalloc(&ctx.lt_workspace, ctx.lt_workspace_bytes));
        // cuBLAS gets the same workspace so that its choice of algorithm (and so its bits) is stable.
        CUBLAS_CHECK(cublasSetWorkspace(ctx.cublas, ctx.lt_workspace, ctx.lt_workspace_bytes));
    }
    return ctx;
}

void ctx_destroy(Ctx& ctx) {
    if (ctx.device == Device::CUDA) {
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        if (ctx.scratch) CUDA_CHECK(cudaFree(ctx.scratch));
        CUDA_CHECK(cudaFree(ctx.lt_workspace));
        CUBLAS_CHECK(cublasLtDestroy(ctx.cublaslt));
        CUBLAS_CHECK(cublasDestroy(ctx.cublas));
        CUDA_CHECK(cudaStreamDestroy(ctx.comm_stream));
        CUDA_CHECK(cudaStreamDestroy(ctx.stream));
    }
    ctx = Ctx();
}

void* ctx_scratch(Ctx& ctx, size_t bytes) {
    if (ctx.device != Device::CUDA) mm_fatal("ctx_scratch is for CUDA contexts");
    if (bytes > ctx.scratch_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        if (ctx.scratch) CUDA_CHECK(cudaFree(ctx.scratch));
        size_t want = bytes < (1u << 20) ? (1u << 20) : bytes;
        CUDA_CHECK(cudaMalloc(&ctx.scratch, want));
        ctx.scratch_bytes = want;
    }
    return ctx.scratch;
}

void ctx_sync(const Ctx& ctx) {
    if (ctx.device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void out_of_memory(Device device, size_t bytes, const std::string& what) {
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    char where[160] = "host memory";
    size_t free_b = 0, total_b = 0;
    if (device == Device::CUDA && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        snprintf(where, sizeof where, "GPU memory (%.2f GiB free of %.2f GiB)", free_b / GiB, total_b / GiB);
    mm_fatal("out of %s: %s needs %.2f GiB (%zu bytes); a smaller model or batch, more ranks (--tp, --pp), "
             "--recompute (activations) or --use-distributed-optimizer (optimizer states) lowers what a rank holds "
             "(--memory-report shows it)", where, what.c_str(), bytes / GiB, bytes);
}

void* mm_malloc(Device device, size_t bytes, size_t align, const std::string& what) {
    void* p = nullptr;
    if (device == Device::CUDA) {
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) (void)cudaGetLastError(), out_of_memory(device, bytes, what);
        if (e != cudaSuccess) mm_fatal("CUDA error in cudaMalloc (%s, %zu bytes): %s", what.c_str(), bytes, cudaGetErrorString(e));
        return p;
    }
    p = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!p) out_of_memory(device, bytes, what);
    return p;
}

Tensor tensor_alloc(Device device, DType dtype, int64_t n, const char* what) {
    Tensor t = tensor_header(device, dtype, n);
    size_t bytes = t.bytes();
    if (bytes == 0) return t;
    // 64-byte alignment on the host: friendly to SIMD loops and OpenBLAS.
    const std::string name = std::string(what ? what : "a buffer") + " (" + std::to_string(n) + " " + dtype_name(dtype) + ")";
    t.data = mm_malloc(device, bytes, 64, name);
    return t;
}

Tensor tensor_zeros(Device device, DType dtype, int64_t n, const char* what) {
    Tensor t = tensor_alloc(device, dtype, n, what);
    if (t.data) {
        if (device == Device::CUDA) {
            CUDA_CHECK(cudaMemset(t.data, 0, t.bytes()));
            CUDA_CHECK(cudaDeviceSynchronize());  // see tensor_from_host_f32: streams are non-blocking
        }
        else memset(t.data, 0, t.bytes());
    }
    return t;
}

void tensor_free(Tensor& t) {
    if (t.data) {
        if (t.device == Device::CUDA) CUDA_CHECK(cudaFree(t.data));
        else free(t.data);
    }
    t.data = nullptr;
    t.n = 0;
}

void tensor_zero(const Ctx& ctx, Tensor t) {
    if (!t.data || t.n == 0) return;
    if (t.device == Device::CUDA) CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), ctx.stream));
    else memset(t.data, 0, t.bytes());
}

void tensor_copy(const Ctx& ctx, Tensor dst, Tensor src) {
    if (dst.dtype != src.dtype || dst.n != src.n)
        mm_fatal("tensor_copy: mismatch (%s[%lld] <- %s[%lld])", dtype_name(dst.dtype), (long long)dst.n,
                 dtype_name(src.dtype), (long long)src.n);
    if (src.n == 0) return;
    if (dst.device == Device::CPU && src.device == Device::CPU) {
        memcpy(dst.data, src.data, src.bytes());
        return;
    }
    cudaMemcpyKind kind = dst.device == Device::CUDA
                              ? (src.device == Device::CUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                              : cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), kind, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class D, class S>
static void convert_typed(const Ctx& ctx, Tensor dst, Tensor src) {
    if (dst.device == Device::CPU) {
        D* d = dst.as<D>();
        const S* s = src.as<S>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < src.n; i++) d[i] = from_f32<D>(to_f32(s[i]));
    } else {
        int threads = 256;
        int64_t blocks = (src.n + threads - 1) / threads;
        convert_kernel<D, S><<<blocks, threads, 0, ctx.stream>>>(dst.as<D>(), src.as<S>(), src.n);
        CUDA_CHECK_LAST();
    }
}

ConvertKernel tensor_convert_kernel(DType dst, DType src) {
    if (dst == src) return ConvertKernel::Copy;
    if (dst == DType::BF16 && src == DType::F32) return ConvertKernel::F32ToBF16;
    if (dst == DType::F32 && src == DType::BF16) return ConvertKernel::BF16ToF32;
    return ConvertKernel::Unsupported;
}

void tensor_convert(const Ctx& ctx, Tensor dst, Tensor src) {
    if (dst.n != src.n || dst.device != src.device)
        mm_fatal("tensor_convert: size or device mismatch (%lld vs %lld)", (long long)dst.n, (long long)src.n);
    if (src.n == 0) return;
    switch (tensor_convert_kernel(dst.dtype, src.dtype)) {
        case ConvertKernel::Copy:
            if (dst.data == src.data) return;
            if (dst.device == Device::CPU) memcpy(dst.data, src.data, src.bytes());
            else CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, ctx.stream));
            return;
        case ConvertKernel::F32ToBF16: convert_typed<bf16, float>(ctx, dst, src); return;
        case ConvertKernel::BF16ToF32: convert_typed<float, bf16>(ctx, dst, src); return;
        case ConvertKernel::Unsupported: break;
    }
    mm_fatal("tensor_convert: unsupported %s -> %s", dtype_name(src.dtype), dtype_name(dst.dtype));
}

// Host-side encoding between t's dtype and floats, shared by both kinds of round trip.
static std::vector<float> decode_f32(const Tensor& t, const std::vector<char>& raw) {
    std::vector<float> out((size_t)t.n);
    for (int64_t i = 0; i < t.n; i++) {
        switch (t.dtype) {
            case DType::F32: out[i] = reinterpret_cast<const float*>(raw.data())[i]; break;
            case DType::BF16: out[i] = to_f32(reinterpret_cast<const bf16*>(raw.data())[i]); break;
            case DType::U8: out[i] = (float)reinterpret_cast<const uint8_t*>(raw.data())[i]; break;
            case DType::I32: out[i] = (float)reinterpret_cast<const int32_t*>(raw.data())[i]; break;
        }
    }
    return out;
}

static std::vector<char> encode_f32(const Tensor& t, const float* src) {
    std::vector<char> raw(t.bytes());
    for (int64_t i = 0; i < t.n; i++) {
        switch (t.dtype) {
            case DType::F32: reinterpret_cast<float*>(raw.data())[i] = src[i]; break;
            case DType::BF16: reinterpret_cast<bf16*>(raw.data())[i] = from_f32<bf16>(src[i]); break;
            case DType::U8: reinterpret_cast<uint8_t*>(raw.data())[i] = (uint8_t)src[i]; break;
            case DType::I32: reinterpret_cast<int32_t*>(raw.data())[i] = (int32_t)src[i]; break;
        }
    }
    return raw;
}

std::vector<float> tensor_to_host_f32(Tensor t) {
    if (t.n == 0) return {};
    std::vector<char> raw(t.bytes());
    if (t.device == Device::CUDA) {
        // Outside a step (tests, checkpoints): t may come from any stream, and the work streams are
        // non-blocking (a plain cudaMemcpy is not ordered after them): wait for the whole device.
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(raw.data(), t.data, t.bytes(), cudaMemcpyDeviceToHost));
    } else {
        memcpy(raw.data(), t.data, t.bytes());
    }
    return decode_f32(t, raw);
}

std::vector<float> tensor_to_host_f32(const Ctx& ctx, Tensor t) {
    if (t.n == 0) return {};
    if (t.device != ctx.device) mm_fatal("tensor_to_host_f32: tensor on %s, context on %s", device_name(t.device),
                                         device_name(ctx.device));
    std::vector<char> raw(t.bytes());
    if (t.device == Device::CUDA) {
        // Queued on ctx.stream, so it runs after the kernels there that wrote t. The destination is pageable:
        // the copy may be staged, so wait for this stream (not the device: the communication streams go on).
        CUDA_CHECK(cudaMemcpyAsync(raw.data(), t.data, t.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    } else {
        memcpy(raw.data(), t.data, t.bytes());
    }
    return decode_f32(t, raw);
}

void tensor_from_host_f32(Tensor t, const float* src) {
    if (t.n == 0) return;
    std::vector<char> raw = encode_f32(t, src);
    if (t.device == Device::CUDA) {
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(t.data, raw.data(), t.bytes(), cudaMemcpyHostToDevice));
        // A pageable host-to-device copy may return before the data lands, and the work streams are
        // non-blocking (not ordered after the legacy stream): wait, so any stream sees the data.
        CUDA_CHECK(cudaDeviceSynchronize());
    } else {
        memcpy(t.data, raw.data(), t.bytes());
    }
}

void tensor_from_host_f32(const Ctx& ctx, Tensor t, const float* src) {
    if (t.n == 0) return;
    if (t.device != ctx.device) mm_fatal("tensor_from_host_f32: tensor on %s, context on %s",
                                         device_name(t.device), device_name(ctx.device));
    std::vector<char> raw = encode_f32(t, src);
    if (t.device == Device::CUDA) {
        // Queued on ctx.stream: after the kernels there that still read t, before those that read it next.
        // The source is pageable and local: wait for this stream before `raw` goes away (a pageable copy may
        // return before its DMA lands), and only for this stream.
        CUDA_CHECK(cudaMemcpyAsync(t.data, raw.data(), t.bytes(), cudaMemcpyHostToDevice, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    } else {
        memcpy(t.data, raw.data(), t.bytes());
    }
}

void tensor_fill_f32(Tensor t, float value) {
    std::vector<float> v((size_t)t.n, value);
    tensor_from_host_f32(t, v.data());
}

// t[i] = v, on ctx.stream (a kernel: no host buffer, no copy, no wait) or by the plain loop on the CPU.
template <class T>
__global__ void fill_kernel(T* p, T v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}
template <class T>
static void fill(const Ctx& ctx, Tensor t, T v) {
    T* p = static_cast<T*>(t.data);
    if (ctx.device == Device::CUDA) {
        const int threads = 256;
        const unsigned blocks = (unsigned)std::min<int64_t>((t.n + threads - 1) / threads, 1 << 16);  // grid-stride
        fill_kernel<T><<<blocks, threads, 0, ctx.stream>>>(p, v, t.n);
        CUDA_CHECK_LAST();
        return;
    }
    for (int64_t i = 0; i < t.n; i++) p[i] = v;
}

void tensor_fill_f32(const Ctx& ctx, Tensor t, float value) {
    if (t.n == 0) return;
    if (t.device != ctx.device)
        mm_fatal("tensor_fill_f32: tensor on %s, context on %s", device_name(t.device), device_name(ctx.device));
    switch (t.dtype) {  // the value in t's dtype, converted as tensor_from_host_f32 converts (encode_f32)
        case DType::F32: return fill<float>(ctx, t, value);
        case DType::BF16: return fill<bf16>(ctx, t, from_f32<bf16>(value));
        case DType::U8: return fill<uint8_t>(ctx, t, (uint8_t)value);
        case DType::I32: return fill<int32_t>(ctx, t, (int32_t)value);
    }
}
