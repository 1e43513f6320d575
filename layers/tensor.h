// tensor.h — the one data structure every op shares: a pointer, a shape, a dtype and a device.
//
// There is no autograd: forward and backward are explicit functions (as in llm.c). A Tensor does not own
// its memory; whoever allocated it frees it (runtime.h for plain buffers, layers/activation_allocator.h
// for activations saved for backward, so that they can be counted).
//
// Storage dtypes: f32, bf16 (2-byte activations as in the paper's accounting), u8 (1-byte dropout masks).
// All math is done in fp32; bf16 is a storage format only (on CPU and on GPU alike).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

enum class DType : uint8_t { F32 = 0, BF16 = 1, U8 = 2, I32 = 3 };
enum class Device : uint8_t { CPU = 0, CUDA = 1 };

inline size_t dtype_size(DType t) {
    switch (t) {
        case DType::F32: return 4;
        case DType::BF16: return 2;
        case DType::U8: return 1;
        case DType::I32: return 4;
    }
    return 0;
}
inline const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "f32";
        case DType::BF16: return "bf16";
        case DType::U8: return "u8";
        case DType::I32: return "i32";
    }
    return "?";
}
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

struct Tensor {
    void* data = nullptr;
    int64_t n = 0;  // number of elements
    DType dtype = DType::F32;
    Device device = Device::CPU;
    // Shape for documentation and reports; ops take their dimensions explicitly (like llm.c), and only
    // `n` is checked against them.
    int ndim = 1;
    int64_t shape[4] = {0, 0, 0, 0};

    size_t bytes() const { return (size_t)n * dtype_size(dtype); }
    bool empty() const { return data == nullptr; }
    template <class T> T* as() const { return static_cast<T*>(data); }
    // A view of elements [offset, offset + count) of this tensor (same dtype and device).
    Tensor slice(int64_t offset, int64_t count) const {
        Tensor t = *this;
        t.data = static_cast<char*>(data) + (size_t)offset * dtype_size(dtype);
        t.n = count;
        t.ndim = 1;
        t.shape[0] = count;
        return t;
    }
};

// A 1-D tensor of n elements with no storage yet: what every allocator fills in before it sets `data`.
inline Tensor tensor_header(Device device, DType dtype, int64_t n) {
    Tensor t;
    t.n = n;
    t.dtype = dtype;
    t.device = device;
    t.shape[0] = n;
    return t;
}

// fp32 <-> storage conversions usable in host and device code; the same rounding (nearest even) on both,
// so CPU and GPU produce the same bits for bf16 storage.
__host__ __device__ inline float to_f32(float x) { return x; }
__host__ __device__ inline float to_f32(bf16 x) { return __bfloat162float(x); }
template <class T> __host__ __device__ inline T from_f32(float x);
template <> __host__ __device__ inline float from_f32<float>(float x) { return x; }
template <> __host__ __device__ inline bf16 from_f32<bf16>(float x) { return __float2bfloat16(x); }

// Run `body` with a type alias `T` bound to the C++ storage type of an activation dtype (f32 or bf16).
#define MM_DISPATCH_ACT(dtype, ...)                                               \
    do {                                                                          \
        if ((dtype) == DType::F32) { using T = float; __VA_ARGS__; }              \
        else if ((dtype) == DType::BF16) { using T = bf16; __VA_ARGS__; }         \
        else { mm_fatal("%s:%d: unsupported activation dtype %s", __FILE__,       \
                        __LINE__, dtype_name(dtype)); }                           \
    } while (0)

// Defined in runtime.cu: print a message and abort the whole job (MPI_Abort when MPI is running).
[[noreturn]] void mm_fatal(const char* fmt, ...);
