// test_vocab_parallel.cu — parallel/vocab_parallel.cu at tp = world against the same functions at tp 1 (a
// group of one rank holding the whole vocabulary): the vocabulary-parallel token embedding, forward and
// backward, with and without sequence parallelism, and the vocabulary-parallel cross-entropy.
#include "../test_util.h"
#include "../../parallel/vocab_parallel.h"

static Tensor i32_tensor(const std::vector<int32_t>& v) {
    Tensor t = tensor_alloc(Device::CPU, DType::I32, (int64_t)v.size());
    memcpy(t.data, v.data(), v.size() * sizeof(int32_t));
    return t;
}
static std::vector<float> block(const std::vector<float>& m, int cols, int r0, int nr, int c0, int nc) {
    std::vector<float> out;
    for (int i = r0; i < r0 + nr; i++)
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
        Comm one = comm_create(MPI_COMM_SELF, 0, 0, CommBackend::MPI, ctx);  // the tp 1 reference
        ActivationAllocator alloc(Device::CPU);
        const int V = 29, Vp = 32, C = 6, S = 4 * t, B = 2, N = S * B, V_local = Vp / t;
        const int64_t v_begin = (int64_t)rank * V_local;
        std::mt19937 rng(5);  // the same stream on every rank
        std::vector<float> wte = random_vec((size_t)Vp * C, rng), dY = random_vec((size_t)N * C, rng);
        std::vector<float> logits = random_vec((size_t)N * Vp, rng, -4.f, 4.f);
        std::vector<int32_t> tok(N), tgt(N);
        for (int i = 0; i < N; i++) tok[i] = (int32_t)(rng() % V), tgt[i] = (int32_t)(rng() % V);
        Tensor tokens = i32_tensor(tok), targets = i32_tensor(tgt);

        // ---- reference: tp 1, the whole table ----
        Region ref_region{&one, false, &alloc, kModelLevel};
        Tensor wte_full = make_tensor(Device::CPU, DType::F32, wte), out_ref = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * C);
        vocab_parallel_embedding_forward(ref_region, ctx, out_ref, tokens, wte_full, 0, Vp, N, C);
        EmbeddingIndex idx_ref;
        embedding_index_build(idx_ref, tok.data(), N, 0, Vp, ctx);
        Tensor dY_full = make_tensor(Device::CPU, DType::F32, dY), dwte_ref = tensor_zeros(Device::CPU, DType::F32, (int64_t)Vp * C);
        vocab_parallel_embedding_backward(ref_region, ctx, dwte_ref, dY_full, idx_ref, N, C);
        std::vector<float> out_ref_v = tensor_to_host_f32(out_ref), dwte_ref_v = tensor_to_host_f32(dwte_ref);

        // ---- this rank's vocabulary slice, plain TP (f̄) and SP (ḡ) ----
        Tensor wte_local = make_tensor(Device::CPU, DType::F32, block(wte, C, (int)v_begin, V_local, 0, C));
        EmbeddingIndex idx;
        embedding_index_build(idx, tok.data(), N, v_begin, V_local, ctx);
        for (int sp = 0; sp < 2; sp++) {
            Region region{&tp, sp == 1, &alloc, kModelLevel};
            const int rows = sp ? N / t : N, r0 = sp ? rank * rows : 0;  // this rank's rows of [N, C]
            Tensor out = tensor_zeros(Device::CPU, DType::F32, (int64_t)rows * C);
            vocab_parallel_embedding_forward(region, ctx, out, tokens, wte_local, v_begin, V_local, N, C);
            CHECK(max_rel_err(tensor_to_host_f32(out), block(out_ref_v, C, r0, rows, 0, C), 1.0) < 1e-6,
                  "embedding forward (sp=%d) differs from tp 1", sp);
            Tensor dout = make_tensor(Device::CPU, DType::F32, block(dY, C, r0, rows, 0, C));
            Tensor dwte = tensor_zeros(Device::CPU, DType::F32, (int64_t)V_local * C);
            vocab_parallel_embedding_backward(region, ctx, dwte, dout, idx, N, C);
            CHECK(max_rel_err(tensor_to_host_f32(dwte), block(dwte_ref_v, C, (int)v_begin, V_local, 0, C), 1.0) < 1e-6,
                  "embedding backward (sp=%d) differs from tp 1's rows of this rank", sp);
            CHECK(alloc.live_bytes() == 0, "embedding (sp=%d) leaked transient buffers", sp);
            tensor_free(out); tensor_free(dout); tensor_free(dwte);
        }

        // ---- cross-entropy over vocab-sharded logits ----
        auto ce = [&](Comm& c, const std::vector<float>& lg, int VL, int64_t vb, std::vector<float>& rowmax,
                      std::vector<float>& sumexp) {
            Tensor L = make_tensor(Device::CPU, DType::F32, lg);
            Tensor rm = tensor_zeros(Device::CPU, DType::F32, N), se = tensor_zeros(Device::CPU, DType::F32, N);
            Tensor tl = tensor_zeros(Device::CPU, DType::F32, N), ls = tensor_zeros(Device::CPU, DType::F32, N);
            float loss = vocab_parallel_cross_entropy(c, ctx, L, targets, rm, se, tl, ls, N, VL, vb, V);
            rowmax = tensor_to_host_f32(rm);
            sumexp = tensor_to_host_f32(se);
            Tensor* all[] = {&L, &rm, &se, &tl, &ls};
            for (Tensor* x : all) tensor_free(*x);
            return loss;
        };
        std::vector<float> rm_ref, se_ref, rm, se;
        float loss_ref = ce(one, logits, Vp, 0, rm_ref, se_ref);
        float loss = ce(tp, block(logits, Vp, 0, N, (int)v_begin, V_local), V_local, v_begin, rm, se);
        CHECK(std::fabs(loss - loss_ref) <= 1e-5 * std::fabs(loss_ref), "cross-entropy loss %.7f at tp %d, %.7f at tp 1", loss, t,
              loss_ref);
        CHECK(rm == rm_ref, "row maxima over the whole (real) vocabulary differ from tp 1");
        CHECK(max_rel_err(se, se_ref, 1.0) < 1e-5, "exp-sums differ from tp 1");

        Tensor* all[] = {&tokens, &targets, &wte_full, &out_ref, &dY_full, &dwte_ref, &wte_local};
        for (Tensor* x : all) tensor_free(*x);
        embedding_index_free(idx_ref);
        embedding_index_free(idx);
        comm_destroy(one);
        comm_destroy(tp);
        ctx_destroy(ctx);
        if (rank == 0) failed = test_finish("test_vocab_parallel");
        MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return failed;
}
