// dropout.cu — hidden dropout fused with the row-parallel bias and the residual add (see dropout.h).
//
//   forward:  out  = resid + mask ⊙ (x + bias) / (1 - p)        mask: 1 byte per element (paper's sbh)
//   backward: dx   = dout ⊙ mask / (1 - p)
//
// The mask bit of an element is a pure function of (seed, stream, *global* element index) (philox.h), so:
//  - the CPU reference and the CUDA kernel below write the same mask bytes;
//  - a sequence-parallel rank (s_offset = its shard start) or a data-parallel rank (b_offset) writes exactly
//    the bytes a single-rank run writes for the same elements;
//  - selective / full recomputation regenerates the mask without any RNG state (paper §5).
// In the paper's Table 2 accounting every dropout stores its mask (1 byte per element), even with p = 0;
// we keep that: the mask is always written (all ones when p == 0).
#include "dropout.h"
#include "philox.h"

// ---- shared by the CPU reference and the CUDA kernel ---------------------------------------------------

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

// ---- CPU reference -------------------------------------------------------------------------------------

template <class T>
static void bias_dropout_residual_cpu(T* out, uint8_t* mask, const T* x, const T* bias, const T* resid,
                                      float scale, uint32_t threshold, uint64_t seed, uint32_t stream,
                                      int S_loc, int B_loc, int C, DropoutCoords where) {
    const int64_t rows = (int64_t)S_loc * B_loc;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        int64_t s = row / B_loc, b = row % B_loc;  // sequence-major layout: row = s * B_loc + b
        for (int64_t c = 0; c < C; c++) {
            bias_dropout_residual_element(out, mask, x, bias, resid, row * C + c, c,
                                          dropout_global_index(s, b, c, C, where), scale, threshold, seed,
                                          stream);
        }
    }
}

template <class T>
static void dropout_backward_cpu(T* dx, const T* dout, const uint8_t* mask, float scale, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dx[i] = from_f32<T>(mask[i] ? to_f32(dout[i]) * scale : 0.0f);
}

// ---- CUDA kernels --------------------------------------------------------------------------------------

// Grid: x over the C channels (one thread per channel, consecutive threads -> consecutive addresses, so
// loads and stores coalesce), y over rows (grid-stride, because S_loc·B_loc can exceed gridDim.y's 65535).
// The row -> (s, b) division happens once per row, not once per element.
template <class T>
__global__ void bias_dropout_residual_kernel(T* out, uint8_t* mask, const T* x, const T* bias, const T* resid,
                                             float scale, uint32_t threshold, uint64_t seed, uint32_t stream,
                                             int S_loc, int B_loc, int C, DropoutCoords where) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t rows = (int64_t)S_loc * B_loc;
    for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
        int64_t s = row / B_loc, b = row % B_loc;
        bias_dropout_residual_element(out, mask, x, bias, resid, row * C + c, c,
                                      dropout_global_index(s, b, c, C, where), scale, threshold, seed, stream);
    }
}

template <class T>
__global__ void dropout_backward_kernel(T* dx, const T* dout, const uint8_t* mask, float scale, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = from_f32<T>(mask[i] ? to_f32(dout[i]) * scale : 0.0f);
}

// ---- dispatch ------------------------------------------------------------------------------------------

static void check_tensor(const Ctx& ctx, const Tensor& t, DType dtype, int64_t n, const char* op,
                         const char* name) {
    if (t.device != ctx.device || t.dtype != dtype || t.n < n)
        mm_fatal("%s: %s must be %s on %s with >= %lld elements (got %s on %s, %lld)", op, name,
                 dtype_name(dtype), device_name(ctx.device), (long long)n, dtype_name(t.dtype),
                 device_name(t.device), (long long)t.n);
}

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
    if (n == 0) return;
    const uint32_t threshold = dropout_threshold(p);  // 0 when p == 0: keep everything

    MM_DISPATCH_ACT(out.dtype, {
        const T* b = bias.empty() ? nullptr : bias.as<T>();
        const T* r = resid.empty() ? nullptr : resid.as<T>();
        if (ctx.device == Device::CPU) {
            bias_dropout_residual_cpu<T>(out.as<T>(), mask.as<uint8_t>(), x.as<T>(), b, r, scale, threshold,
                                         seed, stream, S_loc, B_loc, C, where);
        } else {
            const int threads = 256;
            int64_t rows = (int64_t)S_loc * B_loc;
            dim3 grid((unsigned)((C + threads - 1) / threads), (unsigned)(rows < 65535 ? rows : 65535));
            bias_dropout_residual_kernel<T><<<grid, threads, 0, ctx.stream>>>(
                out.as<T>(), mask.as<uint8_t>(), x.as<T>(), b, r, scale, threshold, seed, stream, S_loc, B_loc,
                C, where);
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
    if (n == 0) return;
    MM_DISPATCH_ACT(dout.dtype, {
        if (ctx.device == Device::CPU) {
            dropout_backward_cpu<T>(dx.as<T>(), dout.as<T>(), mask.as<uint8_t>(), scale, n);
        } else {
            const int threads = 256;
            int64_t blocks = (n + threads - 1) / threads;
            if (blocks > 65536) blocks = 65536;  // grid-stride loop covers the rest
            dropout_backward_kernel<T><<<(unsigned)blocks, threads, 0, ctx.stream>>>(
                dx.as<T>(), dout.as<T>(), mask.as<uint8_t>(), scale, n);
            CUDA_CHECK_LAST();
        }
    });
}
