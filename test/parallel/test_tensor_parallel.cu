// test_tensor_parallel.cu — parallel/tensor_parallel.cu against its unsplit versions, on world = t ranks:
//   f / f̄ (what they do forward and backward);
//   the column-parallel linear (weight rows split) and the row-parallel linear (weight columns split), plain
//   TP, forward and backward, against one unsplit linear on the full weight (the SP halves:
//   test_sequence_parallel.cu);
//   the weight slices (shard_params / unshard_params) round trip for every parameter tensor.
#include "parallel_linear_checks.h"

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

        // f̄ forward = all-reduce, f backward = all-reduce; f forward and f̄ backward are the identity.
        {
            std::vector<float> mine(8, (float)(rank + 1));
            Tensor x = make_tensor(Device::CPU, DType::F32, mine);
            fbar_forward(tp, ctx, x);
            CHECK(tensor_to_host_f32(x)[0] == t * (t + 1) / 2.0f, "f̄ forward must sum over the group");
            Tensor gx = make_tensor(Device::CPU, DType::F32, mine);
            f_backward(tp, ctx, gx);
            CHECK(tensor_to_host_f32(gx)[7] == t * (t + 1) / 2.0f, "f backward must sum over the group");
            Tensor id = make_tensor(Device::CPU, DType::F32, mine);
            f_forward(tp, ctx, id);
            fbar_backward(tp, ctx, id);
            CHECK(tensor_to_host_f32(id) == mine, "f forward and f̄ backward must be the identity");
            tensor_free(x); tensor_free(gx); tensor_free(id);
        }

        check_parallel_linears(tp, ctx, alloc, false);

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
        comm_destroy(tp);
        ctx_destroy(ctx);
        if (rank == 0) failed = test_finish("test_tensor_parallel");
        MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return failed;
}
