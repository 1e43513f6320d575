// parallel_linear_checks.h — the column- and row-parallel linear layers against one unsplit linear on the
// full weight, forward and backward, on world = t ranks. Shared by test_tensor_parallel (plain TP: f / f̄)
// and test_sequence_parallel (TP + SP: g / ḡ, the SP halves in parallel/sequence_parallel.cu).
#pragma once
#include "../test_util.h"
#include "../../layers/linear.h"
#include "../../parallel/tensor_parallel.h"

inline std::vector<float> rows_slice(const std::vector<float>& m, int cols, int r0, int nr) {
    return std::vector<float>(m.begin() + (size_t)r0 * cols, m.begin() + (size_t)(r0 + nr) * cols);
}
inline std::vector<float> cols_slice(const std::vector<float>& m, int rows, int cols, int c0, int nc) {
    std::vector<float> out;
    for (int i = 0; i < rows; i++)
        for (int j = c0; j < c0 + nc; j++) out.push_back(m[(size_t)i * cols + j]);
    return out;
}

// sp = false: the input of the column-parallel layer and the output of the row-parallel one are the full
// [N, ·] tensors; sp = true: they are this rank's sequence shard of N/t rows.
inline void check_parallel_linears(Comm& tp, Ctx& ctx, ActivationAllocator& alloc, bool sp) {
    const int rank = tp.rank, t = tp.size;
    const int S = 4 * t, B = 3, IC = 10, OC = 6 * t, N = S * B, rows = N / t;  // rows: a sequence shard
    std::mt19937 rng(11);  // the same stream on every rank: every rank knows the full tensors
    std::vector<float> X = random_vec((size_t)N * IC, rng), W = random_vec((size_t)OC * IC, rng),
                       b = random_vec(OC, rng), dY = random_vec((size_t)N * OC, rng);
    // Reference: the unsplit linear.
    Tensor tX = make_tensor(Device::CPU, DType::F32, X), tW = make_tensor(Device::CPU, DType::F32, W);
    Tensor tb = make_tensor(Device::CPU, DType::F32, b), tdY = make_tensor(Device::CPU, DType::F32, dY);
    Tensor Y = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * OC), dX = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * IC);
    Tensor dW = tensor_zeros(Device::CPU, DType::F32, (int64_t)OC * IC), db = tensor_zeros(Device::CPU, DType::F32, OC);
    linear_forward(ctx, Y, tX, tW, tb, N, IC, OC);
    linear_backward(ctx, dX, dW, db, tdY, tX, tW, N, IC, OC);
    std::vector<float> Yv = tensor_to_host_f32(Y), dXv = tensor_to_host_f32(dX), dWv = tensor_to_host_f32(dW),
                       dbv = tensor_to_host_f32(db);
    const double tol = 1e-5;
    Region reg{&tp, sp, &alloc, 0};

    // ---- column-parallel: this rank's OC/t output rows of W ----
    int OCl = OC / t;
    Tensor Wl = make_tensor(Device::CPU, DType::F32, rows_slice(W, IC, rank * OCl, OCl));
    Tensor bl = make_tensor(Device::CPU, DType::F32, std::vector<float>(b.begin() + rank * OCl, b.begin() + (rank + 1) * OCl));
    // input: the full X (TP) or this rank's sequence shard of rows (SP)
    std::vector<float> Xin = sp ? rows_slice(X, IC, rank * rows, rows) : X;
    Tensor in = make_tensor(Device::CPU, DType::F32, Xin);
    Tensor out = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * OCl);
    column_parallel_forward(reg, ctx, out, in, Wl, bl, N, IC, OCl);
    CHECK(max_rel_err(tensor_to_host_f32(out), cols_slice(Yv, N, OC, rank * OCl, OCl), 1.0) < tol,
          "column-parallel forward (sp=%d) differs from the unsplit linear", sp);
    Tensor dout = make_tensor(Device::CPU, DType::F32, cols_slice(dY, N, OC, rank * OCl, OCl));
    Tensor din = tensor_zeros(Device::CPU, DType::F32, (int64_t)Xin.size());
    Tensor dWl = tensor_zeros(Device::CPU, DType::F32, (int64_t)OCl * IC), dbl = tensor_zeros(Device::CPU, DType::F32, OCl);
    column_parallel_backward(reg, ctx, din, dWl, dbl, dout, in, Wl, N, IC, OCl);
    std::vector<float> want_din = sp ? rows_slice(dXv, IC, rank * rows, rows) : dXv;
    CHECK(max_rel_err(tensor_to_host_f32(din), want_din, 1.0) < tol, "column-parallel dX (sp=%d) differs", sp);
    CHECK(max_rel_err(tensor_to_host_f32(dWl), rows_slice(dWv, IC, rank * OCl, OCl), 1.0) < tol, "column-parallel dW (sp=%d)", sp);
    CHECK(max_rel_err(tensor_to_host_f32(dbl), std::vector<float>(dbv.begin() + rank * OCl, dbv.begin() + (rank + 1) * OCl), 1.0) < tol,
          "column-parallel db (sp=%d)", sp);
    CHECK(alloc.live_bytes() == 0, "column-parallel leaked transient buffers");

    // ---- row-parallel: this rank's IC/t input columns of W2 (OC2 x IC2), input = its column slice ----
    const int IC2 = 4 * t, OC2 = 5;
    int ICl = IC2 / t;
    std::vector<float> X2 = random_vec((size_t)N * IC2, rng), W2 = random_vec((size_t)OC2 * IC2, rng),
                       dY2 = random_vec((size_t)N * OC2, rng);
    Tensor tX2 = make_tensor(Device::CPU, DType::F32, X2), tW2 = make_tensor(Device::CPU, DType::F32, W2);
    Tensor tdY2 = make_tensor(Device::CPU, DType::F32, dY2);
    Tensor Y2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * OC2), dX2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * IC2);
    Tensor dW2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)OC2 * IC2);
    linear_forward(ctx, Y2, tX2, tW2, Tensor(), N, IC2, OC2);
    linear_backward(ctx, dX2, dW2, Tensor(), tdY2, tX2, tW2, N, IC2, OC2);
    std::vector<float> Y2v = tensor_to_host_f32(Y2), dX2v = tensor_to_host_f32(dX2), dW2v = tensor_to_host_f32(dW2);
    Tensor W2l = make_tensor(Device::CPU, DType::F32, cols_slice(W2, OC2, IC2, rank * ICl, ICl));
    Tensor in2 = make_tensor(Device::CPU, DType::F32, cols_slice(X2, N, IC2, rank * ICl, ICl));
    Tensor out2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)(sp ? rows : N) * OC2);
    row_parallel_forward(reg, ctx, out2, in2, W2l, N, ICl, OC2);
    std::vector<float> want_out2 = sp ? rows_slice(Y2v, OC2, rank * rows, rows) : Y2v;
    CHECK(max_rel_err(tensor_to_host_f32(out2), want_out2, 1.0) < tol, "row-parallel forward (sp=%d) differs", sp);
    Tensor dout2 = make_tensor(Device::CPU, DType::F32, sp ? rows_slice(dY2, OC2, rank * rows, rows) : dY2);
    Tensor din2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * ICl), dW2l = tensor_zeros(Device::CPU, DType::F32, (int64_t)OC2 * ICl);
    row_parallel_backward(reg, ctx, din2, dW2l, dout2, in2, W2l, N, ICl, OC2);
    CHECK(max_rel_err(tensor_to_host_f32(din2), cols_slice(dX2v, N, IC2, rank * ICl, ICl), 1.0) < tol, "row-parallel dX (sp=%d)", sp);
    CHECK(max_rel_err(tensor_to_host_f32(dW2l), cols_slice(dW2v, OC2, IC2, rank * ICl, ICl), 1.0) < tol, "row-parallel dW (sp=%d)", sp);
    CHECK(alloc.live_bytes() == 0, "row-parallel leaked transient buffers");
    Tensor* all[] = {&tX, &tW, &tb, &tdY, &Y, &dX, &dW, &db, &Wl, &bl, &in, &out, &dout, &din, &dWl, &dbl,
                     &tX2, &tW2, &tdY2, &Y2, &dX2, &dW2, &W2l, &in2, &out2, &dout2, &din2, &dW2l};
    for (Tensor* x : all) tensor_free(*x);
}
