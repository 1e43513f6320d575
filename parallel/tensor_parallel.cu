// tensor_parallel.cu — f, f̄, the column- and row-parallel linear layers, and the weight slices (paper §2,
// Figure 4; Megatron-LM). Under sequence parallelism each linear layer hands over to its SP half in
// sequence_parallel.cu (g / ḡ instead of f / f̄); the `Region` passed in says which applies.
#include "tensor_parallel.h"

#include <cstring>
#include "sequence_parallel.h"
#include "../layers/linear.h"

// ---- the conjugate pair f / f̄ (the identity halves are inline in the header) --------------------------
void f_backward(Comm& tp, const Ctx& ctx, Tensor grad) { all_reduce(tp, ctx, grad, ReduceOp::SUM); }
void fbar_forward(Comm& tp, const Ctx& ctx, Tensor x) { all_reduce(tp, ctx, x, ReduceOp::SUM); }

// ---- column-parallel linear (weight rows split) ---------------------------------------------------------
void column_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, Tensor b, int N_full, int IC,
                             int OC_local) {
    if (r.sp) return sp_column_parallel_forward(r, ctx, out, in, W, b, N_full, IC, OC_local);
    f_forward(*r.tp, ctx, in);  // X = f(in) = in
    linear_forward(ctx, out, in, W, b, N_full, IC, OC_local);
}

void column_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor db, Tensor dout, Tensor in,
                              Tensor W, int N_full, int IC, int OC_local, GradWrite grads) {
    if (r.sp) return sp_column_parallel_backward(r, ctx, din, dW, db, dout, in, W, N_full, IC, OC_local, grads);
    // dX = dout · W (a partial sum: this rank saw only its output columns), summed by f's backward.
    linear_backward(ctx, din, dW, db, dout, in, W, N_full, IC, OC_local, false, grads);
    f_backward(*r.tp, ctx, din);
}

// ---- row-parallel linear (weight columns split) ---------------------------------------------------------
void row_parallel_forward(Region& r, Ctx& ctx, Tensor out, Tensor in, Tensor W, int N_full, int IC_local, int OC) {
    if (r.sp) return sp_row_parallel_forward(r, ctx, out, in, W, N_full, IC_local, OC);
    linear_forward(ctx, out, in, W, Tensor(), N_full, IC_local, OC);
    fbar_forward(*r.tp, ctx, out);  // sum the partial products of all ranks
}

void row_parallel_backward(Region& r, Ctx& ctx, Tensor din, Tensor dW, Tensor dout, Tensor in, Tensor W,
                           int N_full, int IC_local, int OC, GradWrite grads) {
    if (r.sp) return sp_row_parallel_backward(r, ctx, din, dW, dout, in, W, N_full, IC_local, OC, grads);
    fbar_backward(*r.tp, ctx, dout);  // the gradient of the summed output is every rank's gradient
    linear_backward(ctx, din, dW, Tensor(), dout, in, W, N_full, IC_local, OC, false, grads);
}

// ---- weight slices --------------------------------------------------------------------------------------
void local_param_sizes(const GPTConfig& cfg, int tp, int64_t out[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamShape s = param_shape(cfg, id);
        out[id] = s.layers * s.rows * s.cols / (param_shard_kind(id) == ShardKind::Replicated ? 1 : tp);
    }
}

// Visit every contiguous run that rank `r` holds: (full offset, local offset, length), in local order.
template <class F>
static void for_each_run(const GPTConfig& cfg, int id, int tp, int r, F&& f) {
    const ParamShape s = param_shape(cfg, id);
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
