// test_sequence_parallel.cu — parallel/sequence_parallel.cu, on world = t ranks:
//   g / ḡ forward and backward against the unsplit collectives they stand for (all-gather, reduce-scatter),
//   and the round trips g then ḡ;
//   sp_shard: the shards tile the sequence in rank order;
//   the SP halves of the column- and row-parallel linear layers against one unsplit linear (through the
//   tensor-parallel dispatch, Region.sp = true), and the backward re-gather counted in regather_bytes;
//   is_sequence_parallel_param against the parameter table, and the gradient sum over the group.
#include "parallel_linear_checks.h"
#include "../../parallel/sequence_parallel.h"

// Rank r's shard of a [t·n] vector: the same stream on every rank, so every rank knows all shards.
static std::vector<float> shard_of(int r, int n) {
    std::mt19937 rng(100 + r);
    return random_vec((size_t)n, rng);
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
        const int n = 12;  // elements per shard

        // ---- g / ḡ against the collectives ----
        {
            // g forward = all-gather of the shards, in rank order (the existing small check, then random data).
            std::vector<float> mine(8, (float)(rank + 1));
            Tensor full8 = tensor_zeros(Device::CPU, DType::F32, 8 * t), shard8 = make_tensor(Device::CPU, DType::F32, mine);
            g_forward(tp, ctx, full8, shard8);
            std::vector<float> fv = tensor_to_host_f32(full8);
            for (int r = 0; r < t; r++) CHECK(fv[(size_t)r * 8] == r + 1, "g forward must gather shard %d in rank order", r);
            Tensor red = tensor_zeros(Device::CPU, DType::F32, 8);
            gbar_forward(tp, ctx, red, full8);  // every rank contributes the same gathered vector
            CHECK(tensor_to_host_f32(red)[0] == (float)t * (rank + 1), "ḡ forward must reduce-scatter");
            tensor_free(full8); tensor_free(shard8); tensor_free(red);

            std::vector<float> want_full;
            for (int r = 0; r < t; r++) {
                std::vector<float> s = shard_of(r, n);
                want_full.insert(want_full.end(), s.begin(), s.end());
            }
            Tensor shard = make_tensor(Device::CPU, DType::F32, shard_of(rank, n));
            Tensor full = tensor_zeros(Device::CPU, DType::F32, (int64_t)n * t), ag = tensor_zeros(Device::CPU, DType::F32, (int64_t)n * t);
            g_forward(tp, ctx, full, shard);
            all_gather(tp, ctx, ag, shard);
            CHECK(tensor_to_host_f32(full) == want_full, "g forward is not the all-gather of the shards");
            CHECK(tensor_to_host_f32(full) == tensor_to_host_f32(ag), "g forward differs from all_gather");
            Tensor gathered = tensor_zeros(Device::CPU, DType::F32, (int64_t)n * t);
            gbar_backward(tp, ctx, gathered, shard);
            CHECK(tensor_to_host_f32(gathered) == want_full, "ḡ backward is not the all-gather of the shards");  // = g forward

            // g backward and ḡ forward = reduce-scatter: rank r keeps block r of the sum over ranks.
            std::vector<float> want_sum(n, 0.f);
            Tensor contrib = make_tensor(Device::CPU, DType::F32, [&] {  // rank q contributes shard_of(q)·(q + 1) everywhere
                std::vector<float> v;
                for (int r = 0; r < t; r++) {
                    std::vector<float> s = shard_of(r, n);
                    for (float& x : s) x *= (float)(rank + 1);
                    v.insert(v.end(), s.begin(), s.end());
                }
                return v;
            }());
            std::vector<float> mine_block = shard_of(rank, n);
            for (int i = 0; i < n; i++) want_sum[i] = mine_block[i] * (float)(t * (t + 1) / 2);
            Tensor gb = tensor_zeros(Device::CPU, DType::F32, n), gf = tensor_zeros(Device::CPU, DType::F32, n),
                   rs = tensor_zeros(Device::CPU, DType::F32, n);
            g_backward(tp, ctx, gb, contrib);
            gbar_forward(tp, ctx, gf, contrib);
            reduce_scatter(tp, ctx, rs, contrib);
            CHECK(max_rel_err(tensor_to_host_f32(gb), want_sum, 1.0) < 1e-6, "g backward is not the reduce-scatter of the sum");
            CHECK(tensor_to_host_f32(gb) == tensor_to_host_f32(rs), "g backward differs from reduce_scatter");
            CHECK(tensor_to_host_f32(gf) == tensor_to_host_f32(rs), "ḡ forward differs from reduce_scatter");

            // Round trip: ḡ(g(shard)) = t · shard (every rank holds the same gathered copy, so the sum is t of it).
            Tensor trip = tensor_zeros(Device::CPU, DType::F32, n);
            gbar_forward(tp, ctx, trip, full);
            std::vector<float> want_trip = shard_of(rank, n);
            for (float& x : want_trip) x *= (float)t;
            CHECK(max_rel_err(tensor_to_host_f32(trip), want_trip, 1.0) < 1e-6, "ḡ(g(x)) != t·x");
            Tensor* all[] = {&shard, &full, &ag, &gathered, &contrib, &gb, &gf, &rs, &trip};
            for (Tensor* x : all) tensor_free(*x);
        }

        // ---- sp_shard ----
        for (int S : {4 * t, 12 * t}) {
            int64_t next = 0;
            for (int r = 0; r < t; r++) {
                SeqShard s = sp_shard(S, t, r, true);
                CHECK(s.S_loc == S / t && s.s_offset == next, "sp_shard(%d, %d, %d): {%d, %lld}", S, t, r, s.S_loc,
                      (long long)s.s_offset);
                next += s.S_loc;
                SeqShard off = sp_shard(S, t, r, false);
                CHECK(off.S_loc == S && off.s_offset == 0, "without SP every rank holds the whole sequence");
            }
            CHECK(next == S, "the shards must tile the sequence");
        }

        // ---- the SP halves of the parallel linear layers, and the re-gather counted apart ----
        tp.counters.reset();
        check_parallel_linears(tp, ctx, alloc, true);
        // One column-parallel layer (g forward; re-gather, then g backward) and one row-parallel layer (ḡ
        // forward; ḡ backward) ran.
        // (A group of one rank moves nothing and counts nothing.)
        CHECK(tp.counters.calls[kAllGather] == (t > 1 ? 3u : 0u), "SP linears: %llu all-gathers, expected g, re-gather, ḡ backward",
              (unsigned long long)tp.counters.calls[kAllGather]);
        CHECK(tp.counters.calls[kReduceScatter] == (t > 1 ? 2u : 0u), "SP linears: %llu reduce-scatters, expected g backward, ḡ",
              (unsigned long long)tp.counters.calls[kReduceScatter]);
        CHECK(tp.counters.calls[kAllReduce] == 0, "SP linears must not all-reduce");
        {
            // The column-parallel input is [N, IC] = [4t·3, 10]; the re-gather moves what the forward g moved.
            Comm& c = tp;
            c.counters.reset();
            const int N = 4 * t * 3, IC = 10;
            Tensor in = tensor_zeros(Device::CPU, DType::F32, (int64_t)(N / t) * IC);
            Tensor x = tensor_zeros(Device::CPU, DType::F32, (int64_t)N * IC);
            g_forward(c, ctx, x, in);
            uint64_t g_bytes = c.counters.bytes[kAllGather];
            regather_shard_async(c, ctx, x, in);
            regather_wait(c, ctx);
            CHECK(c.counters.regather_bytes == g_bytes, "re-gather counted %llu bytes, the forward g moved %llu",
                  (unsigned long long)c.counters.regather_bytes, (unsigned long long)g_bytes);
            CHECK(c.counters.bytes[kAllGather] == 2 * g_bytes, "the re-gather is an all-gather too");
            CHECK(t == 1 || g_bytes > 0, "an all-gather over %d ranks moves bytes", t);
            tensor_free(in);
            tensor_free(x);
        }

        // ---- which gradients are summed over TP ----
        {
            // The set the paper's SP needs summed (§4.2.2): every tensor applied to sequence shards.
            const int expected[] = {P_WPE, P_LN1W, P_LN1B, P_ATTPROJB, P_LN2W, P_LN2B, P_FCPROJB, P_LNFW, P_LNFB};
            for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
                bool in_list = false;
                for (int e : expected) in_list |= e == id;
                CHECK(is_sequence_parallel_param(id) == in_list, "%s: is_sequence_parallel_param = %d", param_name(id),
                      (int)is_sequence_parallel_param(id));
                CHECK(is_sequence_parallel_param(id) == (kParamTable[id].shard == ShardKind::Replicated),
                      "%s: must follow the table's shard kind", param_name(id));
            }
            // The sum: a flat buffer of 16 tensors of 3 elements, rank r holding r + 1 everywhere.
            int64_t offsets[NUM_PARAM_TENSORS], sizes[NUM_PARAM_TENSORS];
            for (int id = 0; id < NUM_PARAM_TENSORS; id++) offsets[id] = 3 * id, sizes[id] = 3;
            Tensor grads = make_tensor(Device::CPU, DType::F32, std::vector<float>(3 * NUM_PARAM_TENSORS, (float)(rank + 1)));
            sum_sequence_parallel_grads(tp, ctx, grads, offsets, sizes);
            std::vector<float> gv = tensor_to_host_f32(grads);
            for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
                float want = is_sequence_parallel_param(id) ? t * (t + 1) / 2.0f : (float)(rank + 1);
                for (int i = 0; i < 3; i++)
                    CHECK(gv[3 * id + i] == want, "%s: %g after the sum, expected %g", param_name(id), gv[3 * id + i], want);
            }
            tensor_free(grads);
        }

        comm_destroy(tp);
        ctx_destroy(ctx);
        if (rank == 0) failed = test_finish("test_sequence_parallel");
        MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return failed;
}
