// context_parallel.cu — zigzag positions and ring attention (see context_parallel.h).
#include "context_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "../layers/flash_attention.h"
#include "../layers/op_timer.h"
#include "../layers/test_hooks.h"

// ---- positions -------------------------------------------------------------------------------------------------
SeqRuns cp_runs(int S, int cp, int cp_rank) {
    if (cp <= 1) return one_run(0, S);
    const int L = S / (2 * cp);
    SeqRuns r;
    r.n = 2;
    r.first[0] = (int64_t)cp_rank * L;
    r.first[1] = (int64_t)(2 * cp - 1 - cp_rank) * L;
    r.len[0] = r.len[1] = L;
    return r;
}

// ---- the loss over the CP group ----------------------------------------------------------------------------------
float cp_mean_loss(Comm& cp, float loss) {
    if (cp.size <= 1) return loss;
    all_reduce_host(cp, &loss, 1, MPI_FLOAT, MPI_SUM, "all-reduce of the loss over the CP group");
    return loss / (float)cp.size;
}

void cp_token_losses(Comm& cp, const std::vector<float>& mine, int S, int B, std::vector<float>* out) {
    const int c = cp.size > 1 ? cp.size : 1, n = (int)mine.size(), S_cp = S / c;
    std::vector<float> all((size_t)n * c);
    if (c > 1)
        MPI_CHECK(MPI_Allgather(mine.data(), n, MPI_FLOAT, all.data(), n, MPI_FLOAT, cp.mpi));
    else
        all = mine;
    out->assign((size_t)B * S, 0.f);
    for (int q = 0; q < c; q++) {
        const SeqRuns held = cp_runs(S, c, q);
        for (int s = 0; s < S_cp; s++)
            for (int b = 0; b < B; b++)
                (*out)[(size_t)b * S + runs_position(held, s)] = all[(size_t)q * n + (size_t)s * B + b];
    }
}

CpStats& cp_stats() {
    static CpStats s;
    return s;
}
void cp_stats_reset() { cp_stats() = CpStats(); }
CpStats cp_stats_since(const CpStats& before) {
    const CpStats& now = cp_stats();
    CpStats d;
    d.blocks = now.blocks - before.blocks;
    d.diagonal_blocks = now.diagonal_blocks - before.diagonal_blocks;
    d.pairs = now.pairs - before.pairs;
    d.compute_s = now.compute_s - before.compute_s;
    d.forward_bytes = now.forward_bytes - before.forward_bytes;
    d.backward_bytes = now.backward_bytes - before.backward_bytes;
    return d;
}

// ---- element work of the ring ------------------------------------------------------------------------------------
// dst[row, dst_col + c] = src[row, src_col + c] for c < cols, row < rows: packing K|V out of qkv, and writing the
// fp32 accumulators into the activation dtype.
template <class O, class I>
__global__ void copy_columns_kernel(O* dst, int64_t dst_w, const I* src, int64_t src_w, int cols, int64_t rows) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t row = i / cols, c = i % cols;
    dst[row * dst_w + c] = from_f32<O>(to_f32(src[row * src_w + c]));
}
template <class O, class I>
static void copy_columns(const Ctx& ctx, O* dst, int64_t dst_w, const I* src, int64_t src_w, int cols, int64_t rows) {
    if (ctx.device == Device::CUDA) {
        const int threads = 256;
        const int64_t n = rows * cols;
        copy_columns_kernel<O, I><<<(unsigned)((n + threads - 1) / threads), threads, 0, ctx.stream>>>(dst, dst_w, src,
                                                                                                        src_w, cols, rows);
        CUDA_CHECK_LAST();
        return;
    }
#pragma omp parallel for
    for (int64_t row = 0; row < rows; row++) {
        O* d = dst + row * dst_w;
        const I* s = src + row * src_w;
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = from_f32<O>(to_f32(s[c]));
    }
}

// acc += x, f32, n elements.
__global__ void add_f32_kernel(float* acc, const float* x, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += x[i];
}
static void add_f32(const Ctx& ctx, Tensor acc, Tensor x) {
    const int64_t n = acc.n;
    if (ctx.device == Device::CUDA) {
        add_f32_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx.stream>>>(acc.as<float>(), x.as<float>(), n);
        CUDA_CHECK_LAST();
        return;
    }
    float* a = acc.as<float>();
    const float* b = x.as<float>();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
}

// ---- the ring --------------------------------------------------------------------------------------------------
namespace {
// One step's view of the keys and values a rank holds: its own (inside qkv) or a received K|V buffer.
struct KVView {
    Tensor k, v;  // element 0: K (V) of the first position, first sequence, head 0
    int width = 0;
};

struct Ring {
    int c = 1, r = 0, next = 0, prev = 0;
    int S = 0, L = 0, B = 0, NH = 0, HD = 0, C = 0;  // S: this rank's positions; L = S/2 per chunk; C = NH·HD
    int64_t S_total = 0;
    int64_t chunk_rows() const { return (int64_t)L * B; }
    int64_t chunk_pos(int rank, int which) const { return (int64_t)(which == 0 ? rank : 2 * c - 1 - rank) * L; }
    int source(int step) const { return ((r - step) % c + c) % c; }
};

Ring make_ring(const Comm& cp, const AttnShape& sh, int64_t S_total) {
    Ring g;
    g.c = cp.size;
    g.r = cp.rank;
    g.next = (g.r + 1) % g.c;
    g.prev = (g.r + g.c - 1) % g.c;
    g.S = sh.S;
    g.L = sh.S / 2;
    g.B = sh.B;
    g.NH = sh.NH;
    g.HD = sh.HD;
    g.C = sh.NH * sh.HD;
    g.S_total = S_total;
    if (g.c < 2 || sh.S % 2 != 0 || (int64_t)sh.S * g.c != S_total)
        mm_fatal("ring attention: %d positions per rank on a ring of %d for a sequence of %lld (needs two equal chunks "
                 "per rank, s/c positions)", sh.S, g.c, (long long)S_total);
    return g;
}

KVView own_kv(const Ring& g, Tensor qkv) { return {qkv.slice(g.C, qkv.n - g.C), qkv.slice(2 * g.C, qkv.n - 2 * g.C), 3 * g.C}; }
KVView packed_kv(const Ring& g, Tensor buf) { return {buf, buf.slice(g.C, buf.n - g.C), 2 * g.C}; }
// Rows of chunk `which` (0 or 1) of a view of rows `width` wide.
Tensor chunk_of(const Ring& g, Tensor t, int which, int64_t width) {
    const int64_t at = which * g.chunk_rows() * width;
    return t.slice(at, t.n - at);
}

AttnBlock block_of(const Ring& g, const AttnShape& sh, int qa, int src, int ka, int kv_width) {
    AttnBlock b;
    b.attn = sh;
    b.Sq = b.Sk = g.L;
    b.q_pos = g.chunk_pos(g.r, qa);
    b.k_pos = g.chunk_pos(src, ka);
    b.S_total = g.S_total;
    b.q_width = 3 * g.C;
    b.kv_width = kv_width;
    b.lse_ld = g.S;
    return b;
}

// The blocks of this rank's query chunks against source `src`'s key chunks that the causal mask leaves
// anything in (a key chunk after the query chunk is empty), in a fixed order: query chunk, then key chunk.
template <class F>
void for_each_block(const Ring& g, int src, F&& f) {
    for (int qa = 0; qa < 2; qa++)
        for (int ka = 0; ka < 2; ka++)
            if (g.chunk_pos(src, ka) <= g.chunk_pos(g.r, qa)) f(qa, ka);
}

void count_block(const Ring& g, const AttnBlock& b) {
    CpStats& s = cp_stats();
    s.blocks++;
    s.diagonal_blocks += b.q_pos == b.k_pos;
    s.pairs += (double)g.B * g.NH * flash_block_pairs(b);
}

std::string ring_what(const char* pass, int layer, int step, const Ring& g) {
    return std::string(pass) + " of layer " + std::to_string(layer) + ", ring step " + std::to_string(step) + " of " +
           std::to_string(g.c - 1) + " (CP rank " + std::to_string(g.r) + ")";
}
// Negative control (TestHooks::skip_cp_ring_wait): ctx.stream does not wait for the communication stream, so
// the next blocks may read a K|V block that has not arrived (the wait is made on comm_stream itself: a no-op).
void ring_exchange_finish(Comm& cp, const Ctx& ctx) {
    Ctx c = ctx;
    if (g_test_hooks.skip_cp_ring_wait && ctx.comm_stream) c.stream = ctx.comm_stream;
    exchange_finish(cp, c);
}

}  // namespace

void ring_attention_forward(Comm& cp, Ctx& ctx, ActivationAllocator& A, int layer, Tensor out, Tensor lse, Tensor qkv,
                            const AttnShape& sh, int64_t S_total, float p, uint64_t seed, uint32_t stream) {
    OpScope scope(ctx, "ring_attention_forward");
    const Ring g = make_ring(cp, sh, S_total);
    const int64_t rows = (int64_t)g.S * g.B, kv_n = rows * 2 * g.C;
    check_tensor(ctx, qkv, qkv.dtype, rows * 3 * g.C, "ring_attention_forward", "qkv");
    check_tensor(ctx, out, qkv.dtype, rows * g.C, "ring_attention_forward", "out");
    check_tensor(ctx, lse, DType::F32, (int64_t)g.B * g.NH * g.S, "ring_attention_forward", "lse");
    const uint64_t bytes0 = cp.counters.p2p_bytes;
    // The running output (fp32) and lse (the saved tensor itself), one block's, and two K|V receive buffers.
    Tensor o = A.alloc(DType::F32, rows * g.C, layer, "tmp:cp_out");
    Tensor o_blk = A.alloc(DType::F32, g.chunk_rows() * g.C, layer, "tmp:cp_block_out");
    Tensor lse_blk = A.alloc(DType::F32, lse.n, layer, "tmp:cp_block_lse");
    Tensor kv_own = A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv");
    Tensor kv_buf[2] = {A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv_recv"), A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv_recv")};
    tensor_zero(ctx, o);
    tensor_fill_f32(ctx, lse, -INFINITY);
    MM_DISPATCH_ACT(qkv.dtype, copy_columns<T, T>(ctx, kv_own.as<T>(), 2 * g.C, qkv.as<T>() + g.C, 3 * g.C, 2 * g.C, rows));
    Tensor send = kv_own;         // what this rank holds, packed, to pass on
    KVView held = own_kv(g, qkv);  // ... and the view the blocks read
    for (int step = 0; step < g.c; step++) {
        const int src = g.source(step);
        const bool pass_on = step < g.c - 1;
        Tensor recv = kv_buf[step % 2];
        if (pass_on) {  // the next step's K and V travel while this step's blocks are computed
            const std::string what = ring_what("forward", layer, step, g);
            send_later(cp, ctx, send, g.next, 0, "K and V of CP rank " + std::to_string(src) + " to rank " + std::to_string(g.next));
            exchange_start(cp, ctx, {{recv, g.prev, 0, "K and V from CP rank " + std::to_string(g.prev)}}, what);
        }
        const double t0 = MPI_Wtime();
        for_each_block(g, src, [&](int qa, int ka) {
            const AttnBlock b = block_of(g, sh, qa, src, ka, held.width);
            Tensor lse_q = lse.slice((int64_t)qa * g.L, lse.n - (int64_t)qa * g.L);
            Tensor lse_b = lse_blk.slice((int64_t)qa * g.L, lse.n - (int64_t)qa * g.L);
            flash_block_forward(ctx, o_blk, lse_b, chunk_of(g, qkv, qa, 3 * g.C), chunk_of(g, held.k, ka, held.width),
                                chunk_of(g, held.v, ka, held.width), b, p, seed, stream);
            flash_block_merge(ctx, chunk_of(g, o, qa, g.C), lse_q, o_blk, lse_b, b);
            count_block(g, b);
        });
        if (ctx.device == Device::CPU) cp_stats().compute_s += MPI_Wtime() - t0;
        if (pass_on) {
            ring_exchange_finish(cp, ctx);
            send = recv;
            held = packed_kv(g, recv);
        }
    }
    MM_DISPATCH_ACT(qkv.dtype, copy_columns<T, float>(ctx, out.as<T>(), g.C, o.as<float>(), g.C, g.C, rows));
    for (Tensor* t : {&o, &o_blk, &lse_blk, &kv_own, &kv_buf[0], &kv_buf[1]}) A.release(*t);
    cp_stats().forward_bytes += cp.counters.p2p_bytes - bytes0;
}

void ring_attention_backward(Comm& cp, Ctx& ctx, ActivationAllocator& A, int layer, Tensor dqkv, Tensor dout,
                             Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, int64_t S_total, float p,
                             uint64_t seed, uint32_t stream) {
    OpScope scope(ctx, "ring_attention_backward");
    const Ring g = make_ring(cp, sh, S_total);
    const int64_t rows = (int64_t)g.S * g.B, kv_n = rows * 2 * g.C;
    check_tensor(ctx, qkv, qkv.dtype, rows * 3 * g.C, "ring_attention_backward", "qkv");
    check_tensor(ctx, dqkv, qkv.dtype, rows * 3 * g.C, "ring_attention_backward", "dqkv");
    check_tensor(ctx, out, qkv.dtype, rows * g.C, "ring_attention_backward", "out");
    check_tensor(ctx, dout, qkv.dtype, rows * g.C, "ring_attention_backward", "dout");
    check_tensor(ctx, lse, DType::F32, (int64_t)g.B * g.NH * g.S, "ring_attention_backward", "lse");
    const uint64_t bytes0 = cp.counters.p2p_bytes;
    Tensor dq = A.alloc(DType::F32, rows * g.C, layer, "tmp:cp_dq");
    Tensor kv_own = A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv");
    Tensor kv_buf[2] = {A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv_recv"), A.alloc(qkv.dtype, kv_n, layer, "tmp:cp_kv_recv")};
    // dK|dV of the source of this step (this rank's terms, then the sum so far), of the last step (to pass on),
    // and the partial sum arriving from the previous rank.
    Tensor dkv = A.alloc(DType::F32, kv_n, layer, "tmp:cp_dkv");
    Tensor dkv_done = A.alloc(DType::F32, kv_n, layer, "tmp:cp_dkv_sum");
    Tensor dkv_recv = A.alloc(DType::F32, kv_n, layer, "tmp:cp_dkv_recv");
    // D = rowsum(dO ⊙ O) of this rank's queries, once for the layer: every block of a query chunk reads its rows.
    Tensor D = A.alloc(DType::F32, lse.n, layer, "tmp:cp_rowdot");
    flash_attention_rowdot(ctx, D, dout, out, sh);
    tensor_zero(ctx, dq);
    MM_DISPATCH_ACT(qkv.dtype, copy_columns<T, T>(ctx, kv_own.as<T>(), 2 * g.C, qkv.as<T>() + g.C, 3 * g.C, 2 * g.C, rows));
    Tensor send = kv_own;
    KVView held = own_kv(g, qkv);
    for (int step = 0; step < g.c; step++) {
        const int src = g.source(step);
        const bool pass_on = step < g.c - 1, partial = step > 0;
        Tensor recv = kv_buf[step % 2];
        // One exchange per step, posted before the blocks: the next step's K and V, and the sums of dK, dV:
        // this rank's complete-so-far sum for the last step's source goes on, the previous rank's for this
        // step's source comes in.
        std::vector<P2PMessage> recvs;
        if (pass_on) {
            send_later(cp, ctx, send, g.next, 0, "K and V of CP rank " + std::to_string(src) + " to rank " + std::to_string(g.next));
            recvs.push_back({recv, g.prev, 0, "K and V from CP rank " + std::to_string(g.prev)});
        }
        if (partial) {
            send_later(cp, ctx, dkv_done, g.next, 1,
                       "dK and dV of CP rank " + std::to_string(g.source(step - 1)) + " to rank " + std::to_string(g.next));
            recvs.push_back({dkv_recv, g.prev, 1, "dK and dV of CP rank " + std::to_string(src) + " from rank " +
                                                      std::to_string(g.prev)});
        }
        if (!recvs.empty()) exchange_start(cp, ctx, recvs, ring_what("backward", layer, step, g));
        tensor_zero(ctx, dkv);
        const double t0 = MPI_Wtime();
        for_each_block(g, src, [&](int qa, int ka) {
            const AttnBlock b = block_of(g, sh, qa, src, ka, held.width);
            const int64_t at = (int64_t)qa * g.L;
            flash_block_backward(ctx, chunk_of(g, dq, qa, g.C), chunk_of(g, dkv, ka, 2 * g.C),
                                 chunk_of(g, dkv.slice(g.C, dkv.n - g.C), ka, 2 * g.C), 2 * g.C,
                                 chunk_of(g, dout, qa, g.C), chunk_of(g, out, qa, g.C), lse.slice(at, lse.n - at),
                                 chunk_of(g, qkv, qa, 3 * g.C), chunk_of(g, held.k, ka, held.width),
                                 chunk_of(g, held.v, ka, held.width), b, p, seed, stream, D.slice(at, D.n - at));
            count_block(g, b);
        });
        if (ctx.device == Device::CPU) cp_stats().compute_s += MPI_Wtime() - t0;
        if (!recvs.empty()) ring_exchange_finish(cp, ctx);
        if (partial) add_f32(ctx, dkv, dkv_recv);  // ranks src .. r − 1, then r: a fixed order
        std::swap(dkv, dkv_done);
        if (pass_on) {
            send = recv;
            held = packed_kv(g, recv);
        }
    }
    // The last step's sum is complete (every rank has added its terms): home to its owner, r + 1. This rank's
    // own arrives from r − 1.
    send_later(cp, ctx, dkv_done, g.next, 1, "the complete dK and dV of CP rank " + std::to_string(g.next));
    exchange(cp, ctx, {{dkv_recv, g.prev, 1, "this rank's complete dK and dV from rank " + std::to_string(g.prev)}},
             ring_what("backward", layer, g.c, g) + ": dK and dV home");
    MM_DISPATCH_ACT(qkv.dtype, {
        copy_columns<T, float>(ctx, dqkv.as<T>(), 3 * g.C, dq.as<float>(), g.C, g.C, rows);
        copy_columns<T, float>(ctx, dqkv.as<T>() + g.C, 3 * g.C, dkv_recv.as<float>(), 2 * g.C, 2 * g.C, rows);
    });
    for (Tensor* t : {&dq, &D, &kv_own, &kv_buf[0], &kv_buf[1], &dkv, &dkv_done, &dkv_recv}) A.release(*t);
    cp_stats().backward_bytes += cp.counters.p2p_bytes - bytes0;
}

FlashCore ring_attention_core(Comm& cp, ActivationAllocator& A, int layer, int64_t S_total) {
    Comm* ring = &cp;
    ActivationAllocator* alloc = &A;
    FlashCore core;
    core.forward = [=](Ctx& ctx, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, float p, uint64_t seed,
                       uint32_t stream) {
        ring_attention_forward(*ring, ctx, *alloc, layer, out, lse, qkv, sh, S_total, p, seed, stream);
    };
    core.backward = [=](Ctx& ctx, Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh,
                        float p, uint64_t seed, uint32_t stream) {
        ring_attention_backward(*ring, ctx, *alloc, layer, dqkv, dout, out, lse, qkv, sh, S_total, p, seed, stream);
    };
    return core;
}
