// The race mode's controls (test/emulator, in the ThreadSanitizer build, build-emulated-race/):
// a test-only copy of layers/linear.cu's tiled column-sum kernel (bias_partial_kernel, fp32, one chunk of
// rows), once as written and once with its first __syncthreads removed; and a warp whose lanes hand values to
// each other through shared memory, once with a __syncwarp between the writes and the reads, once with only a
// shuffle there.
//   --with-barrier      the kernel as in linear.cu: correct sums, no race report (exit 0)
//   --without-barrier   lanes 0 read the shared tile before the other rows wrote it: ThreadSanitizer reports
//                       the data race on the shared array (exit 66)
//   --with-syncwarp     lane l reads lane l + 1's word after a __syncwarp: no report (exit 0)
//   --shuffle-only      the same with a __shfl_sync in place of the __syncwarp: the lanes meet there, so the
//                       values are right, but a shuffle orders no memory: the race is reported (exit 66)
// And a double buffer filled by cp.async (as layers/flash_attention_tc.cu's tiles), three tiles through two
// buffers, each thread reading the chunk a thread of the other warp copied:
//   --double-buffer               with the __syncthreads at the end of each tile: right sums, no report (exit 0)
//   --double-buffer-no-war-barrier  without it: tile j + 2's copy is issued into the buffer the other warp still
//                       reads for tile j; the issue makes those bytes undefined (mma.cuh), a write the race mode
//                       must see (exit 66)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mma.cuh"

constexpr int kThreadsX = 32, kCols = 8 * kThreadsX, kLanes = 8;

template <bool kBarrier>
__global__ void column_sum_kernel(float* partial, const float* dout, int N, int C) {
    __shared__ float sm[kLanes][kCols];
    const int c0 = blockIdx.x * kCols + threadIdx.x * 8;
    const int count = C - c0 < 8 ? (C - c0 > 0 ? C - c0 : 0) : 8;
    float acc[8];
    for (int k = 0; k < 8; k++) acc[k] = 0.f;
    if (count > 0)
        for (int r = threadIdx.y; r < N; r += kLanes)
            for (int k = 0; k < count; k++) acc[k] += dout[(long)r * C + c0 + k];
    for (int k = 0; k < 8; k++) sm[threadIdx.y][threadIdx.x * 8 + k] = acc[k];
    if (kBarrier) __syncthreads();  // the barrier the negative control removes
    if (threadIdx.y == 0) {
        for (int k = 0; k < count; k++) {
            float s = 0.f;
            for (int l = 0; l < kLanes; l++) s += sm[l][threadIdx.x * 8 + k];
            partial[c0 + k] = s;
        }
    }
    __syncthreads();
}

template <bool kSyncwarp>
__global__ void lane_exchange_kernel(float* out) {
    __shared__ float s[32];
    const int lane = threadIdx.x;
    s[lane] = (float)lane;
    float v = 0.f;
    if (kSyncwarp) __syncwarp();
    else v = __shfl_sync(0xffffffffu, (float)lane, 0);  // a meeting of the lanes, but no memory ordering
    out[lane] = s[(lane + 1) % 32] + v * 0.f;
}

static int lane_exchange(bool syncwarp) {
    float* d;
    if (cudaMalloc(&d, 32 * 4) != cudaSuccess) return 1;
    if (syncwarp) lane_exchange_kernel<true><<<1, 32>>>(d);
    else lane_exchange_kernel<false><<<1, 32>>>(d);
    float h[32];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    int bad = 0;
    for (int l = 0; l < 32; l++) bad += !(h[l] == (float)((l + 1) % 32));
    printf("lane exchange through shared memory after a %s: %d of 32 wrong\n", syncwarp ? "__syncwarp" : "shuffle",
           bad);
    return bad ? 1 : 0;
}

constexpr int kBufThreads = 64, kTile = 4 * kBufThreads, kBufTiles = 3;  // a 16-byte chunk (4 floats) a thread

template <bool kBarrier>
__global__ void double_buffer_kernel(float* out, const float* in) {
    __shared__ __align__(16) float buf[2][kTile];
    const int t = threadIdx.x, peer = (t + 32) % kBufThreads;  // the chunk a thread of the other warp copies
    cp_async_16(&buf[0][4 * t], in + 4 * t, 16);
    cp_async_commit();
    float sum = 0.f;
    for (int j = 0; j < kBufTiles; j++) {
        if (j + 1 < kBufTiles) cp_async_16(&buf[(j + 1) & 1][4 * t], in + (j + 1) * kTile + 4 * t, 16);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        for (int k = 0; k < 4; k++) sum += buf[j & 1][4 * peer + k];
        if (kBarrier) __syncthreads();  // the write-after-read barrier the negative control removes
    }
    cp_async_wait<0>();
    out[t] = sum;
}

static int double_buffer(bool barrier) {
    std::vector<float> h(kBufTiles * kTile);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(i % 13);
    float *d, *o;
    if (cudaMalloc(&d, h.size() * 4) != cudaSuccess || cudaMalloc(&o, kBufThreads * 4) != cudaSuccess) return 1;
    cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    if (barrier) double_buffer_kernel<true><<<1, kBufThreads>>>(o, d);
    else double_buffer_kernel<false><<<1, kBufThreads>>>(o, d);
    float out[kBufThreads];
    if (cudaMemcpy(out, o, sizeof out, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    int bad = 0;
    for (int t = 0; t < kBufThreads; t++) {
        float s = 0.f;
        for (int j = 0; j < kBufTiles; j++)
            for (int k = 0; k < 4; k++) s += h[j * kTile + 4 * ((t + 32) % kBufThreads) + k];
        bad += !(out[t] == s);
    }
    printf("double buffer by cp.async %s the write-after-read __syncthreads: %d of %d sums wrong\n",
           barrier ? "with" : "without", bad, kBufThreads);
    return bad ? 1 : 0;
}

int main(int argc, char** argv) {
    const char* m = argc == 2 ? argv[1] : "";
    if (!strcmp(m, "--double-buffer") || !strcmp(m, "--double-buffer-no-war-barrier"))
        return double_buffer(!strcmp(m, "--double-buffer"));
    if (!strcmp(m, "--with-syncwarp") || !strcmp(m, "--shuffle-only")) return lane_exchange(!strcmp(m, "--with-syncwarp"));
    const bool barrier = !strcmp(m, "--with-barrier");
    if (!barrier && strcmp(m, "--without-barrier")) {
        fprintf(stderr, "usage: %s --with-barrier|--without-barrier|--with-syncwarp|--shuffle-only|--double-buffer"
                "|--double-buffer-no-war-barrier\n", argv[0]);
        return 2;
    }
    const int N = 40, C = 300;
    std::vector<float> h(N * C);
    for (int i = 0; i < N * C; i++) h[i] = (float)(i % 7) - 3.f;
    float *d, *p;
    if (cudaMalloc(&d, h.size() * 4) != cudaSuccess || cudaMalloc(&p, C * 4) != cudaSuccess) return 1;
    cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    const dim3 grid((C + kCols - 1) / kCols), block(kThreadsX, kLanes);
    if (barrier) column_sum_kernel<true><<<grid, block>>>(p, d, N, C);
    else column_sum_kernel<false><<<grid, block>>>(p, d, N, C);
    if (cudaGetLastError() != cudaSuccess) return 1;
    std::vector<float> out(C);
    cudaMemcpy(out.data(), p, C * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int c = 0; c < C; c++) {
        float s = 0.f;
        for (int r = 0; r < N; r++) s += h[(long)r * C + c];
        if (!(out[c] == s)) bad++;
    }
    printf("column sums %s the __syncthreads: %d of %d columns wrong\n", barrier ? "with" : "without", bad, C);
    return bad ? 1 : 0;
}
