// collectives.h — the collectives tensor, sequence and data parallelism call: all-reduce, all-gather,
// reduce-scatter, and an all-gather that overlaps compute (sequence parallelism's backward re-gather), on a
// communicator (comm.h) over MPI or NCCL.
//
// Byte counters (Comm::counters) follow the ring algorithm's per-rank traffic, the model the paper reasons
// with (§4.2.2): for a tensor of n elements of d bytes on a group of t ranks, an all-reduce sends
// 2(t-1)/t·n·d bytes per rank, an all-gather or reduce-scatter (n = the full, gathered size) (t-1)/t·n·d.
// Hence "all-gather + reduce-scatter moves the same bytes as one all-reduce". A broadcast counts
// (t-1)/t·n·d: the per-rank average of a pipelined ring broadcast, where every rank but the last forwards
// the n·d bytes once.
#pragma once
#include "comm.h"

enum class ReduceOp { SUM, MAX };

// All collectives are in place or out of place on contiguous buffers of f32 or bf16 (broadcast, below: any
// dtype), on ctx's device and stream. They return when the result is usable on ctx's stream.
void all_reduce(Comm& c, const Ctx& ctx, Tensor buf, ReduceOp op = ReduceOp::SUM);
// out[r·in.n .. (r+1)·in.n) = in of rank r. out.n == size · in.n.
void all_gather(Comm& c, const Ctx& ctx, Tensor out, Tensor in);
// out = Σ over ranks of in[rank·out.n .. (rank+1)·out.n). in.n == size · out.n.
void reduce_scatter(Comm& c, const Ctx& ctx, Tensor out, Tensor in);

// The all-gather issued on a second stream (ctx.comm_stream) so that it overlaps work on ctx.stream
// (sequence parallelism's backward re-gather, paper §4.2.2). comm_wait makes ctx.stream wait for it.
// On CPU / MPI these simply run the collective synchronously. Refused while an exchange (exchange_start,
// point_to_point.h) is in flight on c: on NCCL the two share the communicator's events.
void all_gather_async(Comm& c, const Ctx& ctx, Tensor out, Tensor in);
void comm_wait(Comm& c, const Ctx& ctx);

// ---- used by tests only ----------------------------------------------------------------------------------
// buf of rank `root` to every rank of the group (any dtype: it moves bytes).
void broadcast(Comm& c, const Ctx& ctx, Tensor buf, int root);
