// The device side of CUDA C++ for the EMULATED device, as host C++ (included by the emulator's
// cuda_runtime.h). Kernels are ordinary host functions: each CUDA thread of a block runs the kernel's body
// on a fiber of its own (test/emulator/launch.cpp), so __syncthreads, __syncwarp and the shuffles block
// and exchange values as on a GPU. The build's source transform (test/emulator/cuda_transform.py) turns
// kernel<<<grid, block, smem, stream>>>(args) into emu::launch(...)(args) and __shared__ declarations into
// per-block storage (emu::shared_array, emu::dynamic_shared<T>).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// The built-in variables. One OS thread runs one block at a time, and the fiber scheduler sets threadIdx
// before it resumes a fiber, so thread-local storage is exact.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
static constexpr int warpSize = 32;

namespace emu {

// ---- block and warp synchronization (launch.cpp) ----------------------------------------------------------
// Every synchronizing call carries its source line (the emulated __syncthreads, __syncwarp and shuffles take
// __builtin_FILE() and __builtin_LINE() as default arguments: the call site in the kernel's own file, which
// the transform's #line keeps), so that a barrier misuse is reported with the line (synccheck).
void syncthreads(const char* file, int line);
// A warp collective: every lane named in `mask` arrives with `value`; kind 0 __syncwarp, 1 __shfl_sync
// (arg = srcLane), 2 __shfl_xor_sync (arg = laneMask), 3 __shfl_down_sync (arg = delta), 4 __shfl_up_sync,
// 5 __ballot_sync (returns the mask of lanes whose value is non-zero). Width as CUDA's. Only __syncwarp
// (kind 0) orders memory among the lanes; a shuffle or a ballot hands over its values and nothing else (what
// the race mode holds a kernel to).
uint64_t warp_collective(unsigned mask, uint64_t value, int kind, int arg, int width, const char* what,
                         const char* file, int line);
// A warp collective that moves a payload (the emulated tensor-core operations are built on it): every lane
// named in `mask` arrives with `bytes` bytes (1..128) at `in`; when all have arrived, each of them finds lane
// l's payload at all + l * bytes (the NaN pattern for a lane outside the mask). Like a shuffle, it orders no
// memory: only the values handed over are exchanged.
void warp_gather(unsigned mask, const void* in, size_t bytes, void* all, const char* what,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE());
// A check run in every CUDA thread of every later launch when it returns from the kernel (still in its block,
// threadIdx and blockIdx its own): the emulated cp.async (mma.cuh) registers one, so that a thread that ends
// with copies never waited for stops the program. One check at most; registering the same one again is a no-op.
void at_thread_exit(void (*check)());
// The kernel the calling thread runs (for a check's report).
const char* current_kernel();

// ---- shared memory (launch.cpp) -----------------------------------------------------------------------------
// A static __shared__ array (the transform turns `__shared__ T name[N];` into a reference to this): the
// block's own copy of the array declared at `site`, a heap allocation of exactly `bytes` bytes (so that
// AddressSanitizer bounds it), counted against the 48 KB limit and filled with the NaN pattern at the start
// of every block, since shared memory starts undefined.
void* shared_static(const void* site, size_t bytes, const char* name, const char* file, int line);
template <class A, class Site>
inline A& shared_array(Site, const char* name, const char* file, int line) {
    static const char site = 0;  // one per declaration (Site, a lambda's type) and per array type
    return *static_cast<A*>(shared_static(&site, sizeof(A), name, file, line));
}
// The block's dynamic shared memory (the launch's third <<<>>> argument): exactly that many bytes, NaN-filled
// at every block start.
void* dynamic_shared_base();
template <class T>
inline T* dynamic_shared() { return static_cast<T*>(dynamic_shared_base()); }

// ---- kernel launches (launch.cpp) ---------------------------------------------------------------------------
// Checks the launch's limits (threads per block, grid, shared memory: an error naming the kernel and the
// limit, as cudaGetLastError's cudaErrorInvalidConfiguration / cudaErrorInvalidValue), then queues the grid
// on the stream. `body` runs the kernel once for the current (blockIdx, threadIdx).
void launch_grid(const void* fn, const char* name, const char* file, int line, dim3 grid, dim3 block,
                 size_t smem, cudaStream_t stream, std::function<void()> body);

template <class... P>
struct Launcher {
    void (*fn)(P...);
    const char* name;
    const char* file;
    int line;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A>
    void operator()(A&&... a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        // The arguments are converted to the parameter types and copied at the launch, as CUDA does.
        std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
        auto f = fn;
        launch_grid(reinterpret_cast<const void*>(f), name, file, line, grid, block, smem, stream,
                    [f, args]() { std::apply(f, args); });
    }
};
template <class... P>
inline Launcher<P...> launch(void (*fn)(P...), const char* name, const char* file, int line, dim3 grid, dim3 block,
                             size_t smem = 0, cudaStream_t stream = 0) {
    return Launcher<P...>{fn, name, file, line, grid, block, smem, stream};
}

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T, class Op>
inline T atomic_update(T* p, Op op) {
    using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    U* q = reinterpret_cast<U*>(p);
    U cur = __atomic_load_n(q, __ATOMIC_RELAXED);
    for (;;) {
        T c;
        std::memcpy(&c, &cur, sizeof(T));
        T n = op(c);
        U nb;
        std::memcpy(&nb, &n, sizeof(T));
        if (__atomic_compare_exchange_n(q, &cur, nb, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return c;
    }
}

}  // namespace emu

// ---- CUDA's device functions ---------------------------------------------------------------------------------
#define EMU_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()
inline void __syncthreads(EMU_SITE) { emu::syncthreads(file, line); }
inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_SITE) {
    emu::warp_collective(mask, 0, 0, 0, 32, "__syncwarp", file, line);
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, EMU_SITE) {
    return emu::from_bits<T>(emu::warp_collective(mask, emu::to_bits(v), 1, src, width, "__shfl_sync", file, line));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, EMU_SITE) {
    return emu::from_bits<T>(
        emu::warp_collective(mask, emu::to_bits(v), 2, lane_mask, width, "__shfl_xor_sync", file, line));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, EMU_SITE) {
    return emu::from_bits<T>(
        emu::warp_collective(mask, emu::to_bits(v), 3, (int)delta, width, "__shfl_down_sync", file, line));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, EMU_SITE) {
    return emu::from_bits<T>(
        emu::warp_collective(mask, emu::to_bits(v), 4, (int)delta, width, "__shfl_up_sync", file, line));
}
inline unsigned __ballot_sync(unsigned mask, int pred, EMU_SITE) {
    return (unsigned)emu::warp_collective(mask, pred != 0, 5, 0, 32, "__ballot_sync", file, line);
}
#undef EMU_SITE
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return __ballot_sync(mask, pred, file, line) == mask;
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return __ballot_sync(mask, pred, file, line) != 0;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// Atomics: real atomic instructions, since kernels on two streams run at the same time on two OS threads.
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* p, float v) { return emu::atomic_update(p, [v](float c) { return c + v; }); }
inline double atomicAdd(double* p, double v) { return emu::atomic_update(p, [v](double c) { return c + v; }); }
inline int atomicMax(int* p, int v) { return emu::atomic_update(p, [v](int c) { return c > v ? c : v; }); }
inline int atomicMin(int* p, int v) { return emu::atomic_update(p, [v](int c) { return c < v ? c : v; }); }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline int atomicCAS(int* p, int cmp, int v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}

// Math intrinsics: the accurate host functions (the GPU's fast approximations differ in the last bits).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
template <class T>
inline T __ldg(const T* p) { return *p; }

// CUDA's global min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
