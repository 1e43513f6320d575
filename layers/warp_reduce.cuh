// warp_reduce.cuh — the sum and the maximum of one float over the 32 lanes of a warp, returned to every lane.
//
// The xor butterfly combines the same pairs in the same order on every run, and every lane ends with the same
// bits (a + b == b + a in IEEE arithmetic), so these reductions are deterministic: the recompute policies,
// which rerun the same kernels on the same inputs, can be compared bit for bit. No shared memory and no
// __syncthreads: the caller must have all 32 lanes of the warp active.
#pragma once

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
