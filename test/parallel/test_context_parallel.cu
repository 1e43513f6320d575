// test_context_parallel.cu — parallel/context_parallel.cu on world = c ranks (one CP group), in the style of
// Transformer Engine's context-parallel tests: full attention on one rank is the reference, and every CP
// rank's chunks of out, lse, dQ, dK and dV are compared with the reference's rows at the same positions.
//   - cp_runs / runs_slice / runs_position: the zigzag chunks tile the sequence, every rank holds 2 of 2c;
//   - ring attention forward and backward against flash_attention_forward / _backward of the whole sequence
//     (every rank computes the reference from the same inputs), at sequence lengths that are not powers of 2
//     and chunks that are not a multiple of the 64-position tiles, without and with dropout (the keep bits are
//     keyed by global positions, so the masks must be the reference's), in f32 and bf16;
//   - the work: 2c + 1 chunk-pair blocks per rank and layer (2 on the diagonal), the query-key pairs equal
//     on every rank and summing over the ranks to the causal triangle;
//   - the bytes each rank sends, as the communicator counts them, against the formulas of
//     recompute/formulas.h (cp_kv_forward_bytes, cp_kv_backward_bytes);
//   - all of it under the default rules and under --comm mpi-strict's (NCCL's point-to-point semantics).
// With --device cuda the ring runs on the GPU (the MPI backend: the ranks may share one GPU; exit 77 without a
// GPU), against the same CPU reference: the block kernels, the merge, the K|V packing and the fp32 sums.
#include <mpi.h>
#include <cstring>
#include "../test_util.h"
#include "../../layers/flash_attention.h"
#include "../../parallel/context_parallel.h"
#include "../../recompute/formulas.h"

// Rows of a [S·B, width] matrix at the global positions this rank holds, in its order.
static std::vector<float> rows_at(const std::vector<float>& full, const SeqRuns& held, int B, int width) {
    std::vector<float> out;
    for (int i = 0; i < held.total(); i++) {
        const int64_t s = runs_position(held, i);
        out.insert(out.end(), full.begin() + (s * B) * width, full.begin() + (s * B + B) * width);
    }
    return out;
}
// The lse [B, NH, S] entries of those positions, as a [B, NH, S_local] array.
static std::vector<float> lse_at(const std::vector<float>& full, const SeqRuns& held, int BNH, int S) {
    std::vector<float> out;
    for (int bn = 0; bn < BNH; bn++)
        for (int i = 0; i < held.total(); i++) out.push_back(full[(size_t)bn * S + runs_position(held, i)]);
    return out;
}

static void check_positions(int c) {
    for (int S : {8 * c, 40 * c, 2 * c}) {
        std::vector<int> seen(S, 0);
        for (int r = 0; r < c; r++) {
            const SeqRuns held = cp_runs(S, c, r);
            CHECK(held.total() == S / c, "cp_runs(%d, %d, %d) holds %d positions, expected S/c", S, c, r, held.total());
            if (c > 1)
                CHECK(held.n == 2 && held.first[0] == (int64_t)r * (S / (2 * c)) &&
                          held.first[1] == (int64_t)(2 * c - 1 - r) * (S / (2 * c)),
                      "rank %d of %d must hold chunks %d and %d", r, c, r, 2 * c - 1 - r);
            for (int i = 0; i < held.total(); i++) seen[runs_position(held, i)]++;
            // An SP shard of the rank's positions (t = 3: a shard may straddle the two chunks).
            if (held.total() % 3 == 0) {
                const int t = 3, n = held.total() / t;
                for (int k = 0; k < t; k++) {
                    const SeqRuns sh = runs_slice(held, k * n, n);
                    CHECK(sh.total() == n, "runs_slice keeps %d of %d positions", sh.total(), n);
                    for (int i = 0; i < n; i++)
                        CHECK(runs_position(sh, i) == runs_position(held, k * n + i), "runs_slice position %d of shard %d", i, k);
                }
            }
        }
        for (int s = 0; s < S; s++) CHECK(seen[s] == 1, "position %d of %d is held %d times over the CP group", s, S, seen[s]);
    }
}

static void check_ring(Comm& cp, Ctx& ctx, Ctx& dev, DType dt, int L, int B, int NH, int HD, float p, const char* rules) {
    const int c = cp.size, r = cp.rank, S = 2 * c * L, C = NH * HD;
    ActivationAllocator A(dev.device);
    AttnShape full;
    full.S = S, full.B = B, full.NH = NH, full.HD = HD;
    full.b_offset = 1, full.B_total = B + 2, full.head_offset = 3, full.NH_total = NH + 4;  // a block of a larger batch
    const uint64_t seed = 77;
    const uint32_t stream = 5;
    // The same inputs on every rank (one seed): the whole sequence's Q, K, V and output gradient.
    std::mt19937 rng(1234);
    std::vector<float> qkv = round_to(dt, random_vec((size_t)S * B * 3 * C, rng));
    std::vector<float> dout = round_to(dt, random_vec((size_t)S * B * C, rng));
    // The reference: one rank, the whole sequence.
    Tensor tq = cpu_tensor(dt, qkv), tdo = cpu_tensor(dt, dout);
    Tensor to = tensor_zeros(Device::CPU, dt, (int64_t)S * B * C), tl = tensor_zeros(Device::CPU, DType::F32, (int64_t)B * NH * S);
    Tensor tdq = tensor_zeros(Device::CPU, dt, (int64_t)S * B * 3 * C);
    flash_attention_forward(ctx, to, tl, tq, full, p, seed, stream);
    flash_attention_backward(ctx, tdq, tdo, to, tl, tq, full, p, seed, stream);
    const std::vector<float> ref_out = to_host(to), ref_lse = to_host(tl), ref_dqkv = to_host(tdq);
    free_all({&tq, &tdo, &to, &tl, &tdq});

    // This rank: its zigzag chunks of every input, ring attention over the group.
    const SeqRuns held = cp_runs(S, c, r);
    AttnShape mine = full;
    mine.S = S / c;
    const Device d = dev.device;
    Tensor q = make_tensor(d, dt, rows_at(qkv, held, B, 3 * C)), g = make_tensor(d, dt, rows_at(dout, held, B, C));
    Tensor o = tensor_zeros(d, dt, (int64_t)mine.S * B * C), l = tensor_zeros(d, DType::F32, (int64_t)B * NH * mine.S);
    Tensor dq = tensor_zeros(d, dt, (int64_t)mine.S * B * 3 * C);
    cp_stats_reset();
    const uint64_t b0 = cp.counters.p2p_bytes;
    ring_attention_forward(cp, dev, A, 0, o, l, q, mine, S, p, seed, stream);
    const CpStats fwd = cp_stats();
    const uint64_t fwd_bytes = cp.counters.p2p_bytes - b0;
    ring_attention_backward(cp, dev, A, 0, dq, g, o, l, q, mine, S, p, seed, stream);
    ctx_sync(dev);
    const CpStats both = cp_stats();
    const uint64_t bwd_bytes = cp.counters.p2p_bytes - b0 - fwd_bytes;

    // Values: the reference's rows at this rank's positions. The blocks sum in another order than the
    // reference's tiles (and the lse merge rounds once more), so equal up to float reassociation.
    const double tol = dt == DType::BF16 ? 2e-2 : d == Device::CUDA ? 1e-4 : 2e-5;
    char what[160];
    snprintf(what, sizeof what, "c=%d rank %d L=%d %s p=%.1f %s %s", c, r, L, dtype_name(dt), p, rules, device_name(d));
    const std::vector<float> want_out = rows_at(ref_out, held, B, C), want_dqkv = rows_at(ref_dqkv, held, B, 3 * C);
    const std::vector<float> got_out = to_host(o), got_dqkv = to_host(dq);
    CHECK(norm_rel_err(got_out, want_out) < tol, "%s: out differs from full attention's rows: %.3g", what,
          norm_rel_err(got_out, want_out));
    CHECK(max_rel_err(to_host(l), lse_at(ref_lse, held, B * NH, S), 1.0) < (d == Device::CUDA ? 1e-4 : 1e-5), "%s: lse differs: %.3g", what,
          max_rel_err(to_host(l), lse_at(ref_lse, held, B * NH, S), 1.0));
    // dQ, dK, dV apart (columns of dqkv), so that a wrong one is named.
    const char* part[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        std::vector<float> a, b;
        for (size_t row = 0; row < got_dqkv.size() / (3 * C); row++)
            for (int j = 0; j < C; j++) {
                a.push_back(got_dqkv[row * 3 * C + k * C + j]);
                b.push_back(want_dqkv[row * 3 * C + k * C + j]);
            }
        CHECK(norm_rel_err(a, b) < (dt == DType::BF16 ? 3e-2 : d == Device::CUDA ? 2e-4 : 5e-5), "%s: %s differs from full attention's rows: %.3g",
              what, part[k], norm_rel_err(a, b));
    }

    // The work: the same on every rank, and the causal triangle over the group.
    CHECK(fwd.blocks == 2 * c + 1 && fwd.diagonal_blocks == 2, "%s: %lld blocks (%lld diagonal), expected 2c+1 = %d (2)",
          what, (long long)fwd.blocks, (long long)fwd.diagonal_blocks, 2 * c + 1);
    CHECK(both.blocks == 2 * fwd.blocks, "%s: the backward computes the forward's blocks", what);
    double pairs_min = fwd.pairs, pairs_max = fwd.pairs, pairs_sum = fwd.pairs;
    MPI_Allreduce(MPI_IN_PLACE, &pairs_min, 1, MPI_DOUBLE, MPI_MIN, cp.mpi);
    MPI_Allreduce(MPI_IN_PLACE, &pairs_max, 1, MPI_DOUBLE, MPI_MAX, cp.mpi);
    MPI_Allreduce(MPI_IN_PLACE, &pairs_sum, 1, MPI_DOUBLE, MPI_SUM, cp.mpi);
    CHECK(pairs_min == pairs_max, "%s: ranks compute different query-key pairs (%.0f to %.0f): the zigzag must balance them",
          what, pairs_min, pairs_max);
    CHECK(pairs_sum == (double)B * NH * S * (S + 1.0) / 2, "%s: the group computes %.0f pairs, the causal triangle has %.0f",
          what, pairs_sum, (double)B * NH * S * (S + 1.0) / 2);

    // The bytes, as counted by the communicator, against the formulas (one layer, micro-batch B, t = 1).
    LayerFormulaInput in;
    in.s = (double)S / c, in.b = B, in.h = C, in.a = NH, in.t = 1, in.d = (int)dtype_size(dt);  // the rank's s/c
    CHECK((double)fwd_bytes == cp_kv_forward_bytes(in, c), "%s: forward sent %llu bytes, formula %.0f", what,
          (unsigned long long)fwd_bytes, cp_kv_forward_bytes(in, c));
    CHECK((double)bwd_bytes == cp_kv_backward_bytes(in, c), "%s: backward sent %llu bytes, formula %.0f", what,
          (unsigned long long)bwd_bytes, cp_kv_backward_bytes(in, c));
    CHECK(fwd_bytes == (uint64_t)2 * (c - 1) * (S / c) * B * C * dtype_size(dt), "%s: forward bytes by hand", what);
    free_all({&q, &g, &o, &l, &dq});
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int failed = 0;
    {
        Ctx ctx = ctx_create(Device::CPU);
        int rank = 0, c = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c);
        const bool gpu = argc > 2 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cuda");
        if (gpu) {
            int ok = cuda_available() ? 1 : 0, all = 0;
            MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (!all) {
                if (rank == 0) printf("test_context_parallel: no CUDA GPU visible, skipping\n");
                ctx_destroy(ctx);
                MPI_Finalize();
                return 77;
            }
        }
        Ctx dev = gpu ? ctx_create(Device::CUDA, 0) : ctx;
        check_positions(c);
        if (c > 1) {
            for (bool strict : {false, true}) {
                CommRules rules;
                rules.strict = strict;
                rules.check_order = true;
                Comm cp = comm_create(MPI_COMM_WORLD, 0, rank, CommBackend::MPI, ctx, rules);
                const char* name = strict ? "mpi-strict" : "mpi";
                // L = 40 and 72: chunks that are not a multiple of the 64-position tiles; S = 2cL not a power of 2.
                check_ring(cp, ctx, dev, DType::F32, 40, 2, 2, 16, 0.f, name);
                check_ring(cp, ctx, dev, DType::F32, 72, 1, 3, 8, 0.1f, name);
                if (!strict) check_ring(cp, ctx, dev, DType::BF16, 40, 2, 2, 16, 0.1f, name);
                // The head dimensions of every flash kernel bound (32, 64, 128) on the GPU.
                if (gpu && !strict)
                    for (int hd : {32, 64, 128}) check_ring(cp, ctx, dev, DType::BF16, 24, 1, 2, hd, 0.1f, name);
                comm_destroy(cp);
            }
        }
        if (gpu) ctx_destroy(dev);
        ctx_destroy(ctx);
        MPI_Allreduce(MPI_IN_PLACE, &g_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) failed = test_finish("test_context_parallel");
        MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return failed;
}
