// linear.cu — the fully connected layer y = x Wᵀ + b (W stored (out, in), as llm.c and PyTorch), built on
// the one gemm() primitive (matmul.h), and the deterministic bias gradient.
// The plain math this file computes fast: layers/reference/linear.h
//
// Forward:   out[N×OC]  = in[N×IC] · Wᵀ + b
// Backward:  din[N×IC]  = dout · W            (overwritten, or accumulated when accumulate_din)
//            dW[OC×IC] += doutᵀ · in          (f32 gradient buffer, accumulated across micro-batches;
//            db[OC]    += Σ_rows dout          the first write of a step overwrites: GradWrite, runtime.h)
// In Megatron's tensor parallelism the column-parallel (QKV, fc1) and row-parallel (projection, fc2) layers
// call exactly these on their weight shards; the communication around them lives in parallel/.
#include "linear.h"

#include "linear_lt.h"
#include "matmul.h"
#include "op_timer.h"
#include "vec8.h"

#include <cstdint>
#include <map>

// ---------------------------------------------------------------------------------------------------------
// Fast CPU path (the GEMMs themselves are gemm()'s, matmul.cu)
// ---------------------------------------------------------------------------------------------------------

// bias broadcast: out[r, :] = bias. The forward GEMM then runs with beta = 1, so the bias is added inside the
// GEMM's fp32 epilogue and a bf16 output is rounded once (acc + bias), not twice. On the GPU the same
// broadcast is the fallback (end of this file): linear_forward_lt fuses the bias into the GEMM.

template <class TO, class TB>
static void bias_broadcast_cpu(TO* out, const TB* bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++)
        for (int c = 0; c < C; c++) out[r * C + c] = from_f32<TO>(to_f32(bias[c]));
}

// bias gradient: dbias[c] += Σ_r dout[r, c], in a fixed order (no atomics), so that it is bitwise
// reproducible — recompute policies are compared bitwise (docs/design.md "Recomputation").

template <class TD, class TG>
MM_CPU_LOOP static void bias_backward_cpu(TG* dbias, const TD* dout, int N, int C, bool accumulate) {
    // Columns in blocks of 64 so that each thread walks rows of a contiguous strip (cache friendly), and
    // each column is summed in one thread, over the rows in the fixed pairwise order of vec8.h (a running
    // sum down 1024+ rows was 3x less accurate than PyTorch's).
    constexpr int CB = 64;
    const int nblk = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * CB, w = C - c0 < CB ? C - c0 : CB;
        float sum[CB];
        cpu_pairwise_row_sums<CB>(N, sum, [&](float* acc, int64_t r) {
            const TD* row = dout + r * C + c0;
#pragma omp simd
            for (int j = 0; j < w; j++) acc[j] += to_f32(row[j]);
        });
        for (int j = 0; j < w; j++) dbias[c0 + j] = from_f32<TG>((accumulate ? to_f32(dbias[c0 + j]) : 0.f) + sum[j]);
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA, the common case: the forward with the bias fused into the GEMM. cuBLASLt's BIAS epilogue adds bias[c]
// to the fp32 accumulator of every output element before the one rounding to the output dtype. The broadcast
// path (the fallback) writes N×OC elements and the GEMM with beta = 1 reads them back: one extra write and
// one extra read of the whole output (for GPT-2 XL's fc1, 8192 × 6400 bf16: 2 × 105 MB per layer), which
// this path skips.
//
// Row-major out[N×OC] = in[N×IC] · Wᵀ is column-major outᵀ[OC×N] = W_cm ᵀ · in_cm, where W_cm (IC×OC,
// ld IC) and in_cm (IC×N, ld IC) are the row-major buffers read column-major (matmul.cu explains the swap):
// cuBLASLt's A is the weight with TRANSA = T, its B is the input with TRANSB = N, and its bias runs along the
// OC rows of the column-major result, i.e. along the columns of our row-major output, as wanted.
//
// Determinism: the algorithm comes from cuBLASLt's heuristic, which gives the same answer for the same
// shapes, types, alignments and workspace size; it is cached per such key (so the heuristic runs once per
// shape), and the workspace is ours (ctx.lt_workspace), so cuBLASLt never picks a different internal one.
// Returns false (and the caller takes the broadcast path) when cuBLASLt offers no algorithm.
// ---------------------------------------------------------------------------------------------------------

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about a buffer's alignment.
static uint32_t pointer_alignment(const void* p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a) != 0) a >>= 1;
    return a;
}

static cudaDataType_t lt_type(DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

// The heuristic query (linear_lt.h): the plan takes its first answer, a benchmark's survey all of them.
int lt_heuristics(Ctx& ctx, const LtPlan& p, const LtKey& k, cublasLtMatmulHeuristicResult_t* results, int max) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = k.workspace;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // The real alignment of our pointers (the default assumes 256 bytes; views can be less aligned).
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.align_a,
                                                      sizeof(k.align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.align_b,
                                                      sizeof(k.align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.align_c,
                                                      sizeof(k.align_c)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.align_c,
                                                      sizeof(k.align_c)));
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, p.op, p.a, p.b, p.c, p.c, pref, max, results,
                                                       &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    // NOT_SUPPORTED or no result: this combination has no fused-bias kernel; the caller uses the broadcast path.
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(st);
    return st == CUBLAS_STATUS_SUCCESS ? found : 0;
}

// Descriptors and the algorithm for one key, built once and kept for the life of the process (a handful of
// shapes per model). Not thread-safe; ops are called from one host thread per process.
static std::map<LtKey, LtPlan>& lt_plans() {
    static std::map<LtKey, LtPlan> plans;
    return plans;
}
const std::map<LtKey, LtPlan>& lt_planned() { return lt_plans(); }
static const LtPlan& lt_plan(Ctx& ctx, const LtKey& k) {
    std::map<LtKey, LtPlan>& plans = lt_plans();
    auto it = plans.find(k);
    if (it != plans.end()) return it->second;
    LtPlan p;
    const cudaDataType_t tab = lt_type((DType)k.ab), tc = lt_type((DType)k.c);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));  // plain fp32, never TF32
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const cudaDataType_t tbias = tab;  // the bias has the activation dtype (linear.h)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tbias, sizeof(tbias)));
    // Column-major layouts: A = W_cm (IC×OC, ld IC), B = in_cm (IC×N, ld IC), C = D = out_cm (OC×N, ld OC).
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, tab, k.IC, k.OC, k.IC));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, tab, k.IC, k.N, k.IC));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, tc, k.OC, k.N, k.OC));

    cublasLtMatmulHeuristicResult_t result;
    if (lt_heuristics(ctx, p, k, &result, 1) > 0) {
        p.ok = true;
        p.algo = result.algo;
    }
    return plans.emplace(k, p).first->second;
}

static bool linear_forward_lt(Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias, int N, int IC, int OC) {
    // Only the same-dtype case (bf16 → bf16, f32 → f32), with the bias at least 16-byte aligned (the bias
    // vector's alignment is not a heuristic preference, so we only hand cuBLASLt well-aligned ones).
    if (out.dtype != in.dtype || ctx.cublaslt == nullptr || pointer_alignment(bias.data) < 16) return false;
    if (N <= 0 || OC <= 0 || IC <= 0) return false;  // empty products: the generic path handles them
    LtKey k{N, IC, OC, (int)in.dtype, (int)out.dtype, pointer_alignment(weight.data), pointer_alignment(in.data),
            pointer_alignment(out.data), pointer_alignment(bias.data), ctx.lt_workspace_bytes};
    const LtPlan& p = lt_plan(ctx, k);
    if (!p.ok) return false;
    const void* bias_ptr = bias.data;
    // The bias pointer is per call (descriptors are shared by calls of one key): set it before each matmul.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                sizeof(bias_ptr)));
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt, p.op, &alpha, weight.data, p.a, in.data, p.b, &beta, out.data, p.c,
                                out.data, p.c, &p.algo, ctx.lt_workspace, ctx.lt_workspace_bytes, ctx.stream));
    return true;
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels: the bias gradient, in two deterministic stages
// ---------------------------------------------------------------------------------------------------------

// Stage 1: block (column tile, row chunk) sums its rows: 32 threads across, each owning a pack of 8
// consecutive columns (vec8.h: one 16-byte load per row in bf16 when C % 8 == 0 and the base is aligned,
// element by element otherwise and for the last partial pack), × 8 row-lanes; each lane strides over the
// chunk's rows, then the 8 lanes are combined in a fixed order. A column's sum runs in the same order as
// with one column per thread (lane l: rows r0 + l, r0 + l + 8, ...; then lanes 0..7), so the bits do not
// depend on the packing. One partial per (chunk, column).
constexpr int kBiasThreadsX = 32, kBiasCols = 8 * kBiasThreadsX, kBiasLanes = 8, kBiasRowsPerChunk = 512;

// gridDim.y is capped at 65535 (CUDA's limit; 65535 × 512 = 33,553,920 rows): a block strides over the row
// chunks blockIdx.y, blockIdx.y + gridDim.y, ...; each chunk is summed exactly as by a block of its own, so
// the bits do not depend on the cap.
constexpr int kBiasMaxGridY = 65535;

template <class TD>
__global__ void bias_partial_kernel(float* partial, const TD* dout, int N, int C, bool vec) {
    __shared__ float sm[kBiasLanes][kBiasCols];
    const int c0 = blockIdx.x * kBiasCols + threadIdx.x * 8;  // this thread's 8 columns
    const int count = C - c0 < 8 ? (C - c0 > 0 ? C - c0 : 0) : 8;
    const int chunks = (N + kBiasRowsPerChunk - 1) / kBiasRowsPerChunk;
    // The loop bound is the same for every thread of the block, so all of them reach both barriers.
    for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
        const int r0 = chunk * kBiasRowsPerChunk;
        const int r1 = min(N, r0 + kBiasRowsPerChunk);
        float acc[8];
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = 0.f;
        if (count > 0)
            for (int r = r0 + threadIdx.y; r < r1; r += kBiasLanes) {
                const Pack8<TD> d = load8(dout + (int64_t)r * C + c0, count, vec);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += to_f32(d.v[k]);
            }
#pragma unroll
        for (int k = 0; k < 8; k++) sm[threadIdx.y][threadIdx.x * 8 + k] = acc[k];
        __syncthreads();
        if (threadIdx.y == 0) {
            for (int k = 0; k < count; k++) {
                float s = 0.f;
                for (int l = 0; l < kBiasLanes; l++) s += sm[l][threadIdx.x * 8 + k];
                partial[(int64_t)chunk * C + c0 + k] = s;
            }
        }
        __syncthreads();  // the next chunk overwrites sm only after lane 0 has read it
    }
}

// Stage 2: each column adds its chunk partials in chunk order and accumulates into (or overwrites) dbias.
template <class TG>
__global__ void bias_finish_kernel(TG* dbias, const float* partial, int chunks, int C, bool accumulate) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f;
    for (int k = 0; k < chunks; k++) s += partial[(int64_t)k * C + c];
    dbias[c] = from_f32<TG>((accumulate ? to_f32(dbias[c]) : 0.f) + s);
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

// The fallback broadcast kernel, defined at the end of this file.
template <class TO, class TB>
__global__ void bias_broadcast_kernel(TO* out, const TB* bias, int64_t total, int C);

// The tests' pin and the last path taken: process-wide on purpose (a test pins before it builds anything;
// the trainer never pins).
static LinearForwardPath g_linear_pin = LinearForwardPath::NoBias, g_linear_last = LinearForwardPath::NoBias;

const char* linear_forward_path_name(LinearForwardPath p) {
    switch (p) {
        case LinearForwardPath::NoBias: return "no_bias";
        case LinearForwardPath::FusedBias: return "fused_bias";
        case LinearForwardPath::Broadcast: return "broadcast";
    }
    return "?";
}

LinearForwardPath linear_forward_path(DType in, DType out, bool has_bias) {
    if (!has_bias) return LinearForwardPath::NoBias;
    // linear_forward_lt takes only the same-dtype case; the LM head's bf16 -> f32 would need a mixed epilogue.
    return in == out ? LinearForwardPath::FusedBias : LinearForwardPath::Broadcast;
}

void linear_forward_pin(LinearForwardPath p) { g_linear_pin = p; }
LinearForwardPath linear_forward_last_path() { return g_linear_last; }

void linear_forward(Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias, int N, int IC, int OC) {
    if (in.n != (int64_t)N * IC || weight.n != (int64_t)OC * IC || out.n != (int64_t)N * OC ||
        (!bias.empty() && bias.n != OC))
        mm_fatal("linear_forward: sizes do not match N=%d IC=%d OC=%d", N, IC, OC);
    if (weight.dtype != in.dtype || (!bias.empty() && bias.dtype != in.dtype))
        mm_fatal("linear_forward: in, weight and bias must share a dtype");
    OpScope scope(ctx, "linear_forward", 2.0 * N * (double)IC * OC);
    // GPU with a bias: one cuBLASLt GEMM with the bias in its epilogue (when cuBLASLt has a kernel for it).
    if (ctx.device == Device::CUDA && !bias.empty()) {
        const LinearForwardPath want =
            g_linear_pin != LinearForwardPath::NoBias ? g_linear_pin : linear_forward_path(in.dtype, out.dtype, true);
        if (want == LinearForwardPath::FusedBias) {
            if (linear_forward_lt(ctx, out, in, weight, bias, N, IC, OC)) {
                g_linear_last = LinearForwardPath::FusedBias;
                return;
            }
            if (g_linear_pin == LinearForwardPath::FusedBias)
                mm_fatal("linear_forward: pinned to the fused-bias GEMM, but cuBLASLt declines N=%d IC=%d OC=%d "
                         "(%s -> %s)", N, IC, OC, dtype_name(in.dtype), dtype_name(out.dtype));
        }
        g_linear_last = LinearForwardPath::Broadcast;
    }
    float beta = 0.f;
    if (!bias.empty()) {
        beta = 1.f;
        MM_DISPATCH_ACT(out.dtype, {
            using TO = T;
            MM_DISPATCH_ACT(bias.dtype, {
                if (ctx.device == Device::CUDA) {
                    int64_t total = (int64_t)N * OC;
                    int threads = 256;
                    int64_t blocks = (total + threads - 1) / threads;
                    if (blocks > 0)
                        bias_broadcast_kernel<TO, T><<<(unsigned)blocks, threads, 0, ctx.stream>>>(
                            out.as<TO>(), bias.as<T>(), total, OC);
                    CUDA_CHECK_LAST();
                } else {
                    bias_broadcast_cpu<TO, T>(out.as<TO>(), bias.as<T>(), N, OC);
                }
            });
        });
    }
    // out = in · Wᵀ (+ out): M = N rows, N = OC columns, K = IC.
    gemm(ctx, false, true, N, OC, IC, 1.f, GemmOperand{in.data, IC}, GemmOperand{weight.data, IC}, beta,
         out.data, OC, 0, in.dtype, out.dtype);
}

size_t bias_backward_scratch_bytes(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return (size_t)((N + kBiasRowsPerChunk - 1) / kBiasRowsPerChunk) * C * sizeof(float);
}

void bias_backward(Ctx& ctx, Tensor dbias, Tensor dout, int N, int C, GradWrite grads) {
    if (dbias.empty()) return;
    if (dbias.n != C || dout.n != (int64_t)N * C) mm_fatal("bias_backward: sizes do not match N=%d C=%d", N, C);
    OpScope scope(ctx, "bias_backward");
    const bool accumulate = grads == GradWrite::Accumulate;
    if (C == 0) return;
    if (N == 0) {  // no rows: the sum is 0
        if (!accumulate) tensor_zero(ctx, dbias);
        return;
    }
    MM_DISPATCH_ACT(dout.dtype, {
        using TD = T;
        MM_DISPATCH_ACT(dbias.dtype, {
            if (ctx.device == Device::CUDA) {
                int chunks = (N + kBiasRowsPerChunk - 1) / kBiasRowsPerChunk;
                float* partial = (float*)ctx_scratch(ctx, bias_backward_scratch_bytes(N, C));
                dim3 grid((C + kBiasCols - 1) / kBiasCols, chunks < kBiasMaxGridY ? chunks : kBiasMaxGridY),
                    block(kBiasThreadsX, kBiasLanes);
                // 16-byte loads need every row start aligned: C % 8 == 0 and an aligned base pointer.
                const bool vec = C % 8 == 0 && vec8_aligned(dout.data);
                bias_partial_kernel<TD><<<grid, block, 0, ctx.stream>>>(partial, dout.as<TD>(), N, C, vec);
                CUDA_CHECK_LAST();
                bias_finish_kernel<T><<<(C + 255) / 256, 256, 0, ctx.stream>>>(dbias.as<T>(), partial, chunks, C,
                                                                                 accumulate);
                CUDA_CHECK_LAST();
            } else {
                bias_backward_cpu<TD, T>(dbias.as<T>(), dout.as<TD>(), N, C, accumulate);
            }
        });
    });
}

void linear_backward(Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in, Tensor weight,
                     int N, int IC, int OC, bool accumulate_din, GradWrite grads) {
    if (dout.n != (int64_t)N * OC) mm_fatal("linear_backward: dout has %lld elements, expected N*OC=%lld",
                                            (long long)dout.n, (long long)N * OC);
    // A zero-bubble schedule's B: dW and db wait for its W (WeightGradSink, linear.h).
    if (!dweight.empty() && ctx.weight_grad_sink && ctx.weight_grad_sink->defer(ctx, dweight, dbias, dout, in, N, IC, OC, grads))
        dweight = dbias = Tensor();
    // Matmul FLOPs: one N×IC×OC GEMM for din, one for dweight (each skipped when its output is empty).
    const int gemms = (din.empty() ? 0 : 1) + (dweight.empty() ? 0 : 1);
    OpScope scope(ctx, "linear_backward", gemms * 2.0 * N * (double)IC * OC);
    if (!din.empty()) {
        if (din.n != (int64_t)N * IC || weight.n != (int64_t)OC * IC || weight.dtype != dout.dtype)
            mm_fatal("linear_backward: din/weight do not match N=%d IC=%d OC=%d", N, IC, OC);
        // din[N×IC] = dout[N×OC] · W[OC×IC]
        gemm(ctx, false, false, N, IC, OC, 1.f, GemmOperand{dout.data, OC}, GemmOperand{weight.data, IC},
             accumulate_din ? 1.f : 0.f, din.data, IC, 0, dout.dtype, din.dtype);
    }
    if (!dweight.empty()) {
        if (dweight.n != (int64_t)OC * IC || in.n != (int64_t)N * IC || in.dtype != dout.dtype)
            mm_fatal("linear_backward: dweight/in do not match N=%d IC=%d OC=%d", N, IC, OC);
        // dW[OC×IC] += doutᵀ[OC×N] · in[N×IC]  (beta = 0 on the step's first write: nothing to read)
        gemm(ctx, true, false, OC, IC, N, 1.f, GemmOperand{dout.data, OC}, GemmOperand{in.data, IC},
             grads == GradWrite::Accumulate ? 1.f : 0.f, dweight.data, IC, 0, dout.dtype, dweight.dtype);
    }
    bias_backward(ctx, dbias, dout, N, OC, grads);
}

// ---------------------------------------------------------------------------------------------------------
// fallback: the bias broadcast on the GPU, when the fused-bias GEMM does not apply (output dtype not the
// input's, a bias under 16-byte alignment, or no cuBLASLt kernel for the shape)
// ---------------------------------------------------------------------------------------------------------

template <class TO, class TB>
__global__ void bias_broadcast_kernel(TO* out, const TB* bias, int64_t total, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) out[i] = from_f32<TO>(to_f32(bias[i % C]));
}
