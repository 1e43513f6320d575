// test_tensor_parallel.cu — the building blocks against their unsplit versions, on world = t ranks:
//   f / f̄ and g / ḡ (what they do forward and backward);
//   the column-parallel linear (weight rows split) and the row-parallel linear (weight columns split), with
//   and without sequence parallelism, forward and backward, against one unsplit linear on the full weight;
//   the weight slices (shard_params / unshard_params) round trip for every parameter tensor.
#include "test_util.h"
#include "../layers/linear.h"
#include "../parallel/sequence_parallel.h"
#include "../parallel/tensor_parallel.h"

static std::vector<float> rows_slice(const std::vector<float>& m, int rows, int cols, int r0, int nr) {
    (void)rows;
    return std::vector<float>(m.begin() + (size_t)r0 * cols, m.begin() + (size_t)(r0 + nr) * cols);
}
static std::vector<float> cols_slice(const std::vector<float>& m, int rows, int cols, int c0, int nc) {
    std::vector<float> out;
    for (int i = 0; i < rows; i++)
        for (int j = c0; j < c0 + nc; j++) out.push_back(m[(size_t)i * cols + j]);
    return out;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int failed = 0;
    {
        Ctx ctx = ctx_create(Device::CPU);
        int rank = 0, t = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &t);
        Comm tp = comm_create(MPI_COMM_WORLD, 0, rank, CommBackend::MPI, ctx);
        ActivationAllocator alloc(Device::CPU);
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

        // f̄ forward = all-reduce, f backward = all-reduce; g forward = all-gather, ḡ forward = reduce-scatter.
        {
            std::vector<float> mine(8, (float)(rank + 1));
            Tensor x = make_tensor(Device::CPU, DType::F32, mine);
            fbar_forward(tp, ctx, x);
            CHECK(tensor_to_host_f32(x)[0] == t * (t + 1) / 2.0f, "f̄ forward must sum over the group");
            Tensor gx = make_tensor(Device::CPU, DType::F32, mine);
            f_backward(tp, ctx, gx);
            CHECK(tensor_to_host_f32(gx)[7] == t * (t + 1) / 2.0f, "f backward must sum over the group");
            Tensor full = tensor_zeros(Device::CPU, DType::F32, 8 * t), shard = make_tensor(Device::CPU, DType::F32, mine);
            g_forward(tp, ctx, full, shard);
            std::vector<float> fv = tensor_to_host_f32(full);
            for (int r = 0; r < t; r++) CHECK(fv[(size_t)r * 8] == r + 1, "g forward must gather shard %d in rank order", r);
            Tensor red = tensor_zeros(Device::CPU, DType::F32, 8);
            gbar_forward(tp, ctx, red, full);  // every rank contributes the same gathered vector
            CHECK(tensor_to_host_f32(red)[0] == (float)t * (rank + 1), "ḡ forward must reduce-scatter");
            tensor_free(x); tensor_free(gx); tensor_free(full); tensor_free(shard); tensor_free(red);
        }

        for (int sp = 0; sp < 2; sp++) {
            Region reg{&tp, sp == 1, &alloc, 0};
            // ---- column-parallel: this rank's OC/t output rows of W ----
            int OCl = OC / t;
            Tensor Wl = make_tensor(Device::CPU, DType::F32, rows_slice(W, OC, IC, rank * OCl, OCl));
            Tensor bl = make_tensor(Device::CPU, DType::F32, std::vector<float>(b.begin() + rank * OCl, b.begin() + (rank + 1) * OCl));
            // input: the full X (TP) or this rank's sequence shard of rows (SP)
            std::vector<float> Xin = sp ? rows_slice(X, N, IC, rank * rows, rows) : X;
            Tensor in = make_tensor(Device::CPU, DType::F32, Xin);
            Tensor out = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * OCl);
            column_parallel_forward(reg, ctx, out, in, Wl, bl, N, IC, OCl);
            CHECK(max_rel_err(tensor_to_host_f32(out), cols_slice(Yv, N, OC, rank * OCl, OCl), 1.0) < tol,
                  "column-parallel forward (sp=%d) differs from the unsplit linear", sp);
            Tensor dout = make_tensor(Device::CPU, DType::F32, cols_slice(dY, N, OC, rank * OCl, OCl));
            Tensor din = tensor_zeros(Device::CPU, DType::F32, (int64_t)Xin.size());
            Tensor dWl = tensor_zeros(Device::CPU, DType::F32, (int64_t)OCl * IC), dbl = tensor_zeros(Device::CPU, DType::F32, OCl);
            column_parallel_backward(reg, ctx, din, dWl, dbl, dout, in, Wl, N, IC, OCl);
            std::vector<float> want_din = sp ? rows_slice(dXv, N, IC, rank * rows, rows) : dXv;
            CHECK(max_rel_err(tensor_to_host_f32(din), want_din, 1.0) < tol, "column-parallel dX (sp=%d) differs", sp);
            CHECK(max_rel_err(tensor_to_host_f32(dWl), rows_slice(dWv, OC, IC, rank * OCl, OCl), 1.0) < tol, "column-parallel dW (sp=%d)", sp);
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
            std::vector<float> want_out2 = sp ? rows_slice(Y2v, N, OC2, rank * rows, rows) : Y2v;
            CHECK(max_rel_err(tensor_to_host_f32(out2), want_out2, 1.0) < tol, "row-parallel forward (sp=%d) differs", sp);
            Tensor dout2 = make_tensor(Device::CPU, DType::F32, sp ? rows_slice(dY2, N, OC2, rank * rows, rows) : dY2);
            Tensor din2 = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * ICl), dW2l = tensor_zeros(Device::CPU, DType::F32, (int64_t)OC2 * ICl);
            row_parallel_backward(reg, ctx, din2, dW2l, dout2, in2, W2l, N, ICl, OC2);
            CHECK(max_rel_err(tensor_to_host_f32(din2), cols_slice(dX2v, N, IC2, rank * ICl, ICl), 1.0) < tol, "row-parallel dX (sp=%d)", sp);
            CHECK(max_rel_err(tensor_to_host_f32(dW2l), cols_slice(dW2v, OC2, IC2, rank * ICl, ICl), 1.0) < tol, "row-parallel dW (sp=%d)", sp);
            Tensor* all[] = {&Wl, &bl, &in, &out, &dout, &din, &dWl, &dbl, &tX2, &tW2, &tdY2, &Y2, &dX2, &dW2, &W2l, &in2, &out2, &dout2, &din2, &dW2l};
            for (Tensor* x : all) tensor_free(*x);
        }

        // ---- weight slices: shard then unshard gives back the full model, for every tensor ----
        GPTConfig cfg;
        cfg.layers = 2; cfg.heads = 4; cfg.channels = 8; cfg.vocab = 30; cfg.padded_vocab = 32; cfg.max_seq = 6;
        for (int tt : {1, 2, 4}) {
            std::vector<float> full((size_t)param_count(cfg));
            for (size_t i = 0; i < full.size(); i++) full[i] = (float)i;
            int64_t ls[NUM_PARAM_TENSORS], n = 0;
            local_param_sizes(cfg, tt, ls);
            for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += ls[i];
            std::vector<std::vector<float>> locals(tt, std::vector<float>((size_t)n));
            std::vector<const float*> ptrs;
            for (int r = 0; r < tt; r++) {
                shard_params(cfg, tt, r, full.data(), locals[r].data());
                ptrs.push_back(locals[r].data());
            }
            std::vector<float> back(full.size(), -1.f);
            unshard_params(cfg, tt, ptrs, back.data());
            CHECK(back == full, "shard/unshard round trip at tp %d", tt);
            // QKV: rank r's first local row is row r·C/t of Q (a per-head split of each of Q, K and V).
            if (tt == 2) {
                int64_t off_full = 0, off_local = 0, fs[NUM_PARAM_TENSORS];
                param_sizes(cfg, fs);
                for (int i = 0; i < P_QKVW; i++) { off_full += fs[i]; off_local += ls[i]; }
                int C = cfg.channels;
                CHECK(locals[1][off_local] == full[off_full + (size_t)(C / 2) * C], "rank 1's Q rows start at row C/2");
                CHECK(locals[1][off_local + (size_t)(C / 2) * C] == full[off_full + (size_t)(C + C / 2) * C], "rank 1's K rows start at row C + C/2");
            }
        }
        tensor_free(tX); tensor_free(tW); tensor_free(tb); tensor_free(tdY); tensor_free(Y); tensor_free(dX); tensor_free(dW); tensor_free(db);
        comm_destroy(tp);
        ctx_destroy(ctx);
        if (rank == 0) failed = test_finish("test_tensor_parallel");
        MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return failed;
}
