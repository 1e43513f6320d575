// embedding.cu — token and (learned, GPT-2) position embeddings, forward and deterministic backward.
// The plain math this file computes fast: layers/reference/embedding.h
//
// Vocab parallelism (Megatron's VocabParallelEmbedding): a rank holds rows [v_begin, v_begin + V_local) of
// the padded token table. It writes the embedding of the tokens it owns and zeros for the others; summing
// the outputs over the TP group (all-reduce, or reduce-scatter into sequence shards under SP) then gives
// every rank the full lookup. Here is only the local part; the collective is in parallel/.
//
// Backward without float atomics. The natural scatter-add dwte[token[r]] += dout[r] has collisions (the same
// token appears in many rows), and atomicAdd in arbitrary order would make the gradient differ run to run.
// Instead the host groups the rows by token once per batch (EmbeddingIndex, a counting sort of the host
// tokens); the backward then gives each (unique token, channel) to one thread that sums its rows in
// ascending row order: a fixed order, identical on every run, and no write conflicts.
#include "embedding.h"
#include "op_timer.h"

#include <cstring>

// ---------------------------------------------------------------------------------------------------------
// Fast CPU path
// ---------------------------------------------------------------------------------------------------------

// token embedding forward: out[r, :] = wte[token[r] - v_begin, :] for a token this rank owns, else 0.
template <class TO, class TW>
static void token_fwd_cpu(TO* out, const int32_t* tokens, const TW* wte, int64_t v_begin, int V_local, int N,
                          int C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        int64_t local = (int64_t)tokens[r] - v_begin;
        bool own = local >= 0 && local < V_local;
        for (int c = 0; c < C; c++) out[r * C + c] = from_f32<TO>(own ? to_f32(wte[local * C + c]) : 0.f);
    }
}

// token embedding backward: one (unique token, channel) at a time, its rows summed in ascending order.
template <class TG, class TD>
static void token_bwd_cpu(TG* dwte, const TD* dout, const int32_t* token, const int32_t* row_ptr,
                          const int32_t* rows, int U, int C) {
#pragma omp parallel for schedule(dynamic, 16)
    for (int u = 0; u < U; u++) {
        TG* dst = dwte + (int64_t)token[u] * C;
        for (int c = 0; c < C; c++) {
            float acc = 0.f;
            for (int j = row_ptr[u]; j < row_ptr[u + 1]; j++) acc += to_f32(dout[(int64_t)rows[j] * C + c]);
            dst[c] = from_f32<TG>(to_f32(dst[c]) + acc);
        }
    }
}

// position embedding: out[s, b, :] += wpe[s_offset + s, :]. Under sequence parallelism a rank holds the
// positions [s_offset, s_offset + S_loc), so it reads (and, in backward, writes) only those rows of wpe;
// its dwpe is partial, and parallel/sequence_parallel.cu sums it over the TP group after the backward, with
// the other parameters replicated across the group (paper §4.2.2; docs/design.md "Sequence parallelism").
template <class TO, class TW>
static void pos_fwd_cpu(TO* out, const TW* wpe, int64_t s_offset, int S_loc, int B, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)S_loc * B; r++) {
        const TW* w = wpe + (s_offset + r / B) * C;
        for (int c = 0; c < C; c++) out[r * C + c] = from_f32<TO>(to_f32(out[r * C + c]) + to_f32(w[c]));
    }
}

template <class TG, class TD>
static void pos_bwd_cpu(TG* dwpe, const TD* dout, int64_t s_offset, int S_loc, int B, int C) {
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S_loc; s++) {
        TG* dst = dwpe + (s_offset + s) * C;
        for (int c = 0; c < C; c++) {
            float acc = 0.f;
            for (int b = 0; b < B; b++) acc += to_f32(dout[((int64_t)s * B + b) * C + c]);
            dst[c] = from_f32<TG>(to_f32(dst[c]) + acc);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA kernels: one thread per output element (forward) or per (token, channel) / (position, channel)
// of the gradient, which sums its rows in the fast CPU path's order
// ---------------------------------------------------------------------------------------------------------

template <class TO, class TW>
__global__ void token_fwd_kernel(TO* out, const int32_t* tokens, const TW* wte, int64_t v_begin, int V_local,
                                 int64_t total, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int64_t r = i / C, c = i % C;
    int64_t local = (int64_t)tokens[r] - v_begin;
    bool own = local >= 0 && local < V_local;
    out[i] = from_f32<TO>(own ? to_f32(wte[local * C + c]) : 0.f);
}

template <class TG, class TD>
__global__ void token_bwd_kernel(TG* dwte, const TD* dout, const int32_t* token, const int32_t* row_ptr,
                                 const int32_t* rows, int C) {
    const int u = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int j = row_ptr[u]; j < row_ptr[u + 1]; j++) acc += to_f32(dout[(int64_t)rows[j] * C + c]);
    TG* dst = dwte + (int64_t)token[u] * C + c;
    *dst = from_f32<TG>(to_f32(*dst) + acc);
}

template <class TO, class TW>
__global__ void pos_fwd_kernel(TO* out, const TW* wpe, int64_t s_offset, int B, int C, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int64_t r = i / C, c = i % C;
    out[i] = from_f32<TO>(to_f32(out[i]) + to_f32(wpe[(s_offset + r / B) * C + c]));
}

template <class TG, class TD>
__global__ void pos_bwd_kernel(TG* dwpe, const TD* dout, int64_t s_offset, int B, int C, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // (s, c) of the local block
    if (i >= total) return;
    int64_t s = i / C, c = i % C;
    float acc = 0.f;
    for (int b = 0; b < B; b++) acc += to_f32(dout[(s * B + b) * C + c]);
    TG* dst = dwpe + (s_offset + s) * C + c;
    *dst = from_f32<TG>(to_f32(*dst) + acc);
}

// ---------------------------------------------------------------------------------------------------------
// EmbeddingIndex: rows grouped by local token, built on the host (counting sort, stable in row order)
// ---------------------------------------------------------------------------------------------------------

// Make `t` an i32 buffer on `device` holding at least `need` elements, keeping its memory when it is large
// enough (the index is rebuilt every step; its buffers are allocated once). t.n is the capacity.
static void ensure_capacity(Tensor& t, Device device, int64_t need) {
    if (!t.empty() && t.device == device && t.n >= need) return;
    tensor_free(t);
    t = tensor_alloc(device, DType::I32, need > 0 ? need : 1);
}

// Queued on ctx.stream: after the previous step's backward, which may still be reading these buffers there,
// and before this step's kernels that read them.
static void upload(const Ctx& ctx, Tensor& t, const std::vector<int32_t>& v) {
    if (v.empty()) return;
    if (t.device == Device::CUDA)
        CUDA_CHECK(cudaMemcpyAsync(t.data, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice, ctx.stream));
    else
        memcpy(t.data, v.data(), v.size() * sizeof(int32_t));
}

void embedding_index_build(EmbeddingIndex& idx, const int32_t* tokens_host, int N, int64_t v_begin, int V_local,
                           const Ctx& ctx) {
    const Device device = ctx.device;
    static thread_local std::vector<int32_t> count, token, row_ptr, rows;
    count.assign((size_t)V_local, 0);
    int64_t owned = 0;
    for (int r = 0; r < N; r++) {
        int64_t local = (int64_t)tokens_host[r] - v_begin;
        if (local >= 0 && local < V_local) {
            count[(size_t)local]++;
            owned++;
        }
    }
    // Unique tokens in ascending order, with the start of each one's group of rows.
    token.clear();
    row_ptr.clear();
    row_ptr.push_back(0);
    for (int v = 0; v < V_local; v++) {
        if (count[(size_t)v] == 0) continue;
        token.push_back(v);
        row_ptr.push_back(row_ptr.back() + count[(size_t)v]);
        count[(size_t)v] = row_ptr[row_ptr.size() - 2];  // reuse as the fill cursor of token v's group
    }
    rows.assign((size_t)owned, 0);
    for (int r = 0; r < N; r++) {  // ascending r: each group lists its rows in order (the summation order)
        int64_t local = (int64_t)tokens_host[r] - v_begin;
        if (local >= 0 && local < V_local) rows[(size_t)count[(size_t)local]++] = r;
    }
    // Capacities for any batch of N rows (at most min(N, V_local) unique tokens, N owned rows): allocated on
    // the first build, so a later step never frees (and so never synchronizes the device) here.
    const int64_t max_unique = N < V_local ? N : V_local;
    if (device == Device::CUDA && !idx.token.empty() &&
        (idx.token.n < max_unique || idx.row_ptr.n < max_unique + 1 || idx.rows.n < N))
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // a larger N: the old buffers may still be read there
    ensure_capacity(idx.token, device, max_unique);
    ensure_capacity(idx.row_ptr, device, max_unique + 1);
    ensure_capacity(idx.rows, device, N);
    upload(ctx, idx.token, token);
    upload(ctx, idx.row_ptr, row_ptr);
    upload(ctx, idx.rows, rows);
    // The host vectors are pageable and reused by the next build: a pageable copy may return before its DMA
    // lands, so wait for ctx's stream (only it: the communication streams go on overlapping).
    if (device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    idx.U = (int)token.size();
}

void embedding_index_free(EmbeddingIndex& idx) {
    tensor_free(idx.token);
    tensor_free(idx.row_ptr);
    tensor_free(idx.rows);
    idx.U = 0;
}

// ---------------------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------------------

static unsigned blocks_for(int64_t total, int threads) { return (unsigned)((total + threads - 1) / threads); }

void token_embedding_forward(Ctx& ctx, Tensor out, Tensor tokens, Tensor wte_local, int64_t v_begin,
                             int V_local, int N, int C) {
    OpScope scope(ctx, "token_embedding_forward");
    if (out.n != (int64_t)N * C || tokens.n != N || tokens.dtype != DType::I32 ||
        wte_local.n != (int64_t)V_local * C)
        mm_fatal("token_embedding_forward: sizes do not match N=%d C=%d V_local=%d", N, C, V_local);
    if ((int64_t)N * C == 0) return;
    MM_DISPATCH_ACT(out.dtype, {
        using TO = T;
        MM_DISPATCH_ACT(wte_local.dtype, {
            if (ctx.device == Device::CUDA) {
                int64_t total = (int64_t)N * C;
                token_fwd_kernel<TO, T><<<blocks_for(total, 256), 256, 0, ctx.stream>>>(
                    out.as<TO>(), tokens.as<int32_t>(), wte_local.as<T>(), v_begin, V_local, total, C);
                CUDA_CHECK_LAST();
            } else {
                token_fwd_cpu<TO, T>(out.as<TO>(), tokens.as<int32_t>(), wte_local.as<T>(), v_begin, V_local, N,
                                     C);
            }
        });
    });
}

void token_embedding_backward(Ctx& ctx, Tensor dwte_local, Tensor dout, const EmbeddingIndex& idx, int C) {
    OpScope scope(ctx, "token_embedding_backward");
    if (idx.U == 0 || C == 0) return;
    if (dwte_local.n % C != 0 || dout.n % C != 0)
        mm_fatal("token_embedding_backward: dwte (%lld) and dout (%lld) must be multiples of C=%d",
                 (long long)dwte_local.n, (long long)dout.n, C);
    if (idx.token.device != ctx.device) mm_fatal("token_embedding_backward: index built for another device");
    MM_DISPATCH_ACT(dout.dtype, {
        using TD = T;
        MM_DISPATCH_ACT(dwte_local.dtype, {
            if (ctx.device == Device::CUDA) {
                dim3 grid((unsigned)idx.U, (C + 255) / 256);
                token_bwd_kernel<T, TD><<<grid, 256, 0, ctx.stream>>>(dwte_local.as<T>(), dout.as<TD>(),
                                                                      idx.token.as<int32_t>(),
                                                                      idx.row_ptr.as<int32_t>(),
                                                                      idx.rows.as<int32_t>(), C);
                CUDA_CHECK_LAST();
            } else {
                token_bwd_cpu<T, TD>(dwte_local.as<T>(), dout.as<TD>(), idx.token.as<int32_t>(),
                                     idx.row_ptr.as<int32_t>(), idx.rows.as<int32_t>(), idx.U, C);
            }
        });
    });
}

void position_embedding_forward(Ctx& ctx, Tensor out, Tensor wpe, int64_t s_offset, int S_loc, int B, int C) {
    OpScope scope(ctx, "position_embedding_forward");
    if (out.n != (int64_t)S_loc * B * C || wpe.n < (s_offset + S_loc) * (int64_t)C || s_offset < 0)
        mm_fatal("position_embedding_forward: sizes do not match S_loc=%d B=%d C=%d s_offset=%lld", S_loc, B, C,
                 (long long)s_offset);
    int64_t total = (int64_t)S_loc * B * C;
    if (total == 0) return;
    MM_DISPATCH_ACT(out.dtype, {
        using TO = T;
        MM_DISPATCH_ACT(wpe.dtype, {
            if (ctx.device == Device::CUDA) {
                pos_fwd_kernel<TO, T><<<blocks_for(total, 256), 256, 0, ctx.stream>>>(out.as<TO>(), wpe.as<T>(),
                                                                                     s_offset, B, C, total);
                CUDA_CHECK_LAST();
            } else {
                pos_fwd_cpu<TO, T>(out.as<TO>(), wpe.as<T>(), s_offset, S_loc, B, C);
            }
        });
    });
}

void position_embedding_backward(Ctx& ctx, Tensor dwpe, Tensor dout, int64_t s_offset, int S_loc, int B, int C) {
    OpScope scope(ctx, "position_embedding_backward");
    if (dout.n != (int64_t)S_loc * B * C || dwpe.n < (s_offset + S_loc) * (int64_t)C || s_offset < 0)
        mm_fatal("position_embedding_backward: sizes do not match S_loc=%d B=%d C=%d s_offset=%lld", S_loc, B, C,
                 (long long)s_offset);
    int64_t total = (int64_t)S_loc * C;
    if (total == 0) return;
    MM_DISPATCH_ACT(dout.dtype, {
        using TD = T;
        MM_DISPATCH_ACT(dwpe.dtype, {
            if (ctx.device == Device::CUDA) {
                pos_bwd_kernel<T, TD><<<blocks_for(total, 256), 256, 0, ctx.stream>>>(dwpe.as<T>(), dout.as<TD>(),
                                                                                     s_offset, B, C, total);
                CUDA_CHECK_LAST();
            } else {
                pos_bwd_cpu<T, TD>(dwpe.as<T>(), dout.as<TD>(), s_offset, S_loc, B, C);
            }
        });
    });
}
