// dropout.cu — hidden dropout fused with the row-parallel bias and the residual add (see dropout.h).
// The plain math this file computes fast: layers/reference/dropout.h
//
//   forward:  out  = resid + mask ⊙ (x + bias) / (1 - p)        mask: 1 byte per element (paper's sbh)
//   backward: dx   = dout ⊙ mask / (1 - p)
//
// The mask bit of an element is a pure function of (seed, stream, *global* element index) (philox.h), so:
//  - the fast CPU path and the CUDA kernel below write the same mask bytes;
//  - a sequence-parallel rank (s_offset = its shard start) or a data-parallel rank (b_offset) writes exactly
//    the bytes a single-rank run writes for the same elements;
//  - selective / full recomputation regenerates the mask without any RNG state (paper §5).
// In the paper's Table 2 accounting every dropout stores its mask (1 byte per element), even with p = 0;
// we keep that: the mask is always written (all ones when p == 0).
#include "dropout.h"
#include <cstring>
#include "fast_exp.h"
#include "op_timer.h"
#include "philox.h"
#include "vec8.h"

// ---- shared by the fast CPU path and the CUDA kernel ---------------------------------------------------

// Global flat index of element (s, b, c) of this rank's [S_loc, B_loc, C] block in the global [S, B, C]
// tensor (dropout.h). 64-bit: S·B·C exceeds 2^32 at paper scale.
__host__ __device__ inline uint64_t dropout_global_index(int64_t s, int64_t b, int64_t c, int64_t C,
                                                         const DropoutCoords& w) {
    return (uint64_t)(((w.s_offset + s) * w.B_total + (w.b_offset + b)) * C + c);
}

// One element of the fused op, in fp32. Written once and used by both paths so the arithmetic is the same.
template <class T>
__host__ __device__ inline void bias_dropout_residual_element(T* out, uint8_t* mask, const T* x, const T* bias,
                                                              const T* resid, int64_t i, int64_t c,
                                                              uint64_t global_index, float scale,
                                                              uint32_t threshold, uint64_t seed,
                                                              uint32_t stream) {
    bool keep = dropout_keep(seed, stream, global_index, threshold);
    float v = to_f32(x[i]);
    if (bias) v += to_f32(bias[c]);
    v = keep ? v * scale : 0.0f;
    if (resid) v += to_f32(resid[i]);
    mask[i] = keep ? 1 : 0;
    out[i] = from_f32<T>(v);  // written last: out may alias x or resid, which were read above
}

// ---- fast CPU path -------------------------------------------------------------------------------------
// Row by row, in two loops: the keep bits first (dropout_keep_run: Philox blocks in SIMD lanes, one per four
// elements; no random numbers at p = 0),
// then the arithmetic of bias_dropout_residual_element over the row as one SIMD loop. The operations and
// their order are the element function's, so the bits are the same as one element at a time; the select is
// a bit mask (fast_exp.h): written as `keep ? v * scale : 0` the loop is not vectorised.

template <class T>
MM_CPU_LOOP static void bias_dropout_residual_cpu(T* out, uint8_t* mask, const T* x, const T* bias, const T* resid,
                                      float scale, uint32_t threshold, uint64_t seed, uint32_t stream,
                                      int S_loc, int B_loc, int C, DropoutCoords where) {
    const int64_t rows = (int64_t)S_loc * B_loc;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        const int64_t s = row / B_loc, b = row % B_loc;  // sequence-major layout: row = s * B_loc + b
        uint8_t* m = mask + row * C;
        const T* xr = x + row * C;
        const T* rr = resid ? resid + row * C : nullptr;
        T* yr = out + row * C;
        if (threshold == 0) {
            memset(m, 1, (size_t)C);
        } else {
            const uint64_t g0 = dropout_global_index(s, b, 0, C, where);  // the row's elements are g0 + c
            dropout_keep_run(m, seed, stream, g0, C, threshold);
        }
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            float v = to_f32(xr[c]);
            if (bias) v += to_f32(bias[c]);
            v = select_f(m[c] != 0, v * scale, 0.0f);
            if (rr) v += to_f32(rr[c]);
            yr[c] = from_f32<T>(v);  // out may alias x or resid: element c was read above
        }
    }
}

template <class T>
MM_CPU_LOOP static void dropout_backward_cpu(T* dx, const T* dout, const uint8_t* mask, float scale, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) dx[i] = from_f32<T>(select_f(mask[i] != 0, to_f32(dout[i]) * scale, 0.0f));
}

// ---- CUDA kernels --------------------------------------------------------------------------------------

// Forward: one thread per pack of 8 consecutive channels of one row (vec8.h). Rows go along the grid's y
// (blockIdx.y, striding by gridDim.y), the ceil(C/8) packs of a row along x, so a pack never straddles two
// rows (the last pack of a row is partial when C % 8 != 0) and the row's sequence position and batch index
// are computed once per row with 32-bit arithmetic, not with a 64-bit division per pack. In bf16 a pack moves x, resid and out with one 16-byte access each and the 8 mask bytes with
// one 8-byte store (vec); when C % 8 != 0 or a pointer is misaligned the same packs are moved element by
// element. The mask bits are those of dropout_keep of each element's global index (dropout_keep8 draws them
// one Philox block of four at a time): the mask bits
// are exactly those of the fast CPU path, whichever path ran.
template <class T>
__global__ void bias_dropout_residual_kernel(T* out, uint8_t* mask, const T* x, const T* bias, const T* resid,
                                             float scale, uint32_t threshold, uint64_t seed, uint32_t stream,
                                             int S_loc, int B_loc, int C, DropoutCoords where, bool vec) {
    const int packs_per_row = (C + 7) / 8, rows = S_loc * B_loc;
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const int s = row / B_loc, b = row - s * B_loc;  // once per row
        for (int pk = blockIdx.x * blockDim.x + threadIdx.x; pk < packs_per_row; pk += gridDim.x * blockDim.x) {
            const int c0 = pk * 8;
            const int count = C - c0 < 8 ? C - c0 : 8;
            const int64_t i = (int64_t)row * C + c0;  // local flat index of the pack's first element
            const uint64_t g0 = dropout_global_index(s, b, c0, C, where);  // the pack's elements are g0 .. g0 + 7

            const Pack8<T> xv = load8(x + i, count, vec);
            Pack8<T> bv, rv;
            if (bias) bv = load8(bias + c0, count, vec);
            if (resid) rv = load8(resid + i, count, vec);
            Pack8<T> ov;
            uint64_t mbits = 0;
            const uint32_t keep8 = dropout_keep8(seed, stream, g0, threshold);  // one Philox call per 4 elements
#pragma unroll
            for (int k = 0; k < 8; k++) {
                // The same arithmetic as bias_dropout_residual_element (the fast CPU path).
                const bool keep = (keep8 >> k) & 1u;
                float v = to_f32(xv.v[k]);
                if (bias) v += to_f32(bv.v[k]);
                v = keep ? v * scale : 0.0f;
                if (resid) v += to_f32(rv.v[k]);
                ov.v[k] = from_f32<T>(v);
                mbits |= (uint64_t)(keep ? 1 : 0) << (8 * k);
            }
            store_mask8(mask + i, mbits, count, vec);
            store8(out + i, ov, count, vec);  // out may alias x or resid: this thread read its pack above
        }
    }
}

// Backward: a flat loop over packs of 8 (dx may alias dout: each thread reads its pack before writing it).
template <class T>
__global__ void dropout_backward_kernel(T* dx, const T* dout, const uint8_t* mask, float scale, int64_t n,
                                        bool vec) {
    const int64_t packs = (n + 7) / 8;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = j * 8;
        const int count = n - i < 8 ? (int)(n - i) : 8;
        const Pack8<T> dy = load8(dout + i, count, vec);
        const uint64_t mbits = load_mask8(mask + i, count, vec);
        Pack8<T> d;
#pragma unroll
        for (int k = 0; k < 8; k++) d.v[k] = from_f32<T>(mask8_get(mbits, k) ? to_f32(dy.v[k]) * scale : 0.0f);
        store8(dx + i, d, count, vec);
    }
}

// Blocks for one thread per pack of 8 (capped: the kernels' grid-stride loops cover the rest).
static unsigned pack_blocks(int64_t packs, int threads) {
    int64_t blocks = (packs + threads - 1) / threads;
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}

// ---- dispatch ------------------------------------------------------------------------------------------

static float dropout_scale(float p, const char* op) {
    if (!(p >= 0.0f && p < 1.0f)) mm_fatal("%s: dropout probability must be in [0, 1), got %g", op, p);
    return 1.0f / (1.0f - p);
}

void bias_dropout_residual_forward(Ctx& ctx, Tensor out, Tensor mask, Tensor x, Tensor bias, Tensor resid,
                                   float p, uint64_t seed, uint32_t stream, int S_loc, int B_loc, int C,
                                   const DropoutCoords& where) {
    const char* op = "bias_dropout_residual_forward";
    const int64_t n = (int64_t)S_loc * B_loc * C;
    const float scale = dropout_scale(p, op);
    // A block that does not fit in the global batch would map two local elements to one global index (two
    // elements sharing a random number): refuse instead of silently correlating masks.
    if (where.s_offset < 0 || where.b_offset < 0 || where.b_offset + B_loc > where.B_total)
        mm_fatal("%s: block (b_offset %lld + B_loc %d) does not fit in B_total %lld (set DropoutCoords.B_total "
                 "to the global batch)", op, (long long)where.b_offset, B_loc, (long long)where.B_total);
    check_tensor(ctx, out, out.dtype, n, op, "out");
    check_tensor(ctx, x, out.dtype, n, op, "x");
    check_tensor(ctx, mask, DType::U8, n, op, "mask");
    if (!bias.empty()) check_tensor(ctx, bias, out.dtype, C, op, "bias");
    if (!resid.empty()) check_tensor(ctx, resid, out.dtype, n, op, "resid");
    OpScope scope(ctx, op);
    if (n == 0) return;
    const uint32_t threshold = dropout_threshold(p);  // 0 when p == 0: keep everything

    MM_DISPATCH_ACT(out.dtype, {
        const T* b = bias.empty() ? nullptr : bias.as<T>();
        const T* r = resid.empty() ? nullptr : resid.as<T>();
        if (ctx.device == Device::CPU) {
            bias_dropout_residual_cpu<T>(out.as<T>(), mask.as<uint8_t>(), x.as<T>(), b, r, scale, threshold,
                                         seed, stream, S_loc, B_loc, C, where);
        } else {
            // Threads along a row: its packs rounded up to whole warps, at most 256 (C = 1600: 200 packs, 224
            // threads); rows along y, at most 65535 blocks (the kernel strides over the rest).
            const int packs_per_row = (C + 7) / 8;
            const int threads = packs_per_row >= 256 ? 256 : (packs_per_row + 31) / 32 * 32;
            if ((int64_t)S_loc * B_loc > INT32_MAX || (int64_t)C > INT32_MAX - 8)
                mm_fatal("%s: %d x %d rows of %d channels: more rows or channels than 32-bit indexing covers", op,
                         S_loc, B_loc, C);
            const int rows = S_loc * B_loc;
            const dim3 grid((unsigned)((packs_per_row + threads - 1) / threads), (unsigned)(rows < 65535 ? rows : 65535));
            // Vector accesses need every row to start 16 bytes aligned: C % 8 == 0 and aligned bases.
            const bool vec = C % 8 == 0 && vec8_aligned(out.data) && vec8_aligned(x.data) && vec8_aligned(b) &&
                             vec8_aligned(r) && vec8_aligned(mask.data);
            bias_dropout_residual_kernel<T><<<grid, threads, 0, ctx.stream>>>(
                out.as<T>(), mask.as<uint8_t>(), x.as<T>(), b, r, scale, threshold, seed, stream, S_loc, B_loc,
                C, where, vec);
            CUDA_CHECK_LAST();
        }
    });
}

void dropout_backward(Ctx& ctx, Tensor dx, Tensor dout, Tensor mask, float p, int64_t n) {
    const char* op = "dropout_backward";
    const float scale = dropout_scale(p, op);
    check_tensor(ctx, dx, dout.dtype, n, op, "dx");
    check_tensor(ctx, dout, dout.dtype, n, op, "dout");
    check_tensor(ctx, mask, DType::U8, n, op, "mask");
    OpScope scope(ctx, op);
    if (n == 0) return;
    MM_DISPATCH_ACT(dout.dtype, {
        if (ctx.device == Device::CPU) {
            dropout_backward_cpu<T>(dx.as<T>(), dout.as<T>(), mask.as<uint8_t>(), scale, n);
        } else {
            const int threads = 256;
            const bool vec = vec8_aligned(dx.data) && vec8_aligned(dout.data) && vec8_aligned(mask.data);
            dropout_backward_kernel<T><<<pack_blocks((n + 7) / 8, threads), threads, 0, ctx.stream>>>(
                dx.as<T>(), dout.as<T>(), mask.as<uint8_t>(), scale, n, vec);
            CUDA_CHECK_LAST();
        }
    });
}

void bias_dropout_residual_runs(Ctx& ctx, Tensor out, Tensor mask, Tensor x, Tensor bias, Tensor resid, float p,
                                uint64_t seed, uint32_t stream, const SeqRuns& runs, int B, int C, DropoutCoords where) {
    const int64_t row = (int64_t)B * C;  // elements per position
    for_each_run(runs, [&](int local, int64_t global, int len) {
        const int64_t at = local * row, n = len * row;
        where.s_offset = global;
        bias_dropout_residual_forward(ctx, out.slice(at, n), mask.slice(at, n), x.slice(at, n), bias,
                                      resid.data ? resid.slice(at, n) : resid, p, seed, stream, len, B, C, where);
    });
}
