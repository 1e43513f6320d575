// The emulated device's own semantics, limits and checks (test/emulator), one mode per run:
//   --semantics        warp shuffles with masks and widths, __ballot_sync, __syncwarp, emu::warp_gather,
//                      __syncthreads across warps, static and dynamic shared memory, atomics, the NaN fill, two
//                      streams ordered by an event; exits 0 when every check holds
//   --smem-attr        a launch with 64 KB of dynamic shared memory after cudaFuncSetAttribute: runs
//   --smem-no-attr     the same launch without the attribute: refused (negative control, exits 1)
//   --threads-1025     a block of 1025 threads: refused (exits 1)
//   --grid-y-65536     a grid with y = 65536: refused (exits 1)
//   --static-smem-49k  a kernel with 49 KB of static __shared__: stops (SIGABRT)
//   --unsynced-read    a host read after cudaMemcpyAsync D2H without a synchronization: sees the NaN pattern
// synccheck (each stops with SIGABRT, naming the kernel and the lines):
//   --divergent-barrier  half a warp at __syncthreads, the other half at __syncwarp: a deadlock
//   --barrier-lines      thread 0 at one __syncthreads, thread 1 at another: a barrier reached by part of a block
//   --exited-lane        lanes 0..15 return, lanes 16..31 shuffle with the full mask
//   --mask-without-caller  a __syncwarp whose mask does not name the calling lane
// thread order (EMU_THREAD_ORDER):
//   --missing-barrier  thread t writes s[t] and reads s[t - 1] with no __syncthreads between: right in the
//                      forward order (exits 0), wrong when the reader runs first (exits 1)
// memcheck (the AddressSanitizer build; each stops with SIGABRT, naming the kernel, the thread, the allocation
// or array, and the line):
//   --oob-global       one element past a cudaMalloc of 1000 bytes (inside the 256-byte rounding a real
//                      allocation has)
//   --oob-static       one element past a static __shared__ array, with another array declared after it
//   --oob-dynamic      one element past the launch's dynamic shared memory
// the emulated cp.async (test/emulator/include/mma.cuh):
//   --cp-async-unwaited  copies issued and committed, never waited for: stops at the threads' exit (SIGABRT)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mma.cuh"  // the emulator's own (test/emulator/include comes first on the include path)

#define CHECK_CUDA(call)                                                                                    \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "CUDA error in %s: %s\n", #call, cudaGetErrorString(e_));                        \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static int g_failures = 0;
static void expect(bool ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        g_failures++;
    }
}

// One warp per 32 threads: each lane's results of the collectives, 8 ints per thread.
__global__ void warp_kernel(int* out) {
    const int t = threadIdx.x, lane = t % 32;
    int* o = out + t * 8;
    int v = lane;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    o[0] = v;                                              // 0 + 1 + ... + 31 = 496
    o[1] = __shfl_sync(0xffffffffu, lane * 10, 3);         // lane 3's value: 30
    o[2] = __shfl_sync(0xffffffffu, lane, 1, 8);           // width 8: lane (lane & ~7) + 1
    o[3] = __shfl_down_sync(0xffffffffu, lane, 4, 16);     // lane + 4 inside 16, else its own
    o[4] = __shfl_up_sync(0xffffffffu, lane, 1);           // lane - 1, lane 0 its own
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 2);      // 0xaaaaaaaa
    float f = (float)lane;
    o[6] = (int)__shfl_xor_sync(0xffffffffu, f, 1);        // a float through the shuffle
    __syncwarp();
    o[7] = __shfl_xor_sync(0x0000ffffu | 0xffff0000u, lane, 16);
}

// emu::warp_gather (the emulator's own collective under the tensor-core operations): lane l hands over
// {l, 100 + l, 200 + l} and reads every lane's; with mask 0x0000ffff only the low half takes part.
__global__ void gather_kernel(int* out) {
    const int lane = threadIdx.x % 32;
    int mine[3] = {lane, 100 + lane, 200 + lane}, all[32 * 3];
    emu::warp_gather(0xffffffffu, mine, sizeof mine, all, "gather_kernel");
    int sum = 0;
    for (int l = 0; l < 32; l++) sum += all[l * 3] + all[l * 3 + 1] + all[l * 3 + 2];
    out[threadIdx.x * 2] = sum;  // 3 * 496 + 32 * 300 = 11088
    int half = -1;
    if (lane < 16) {
        emu::warp_gather(0x0000ffffu, mine, sizeof mine, all, "gather_kernel (half)");
        half = all[15 * 3 + 2] + (all[16 * 3] == -1 ? 1 : 0);  // lane 15's third value; lane 16: NaN pattern
    }
    out[threadIdx.x * 2 + 1] = half;
}

// Thread t writes shared[t], then (after __syncthreads) reads its neighbour's across the warps.
__global__ void block_kernel(float* out, float* nan_probe, int* counter) {
    __shared__ float tile[256];
    extern __shared__ float dyn[];
    const int t = threadIdx.x;
    if (t == 0) nan_probe[0] = dyn[5];  // never written in this block: the NaN fill
    if (t == 0) nan_probe[1] = tile[7];
    __syncthreads();
    tile[t] = (float)t;
    dyn[t] = 2.f * t;
    __syncthreads();
    out[blockIdx.x * 256 + t] = tile[(t + 37) % 256] + dyn[(t + 101) % 256];
    atomicAdd(counter, 1);
}

__global__ void big_dyn_kernel(float* out, int n) {
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s[n - 1];
}

__global__ void static_49k_kernel(float* out) {
    __shared__ float big[12544];  // 50176 bytes: above 48 KB
    big[threadIdx.x] = 1.f;
    __syncthreads();
    out[threadIdx.x] = big[threadIdx.x];
}

// Lanes 0..15 wait at __syncthreads for lanes 16..31, which wait at a __syncwarp naming lanes 0..15: a hang
// on a GPU (undefined behaviour), a deadlock report here.
__global__ void half_barrier_kernel(float* out) {
    if (threadIdx.x % 32 < 16) __syncthreads();
    else __syncwarp(0xffffffffu);
    out[threadIdx.x] = 1.f;
}

// Thread 0 meets the first __syncthreads, thread 1 the second: a barrier reached by only part of the block.
__global__ void two_barriers_kernel(float* out) {
    if (threadIdx.x == 0) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1.f;
}

// Lanes 0..15 have returned when lanes 16..31 shuffle with the full mask.
__global__ void exited_lane_kernel(float* out) {
    if (threadIdx.x < 16) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (float)threadIdx.x, 16);
}

// Lane 5 calls __syncwarp with a mask of lanes 0..3.
__global__ void own_lane_kernel(float* out) {
    if (threadIdx.x == 5) __syncwarp(0x0000000fu);
    out[threadIdx.x] = 1.f;
}

// The read of the neighbour's value needs a __syncthreads after the write; it has none.
__global__ void missing_barrier_kernel(float* out) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    s[t] = (float)t;
    if (t > 0) out[t] = s[t - 1];
}

// Block 1, thread 122 writes x[250]: one element past the 1000 bytes asked for.
__global__ void oob_global_kernel(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.f;  // the bug: <= instead of <
}

// tile has 63 elements; thread 63 writes one past them. `after` is declared next to it: a write that overflows
// tile must not land there unnoticed.
__global__ void oob_static_kernel(float* out) {
    __shared__ float tile[63];
    __shared__ float after[64];
    after[threadIdx.x] = 0.f;
    tile[threadIdx.x] = 1.f;  // the bug: 64 threads, 63 elements
    __syncthreads();
    out[threadIdx.x] = after[threadIdx.x];
}

// 400 bytes of dynamic shared memory (100 floats); thread 0 reads s[100].
__global__ void oob_dynamic_kernel(float* out, int n) {
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s[n];  // the bug: one past the end
}

__global__ void unwaited_copy_kernel(const uint4* src) {
    extern __shared__ uint4 tile[];
    cp_async_16(&tile[threadIdx.x], &src[threadIdx.x], 16);
    cp_async_commit();  // the bug: no cp_async_wait<0>() before the thread ends
}

__global__ void fill_kernel(float* x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
__global__ void add_one_kernel(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.f;
}

static int semantics() {
    int* d_out;
    CHECK_CUDA(cudaMalloc(&d_out, 64 * 8 * sizeof(int)));
    warp_kernel<<<1, 64>>>(d_out);
    CHECK_CUDA(cudaGetLastError());
    std::vector<int> h(64 * 8);
    CHECK_CUDA(cudaMemcpy(h.data(), d_out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int t = 0; t < 64; t++) {
        const int lane = t % 32;
        const int* o = &h[t * 8];
        expect(o[0] == 496, "__shfl_xor_sync butterfly sum");
        expect(o[1] == 30, "__shfl_sync from lane 3");
        expect(o[2] == (lane & ~7) + 1, "__shfl_sync with width 8");
        expect(o[3] == ((lane % 16) + 4 < 16 ? lane + 4 : lane), "__shfl_down_sync with width 16");
        expect(o[4] == (lane == 0 ? 0 : lane - 1), "__shfl_up_sync");
        expect((unsigned)o[5] == 0xaaaaaaaau, "__ballot_sync");
        expect(o[6] == (lane ^ 1), "__shfl_xor_sync of a float");
        expect(o[7] == (lane ^ 16), "__shfl_xor_sync across the half warps");
    }
    int* d_gather;
    CHECK_CUDA(cudaMalloc(&d_gather, 64 * 2 * sizeof(int)));
    gather_kernel<<<1, 64>>>(d_gather);
    CHECK_CUDA(cudaGetLastError());
    std::vector<int> g(64 * 2);
    CHECK_CUDA(cudaMemcpy(g.data(), d_gather, g.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int t = 0; t < 64; t++) {
        expect(g[t * 2] == 11088, "emu::warp_gather: every lane's payload");
        expect(g[t * 2 + 1] == (t % 32 < 16 ? 216 : -1), "emu::warp_gather with a half mask");
    }
    float *d_blk, *d_probe;
    int* d_count;
    CHECK_CUDA(cudaMalloc(&d_blk, 3 * 256 * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_probe, 2 * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_count, sizeof(int)));
    CHECK_CUDA(cudaMemset(d_count, 0, sizeof(int)));
    block_kernel<<<3, 256, 256 * sizeof(float)>>>(d_blk, d_probe, d_count);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> b(3 * 256);
    float probe[2];
    int count = 0;
    CHECK_CUDA(cudaMemcpy(b.data(), d_blk, b.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(probe, d_probe, sizeof probe, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&count, d_count, sizeof count, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 3 * 256; i++) {
        const int t = i % 256;
        expect(b[i] == (float)((t + 37) % 256) + 2.f * ((t + 101) % 256), "shared memory across warps");
    }
    expect(std::isnan(probe[0]) && std::isnan(probe[1]), "unwritten shared memory reads the NaN pattern");
    expect(count == 3 * 256, "atomicAdd from every thread");
    // Fresh device memory is NaN.
    float* fresh;
    CHECK_CUDA(cudaMalloc(&fresh, 16 * sizeof(float)));
    float hf[16];
    CHECK_CUDA(cudaMemcpy(hf, fresh, sizeof hf, cudaMemcpyDeviceToHost));
    expect(std::isnan(hf[0]) && std::isnan(hf[15]), "a fresh cudaMalloc reads the NaN pattern");
    // Two non-blocking streams ordered by an event.
    const int n = 1 << 16;
    float *x, *y;
    CHECK_CUDA(cudaMalloc(&x, n * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&y, n * sizeof(float)));
    cudaStream_t s1, s2;
    cudaEvent_t e;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    fill_kernel<<<n / 256, 256, 0, s1>>>(x, 41.f, n);
    CHECK_CUDA(cudaEventRecord(e, s1));
    CHECK_CUDA(cudaStreamWaitEvent(s2, e, 0));
    add_one_kernel<<<n / 256, 256, 0, s2>>>(y, x, n);
    std::vector<float> hy(n);
    CHECK_CUDA(cudaMemcpyAsync(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s2));
    CHECK_CUDA(cudaStreamSynchronize(s2));
    bool all = true;
    for (int i = 0; i < n; i++) all = all && hy[i] == 42.f;
    expect(all, "an event orders two streams");
    CHECK_CUDA(cudaStreamDestroy(s1));
    CHECK_CUDA(cudaStreamDestroy(s2));
    CHECK_CUDA(cudaEventDestroy(e));
    if (g_failures) {
        fprintf(stderr, "%d checks failed\n", g_failures);
        return 1;
    }
    printf("emulated device semantics: all checks passed\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s --semantics|--smem-attr|--smem-no-attr|--threads-1025|--grid-y-65536|"
                        "--static-smem-49k|--unsynced-read|--divergent-barrier|--barrier-lines|--exited-lane|"
                        "--mask-without-caller|--missing-barrier|--oob-global|--oob-static|--oob-dynamic|"
                        "--cp-async-unwaited\n", argv[0]);
        return 2;
    }
    const char* m = argv[1];
    if (!strcmp(m, "--semantics")) return semantics();
    float* out;
    CHECK_CUDA(cudaMalloc(&out, 1024 * sizeof(float)));
    if (!strcmp(m, "--smem-attr") || !strcmp(m, "--smem-no-attr")) {
        const int n = 16384;  // 64 KB
        if (!strcmp(m, "--smem-attr"))
            CHECK_CUDA(cudaFuncSetAttribute(big_dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4));
        big_dyn_kernel<<<1, 128, n * sizeof(float)>>>(out, n);
        CHECK_CUDA(cudaGetLastError());
        float r = 0;
        CHECK_CUDA(cudaMemcpy(&r, out, sizeof r, cudaMemcpyDeviceToHost));
        if (r != (float)(n - 1)) {
            fprintf(stderr, "FAIL: 64 KB dynamic shared memory kernel wrote %g\n", r);
            return 1;
        }
        printf("64 KB of dynamic shared memory after cudaFuncSetAttribute: ran\n");
        return 0;
    }
    if (!strcmp(m, "--threads-1025")) {
        fill_kernel<<<1, 1025>>>(out, 1.f, 1);
        CHECK_CUDA(cudaGetLastError());
        return 0;
    }
    if (!strcmp(m, "--grid-y-65536")) {
        fill_kernel<<<dim3(1, 65536), 32>>>(out, 1.f, 1);
        CHECK_CUDA(cudaGetLastError());
        return 0;
    }
    if (!strcmp(m, "--static-smem-49k")) {
        static_49k_kernel<<<1, 32>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--barrier-lines")) {
        two_barriers_kernel<<<1, 2>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--exited-lane")) {
        exited_lane_kernel<<<1, 32>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--mask-without-caller")) {
        own_lane_kernel<<<1, 32>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--missing-barrier")) {
        missing_barrier_kernel<<<1, 256>>>(out);
        CHECK_CUDA(cudaGetLastError());
        std::vector<float> h(256);
        CHECK_CUDA(cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int t = 1; t < 256; t++) bad += !(h[t] == (float)(t - 1));
        printf("missing_barrier_kernel: %d of 255 neighbour reads wrong\n", bad);
        return bad ? 1 : 0;
    }
    if (!strcmp(m, "--oob-global")) {
        float* x;
        CHECK_CUDA(cudaMalloc(&x, 250 * sizeof(float)));
        oob_global_kernel<<<2, 128>>>(x, 250);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--oob-static")) {
        oob_static_kernel<<<1, 64>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--oob-dynamic")) {
        oob_dynamic_kernel<<<1, 32, 100 * sizeof(float)>>>(out, 100);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--cp-async-unwaited")) {
        unwaited_copy_kernel<<<1, 32, 32 * sizeof(uint4)>>>(reinterpret_cast<const uint4*>(out));
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--divergent-barrier")) {
        half_barrier_kernel<<<1, 128>>>(out);
        CHECK_CUDA(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(m, "--unsynced-read")) {
        cudaStream_t s;
        CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fill_kernel<<<4, 256, 0, s>>>(out, 7.f, 1024);
        std::vector<float> h(1024, 0.f);
        CHECK_CUDA(cudaMemcpyAsync(h.data(), out, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s));
        // No cudaStreamSynchronize(s) here: the host reads too early.
        const bool early_nan = std::isnan(h[0]) && std::isnan(h[1023]);
        CHECK_CUDA(cudaStreamSynchronize(s));
        const bool late_ok = h[0] == 7.f && h[1023] == 7.f;
        printf("read before the synchronization: %s, after it: %s\n", early_nan ? "NaN" : "a value",
               late_ok ? "the copied values" : "wrong");
        if (!late_ok) return 1;
        if (early_nan) {
            fprintf(stderr, "host read of a device-to-host copy before synchronizing with its stream: NaN\n");
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", m);
    return 2;
}
