// comm_checks.h — the collective checks shared by test_comm.cu (CPU tensors) and test_gpu_comm.cu (CUDA
// tensors): every rank builds its input from a formula of (group rank, index), so it can compute locally
// what every collective must return and compare.
#pragma once
#include <algorithm>
#include "../../parallel/collectives.h"
#include "../test_util.h"

// Rank r's input element i: small integers, exact in bf16 and in any summation order, so results can be
// compared bit for bit.
inline float comm_value(int r, int64_t i) { return (float)(((r * 7 + i * 3) % 13) - 6); }

// Inputs are written with tensor_from_host_f32 / tensor_fill_f32 / tensor_zeros, which use cudaMemcpy /
// cudaMemset on the legacy default stream; a cudaMemcpy from pageable memory may return before the data
// has landed, and ctx.stream (non-blocking) is not ordered after the legacy stream. So wait for the device
// before handing the tensor to a collective on ctx.stream.
inline void settle(const Ctx& ctx) {
    if (ctx.device == Device::CUDA) CUDA_CHECK(cudaDeviceSynchronize());
}

inline std::vector<float> comm_input(int r, int64_t n) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = comm_value(r, i);
    return v;
}

inline void check_all_reduce(Comm& c, const Ctx& ctx, DType dtype, ReduceOp op) {
    const int64_t n = 3 * c.size + 5;  // deliberately not a multiple of the group size
    Tensor t = make_tensor(ctx.device, dtype, comm_input(c.rank, n));
    settle(ctx);
    all_reduce(c, ctx, t, op);
    std::vector<float> expect((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float acc = comm_value(0, i);
        for (int r = 1; r < c.size; r++)
            acc = op == ReduceOp::SUM ? acc + comm_value(r, i) : std::max(acc, comm_value(r, i));
        expect[i] = acc;
    }
    CHECK(bitwise_equal(tensor_to_host_f32(t), expect), "all_reduce %s %s on %d ranks",
          op == ReduceOp::SUM ? "SUM" : "MAX", dtype_name(dtype), c.size);
    tensor_free(t);
}

// A bf16 sum must be accumulated in fp32 and rounded once. Rank 0 holds 256, the others 1: in fp32 the
// sum is 256 + (t-1), rounded once to bf16 (spacing 2 at 256): 256 for t = 2, 260 for t = 4. Accumulating
// in bf16 instead loses every +1 (256 + 1 rounds back to 256) and gives 256 or 258, never 260, whatever the
// order; so with four ranks this check tells the two apart. (With two ranks one addition is one rounding
// either way.)
inline void check_bf16_sum_in_fp32(Comm& c, const Ctx& ctx) {
    const int64_t n = 4;
    std::vector<float> mine((size_t)n, c.rank == 0 ? 256.f : 1.f);
    Tensor t = make_tensor(ctx.device, DType::BF16, mine);
    settle(ctx);
    all_reduce(c, ctx, t, ReduceOp::SUM);
    float fp32_sum = 256.f + (float)(c.size - 1);
    std::vector<float> expect = round_bf16(std::vector<float>((size_t)n, fp32_sum));
    std::vector<float> got = tensor_to_host_f32(t);
    CHECK(bitwise_equal(got, expect), "bf16 all_reduce SUM on %d ranks: got %g, want %g (fp32 sum rounded once)",
          c.size, got[0], expect[0]);
    tensor_free(t);
}

// out[r·n .. (r+1)·n) = in of rank r; out of place, and in place (in = this rank's slot of out).
inline void check_all_gather(Comm& c, const Ctx& ctx, DType dtype, bool async) {
    const int64_t n = 5;
    std::vector<float> expect;
    for (int r = 0; r < c.size; r++) {
        auto v = comm_input(r, n);
        expect.insert(expect.end(), v.begin(), v.end());
    }
    Tensor in = make_tensor(ctx.device, dtype, comm_input(c.rank, n));
    Tensor out = tensor_alloc(ctx.device, dtype, c.size * n);
    tensor_fill_f32(out, -99.f);
    settle(ctx);
    if (async) {
        all_gather_async(c, ctx, out, in);
        comm_wait(c, ctx);
    } else {
        all_gather(c, ctx, out, in);
    }
    CHECK(bitwise_equal(tensor_to_host_f32(out), expect), "all_gather%s %s out of place on %d ranks",
          async ? "_async" : "", dtype_name(dtype), c.size);

    tensor_fill_f32(out, -99.f);
    Tensor slot = out.slice(c.rank * n, n);
    tensor_from_host_f32(slot, comm_input(c.rank, n).data());
    settle(ctx);
    all_gather(c, ctx, out, slot);
    CHECK(bitwise_equal(tensor_to_host_f32(out), expect), "all_gather %s in place on %d ranks", dtype_name(dtype),
          c.size);
    tensor_free(in);
    tensor_free(out);
}

// out = Σ over ranks of in[rank·n .. (rank+1)·n); out of place, and in place (out = this rank's slot of in).
inline void check_reduce_scatter(Comm& c, const Ctx& ctx, DType dtype) {
    const int64_t n = 6, full = c.size * n;
    std::vector<float> expect((size_t)n, 0.f);
    for (int r = 0; r < c.size; r++)
        for (int64_t i = 0; i < n; i++) expect[i] += comm_value(r, c.rank * n + i);
    Tensor in = make_tensor(ctx.device, dtype, comm_input(c.rank, full));
    Tensor out = tensor_alloc(ctx.device, dtype, n);
    tensor_fill_f32(out, -99.f);
    settle(ctx);
    reduce_scatter(c, ctx, out, in);
    CHECK(bitwise_equal(tensor_to_host_f32(out), expect), "reduce_scatter %s out of place on %d ranks",
          dtype_name(dtype), c.size);
    // The input must be left alone by an out-of-place reduce-scatter.
    CHECK(bitwise_equal(tensor_to_host_f32(in), comm_input(c.rank, full)), "reduce_scatter modified its input");

    Tensor slot = in.slice(c.rank * n, n);
    reduce_scatter(c, ctx, slot, in);
    CHECK(bitwise_equal(tensor_to_host_f32(slot), expect), "reduce_scatter %s in place on %d ranks",
          dtype_name(dtype), c.size);
    tensor_free(in);
    tensor_free(out);
}

// Every rank ends with the root's buffer, for any dtype (broadcast moves bytes).
inline void check_broadcast(Comm& c, const Ctx& ctx, DType dtype) {
    const int64_t n = 7;
    const int root = c.size - 1;
    std::vector<float> mine((size_t)n), expect((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        mine[i] = (float)(c.rank * 10 + i);
        expect[i] = (float)(root * 10 + i);
    }
    Tensor t = make_tensor(ctx.device, dtype, mine);
    settle(ctx);
    broadcast(c, ctx, t, root);
    CHECK(bitwise_equal(tensor_to_host_f32(t), expect), "broadcast %s from rank %d on %d ranks", dtype_name(dtype),
          root, c.size);
    tensor_free(t);
}

// §4.2.2: a ring all-reduce is a reduce-scatter plus an all-gather, so sequence parallelism's pair moves
// the bytes of tensor parallelism's one all-reduce. The counters must say so.
inline void check_counters(Comm& c, const Ctx& ctx) {
    const int64_t m = 8, full = c.size * m;
    const int t = c.size;
    Tensor buf = make_tensor(ctx.device, DType::F32, comm_input(c.rank, full));
    Tensor shard = tensor_zeros(ctx.device, DType::F32, m);
    settle(ctx);

    c.counters.reset();
    all_reduce(c, ctx, buf, ReduceOp::SUM);
    CommCounters ar = c.counters;
    c.counters.reset();
    all_gather(c, ctx, buf, shard);
    reduce_scatter(c, ctx, shard, buf);
    CommCounters pair = c.counters;
    c.counters.reset();
    broadcast(c, ctx, buf, 0);
    CommCounters bc = c.counters;

    bool noop = c.size == 1 && !c.exercise_single_rank;
    uint64_t full_bytes = (uint64_t)full * 4;
    CHECK(ar.bytes[kAllReduce] == 2 * (uint64_t)(t - 1) * full_bytes / t, "all-reduce bytes %llu on %d ranks",
          (unsigned long long)ar.bytes[kAllReduce], t);
    CHECK(pair.bytes[kAllGather] == (uint64_t)(t - 1) * full_bytes / t, "all-gather bytes %llu",
          (unsigned long long)pair.bytes[kAllGather]);
    CHECK(pair.bytes[kReduceScatter] == (uint64_t)(t - 1) * full_bytes / t, "reduce-scatter bytes %llu",
          (unsigned long long)pair.bytes[kReduceScatter]);
    CHECK(pair.bytes[kAllGather] + pair.bytes[kReduceScatter] == ar.bytes[kAllReduce],
          "all-gather + reduce-scatter bytes (%llu) != all-reduce bytes (%llu)",
          (unsigned long long)(pair.bytes[kAllGather] + pair.bytes[kReduceScatter]),
          (unsigned long long)ar.bytes[kAllReduce]);
    CHECK(bc.bytes[kBroadcast] == (uint64_t)(t - 1) * full_bytes / t, "broadcast bytes %llu",
          (unsigned long long)bc.bytes[kBroadcast]);
    uint64_t want_calls = noop ? 0 : 1;
    CHECK(ar.calls[kAllReduce] == want_calls && pair.calls[kAllGather] == want_calls &&
              pair.calls[kReduceScatter] == want_calls && bc.calls[kBroadcast] == want_calls,
          "call counts (noop group: %d)", (int)noop);
    CHECK(ar.calls[kAllGather] == 0 && pair.calls[kAllReduce] == 0, "a collective counted under another kind");
    c.counters.reset();
    tensor_free(buf);
    tensor_free(shard);
}

// Everything above on one communicator and device.
inline void check_collectives(Comm& c, const Ctx& ctx) {
    for (DType dt : {DType::F32, DType::BF16}) {
        check_all_reduce(c, ctx, dt, ReduceOp::SUM);
        check_all_reduce(c, ctx, dt, ReduceOp::MAX);
        check_all_gather(c, ctx, dt, false);
        check_all_gather(c, ctx, dt, true);
        check_reduce_scatter(c, ctx, dt);
    }
    // NCCL may round a bf16 sum between ring steps (see collectives.cu); its rounding is only pinned down here for
    // groups of at most two.
    if (c.backend == CommBackend::MPI || c.size <= 2) check_bf16_sum_in_fp32(c, ctx);
    for (DType dt : {DType::F32, DType::BF16, DType::I32, DType::U8}) check_broadcast(c, ctx, dt);
    check_counters(c, ctx);
}
