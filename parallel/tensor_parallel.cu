// tensor_parallel.cu — f, f̄, the column- and row-parallel linear layers, and the weight slices (paper §2,
// Figure 4; Megatron-LM). Under sequence parallelism the same layers swap f/f̄ for g/ḡ
// (sequence_parallel.cu); the `Region` passed in says which pair applies.
#include "tensor_parallel.h"

#include <cstring>
#include "sequence_parallel.h"
#include "../layers/linear.h"

// ---- the conjugate pair f / f̄ ---------------------------------------------------------------------------
// f sits where a tensor-parallel region begins: the input is replicated, every rank uses all of it
// (identity), so in backward the partial input-gradients of all ranks must be summed (all-reduce).
void f_backward(Comm& tp, const Ctx& ctx, Tensor grad) { all_reduce(tp, ctx, grad, ReduceOp::SUM); }
// f̄ sits where it ends: each rank holds a partial sum of the output (all-reduce), and the gradient of a
// replicated output is already what every rank needs (identity).
void fbar_forward(Comm& tp, const Ctx& ctx, Tensor x) { all_reduce(tp, ctx, x, ReduceOp::SUM); }

// ---- column-parallel linear (weight rows split) ---------------------------------------------------------
void column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                             int OC_local) {
    if (!r.sp) {  // X = f(in) = in
        linear_forward(ctx, out, in, W, b, N_full, IC, OC_local);
        return;
    }
    // X = g(in): all-gather the sequence shards into a transient full copy; only the shard stays saved.
    Tensor x = r.alloc->alloc(in.dtype, (int64_t)N_full * IC, r.layer, "tmp:gathered_input");
    g_forward(*r.tp, ctx, x, in);
    linear_forward(ctx, out, x, W, b, N_full, IC, OC_local);
    r.alloc->release(x);
}

void column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                              Tensor W, int N_full, int IC, int OC_local) {
    if (!r.sp) {
        // dX = dout · W (a partial sum: this rank saw only its output columns), summed by f's backward.
        linear_backward(ctx, din, dW, db, dout, in, W, N_full, IC, OC_local);
        f_backward(*r.tp, ctx, din);
        return;
    }
    // Paper §4.2.2: the input was saved as a sequence shard, so the weight gradient needs it all-gathered
    // again. Issue that all-gather first, on its own stream, and compute the input gradient meanwhile.
    Tensor x = r.alloc->alloc(in.dtype, (int64_t)N_full * IC, r.layer, "tmp:regathered_input");
    g_forward_async(*r.tp, ctx, x, in);
    Tensor dx_full = r.alloc->alloc(dout.dtype, (int64_t)N_full * IC, r.layer, "tmp:dinput_partial");
    linear_backward(ctx, dx_full, Tensor(), Tensor(), dout, Tensor(), W, N_full, IC, OC_local);
    g_wait(*r.tp, ctx);
    linear_backward(ctx, Tensor(), dW, db, dout, x, W, N_full, IC, OC_local);
    r.alloc->release(x);
    g_backward(*r.tp, ctx, din, dx_full);  // reduce-scatter: sum the partials and keep this rank's shard
    r.alloc->release(dx_full);
}

// ---- row-parallel linear (weight columns split) ---------------------------------------------------------
void row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC) {
    if (!r.sp) {
        linear_forward(ctx, out, in, W, Tensor(), N_full, IC_local, OC);
        fbar_forward(*r.tp, ctx, out);  // sum the partial products of all ranks
        return;
    }
    // ḡ: reduce-scatter the partial products straight into this rank's sequence shard.
    Tensor partial = r.alloc->alloc(out.dtype, (int64_t)N_full * OC, r.layer, "tmp:partial_output");
    linear_forward(ctx, partial, in, W, Tensor(), N_full, IC_local, OC);
    gbar_forward(*r.tp, ctx, out, partial);
    r.alloc->release(partial);
}

void row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                           int N_full, int IC_local, int OC) {
    if (!r.sp) {  // f̄ backward: identity
        linear_backward(ctx, din, dW, Tensor(), dout, in, W, N_full, IC_local, OC);
        return;
    }
    // ḡ backward: all-gather the shards of the output gradient.
    Tensor dy = r.alloc->alloc(dout.dtype, (int64_t)N_full * OC, r.layer, "tmp:doutput_gathered");
    gbar_backward(*r.tp, ctx, dy, dout);
    linear_backward(ctx, din, dW, Tensor(), dy, in, W, N_full, IC_local, OC);
    r.alloc->release(dy);
}

// ---- weight slices --------------------------------------------------------------------------------------
ShardKind param_shard_kind(int id) {
    switch (id) {
        case P_WTE: case P_FCW: case P_FCB: return ShardKind::Rows;
        case P_QKVW: case P_QKVB: return ShardKind::QKVRows;
        case P_ATTPROJW: case P_FCPROJW: return ShardKind::Cols;
        default: return ShardKind::Replicated;
    }
}

// Each tensor seen as `layers` stacked matrices of rows × cols (biases: cols = 1).
struct Stack { int64_t layers, rows, cols; };
static Stack param_stack(const GPTConfig& c, int id) {
    int64_t L = c.layers, C = c.channels;
    switch (id) {
        case P_WTE: return {1, c.padded_vocab, C};
        case P_WPE: return {1, c.max_seq, C};
        case P_QKVW: return {L, 3 * C, C};
        case P_QKVB: return {L, 3 * C, 1};
        case P_ATTPROJW: return {L, C, C};
        case P_FCW: return {L, 4 * C, C};
        case P_FCB: return {L, 4 * C, 1};
        case P_FCPROJW: return {L, C, 4 * C};
        case P_LNFW: case P_LNFB: return {1, 1, C};
        default: return {L, 1, C};  // per-layer vectors of C: layer norms, row-parallel biases
    }
}

void local_param_sizes(const GPTConfig& cfg, int tp, int64_t out[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        Stack s = param_stack(cfg, id);
        out[id] = s.layers * s.rows * s.cols / (param_shard_kind(id) == ShardKind::Replicated ? 1 : tp);
    }
}

// Visit every contiguous run that rank `r` holds: (full offset, local offset, length), in local order.
template <class F>
static void for_each_run(const GPTConfig& cfg, int id, int tp, int r, F&& f) {
    Stack s = param_stack(cfg, id);
    ShardKind k = param_shard_kind(id);
    int64_t local = 0;
    for (int64_t l = 0; l < s.layers; l++) {
        int64_t base = l * s.rows * s.cols;
        switch (k) {
            case ShardKind::Replicated:
                f(base, local, s.rows * s.cols);
                local += s.rows * s.cols;
                break;
            case ShardKind::Rows: {
                int64_t rows = s.rows / tp;
                f(base + r * rows * s.cols, local, rows * s.cols);
                local += rows * s.cols;
                break;
            }
            case ShardKind::QKVRows: {  // [Q; K; V], each C rows: this rank's heads of each
                int64_t part = s.rows / 3, rows = part / tp;
                for (int q = 0; q < 3; q++) {
                    f(base + (q * part + r * rows) * s.cols, local, rows * s.cols);
                    local += rows * s.cols;
                }
                break;
            }
            case ShardKind::Cols: {
                int64_t cols = s.cols / tp;
                for (int64_t i = 0; i < s.rows; i++) {
                    f(base + i * s.cols + r * cols, local, cols);
                    local += cols;
                }
                break;
            }
        }
    }
}

void shard_params(const GPTConfig& cfg, int tp, int tp_rank, const float* full, float* local) {
    int64_t fs[NUM_PARAM_TENSORS], ls[NUM_PARAM_TENSORS];
    param_sizes(cfg, fs);
    local_param_sizes(cfg, tp, ls);
    int64_t fo = 0, lo = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        for_each_run(cfg, id, tp, tp_rank, [&](int64_t f, int64_t l, int64_t n) {
            memcpy(local + lo + l, full + fo + f, n * sizeof(float));
        });
        fo += fs[id];
        lo += ls[id];
    }
}

void unshard_params(const GPTConfig& cfg, int tp, const std::vector<const float*>& locals, float* full) {
    int64_t fs[NUM_PARAM_TENSORS], ls[NUM_PARAM_TENSORS];
    param_sizes(cfg, fs);
    local_param_sizes(cfg, tp, ls);
    for (int r = 0; r < tp; r++) {
        int64_t fo = 0, lo = 0;
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            for_each_run(cfg, id, tp, r, [&](int64_t f, int64_t l, int64_t n) {
                memcpy(full + fo + f, locals[r] + lo + l, n * sizeof(float));
            });
            fo += fs[id];
            lo += ls[id];
        }
    }
}
