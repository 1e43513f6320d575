// pipeline_exchange_checks.h — a pipeline schedule's exchanges on a real communicator, without a model,
// shared by test_comm.cu (CPU tensors, MPI) and test_gpu_comm.cu (CUDA tensors, MPI staging or NCCL): each
// rank runs its schedule units as model/pipeline_step.cu does (one exchange per unit: this unit's receives
// with the previous unit's sends), and every message carries values computed from its tag, so the receiver
// can check it got the message it asked for. Under strict rules (MPI) or on NCCL this hangs, or the order
// check stops it, if the schedule's order were wrong.
#pragma once
#include "comm_checks.h"
#include "../../parallel/point_to_point.h"
#include "../../parallel/pipeline_schedule.h"

inline float pipeline_message_value(int tag, int64_t i) { return (float)((tag * 31 + i) % 251); }

// Schedule s on the c.size ranks of `c` (one stage each), M micro-batches, m chunks, messages of n floats.
inline void check_pipeline_exchanges(Comm& c, const Ctx& ctx, PipeSchedule s, int M, int m, int64_t n) {
    const int p = c.size;
    char what[96];
    snprintf(what, sizeof what, "%s p=%d M=%d m=%d on %s/%s", pipe_schedule_name(s), p, M, m, device_name(ctx.device),
             c.backend == CommBackend::NCCL ? "nccl" : c.rules.strict ? "mpi-strict" : "mpi");
    Tensor out = tensor_alloc(ctx.device, DType::F32, n);
    std::vector<float> host((size_t)n);
    int received = 0, wrong = 0, expected = 0;
    for (const std::vector<PipeOp>& unit : pipe_units(s, p, c.rank, M, m)) {
        std::vector<P2PMessage> recvs;
        for (const PipeOp& op : unit) {
            PipeMessage msg;
            if (!pipe_op_receives(s, op, p, c.rank, m, &msg)) continue;
            recvs.push_back(P2PMessage{tensor_alloc(ctx.device, DType::F32, n), msg.peer, pipe_message_tag(msg, p, m), what});
            expected++;
        }
        exchange(c, ctx, recvs, what);
        if (ctx.device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // NCCL delivers on ctx.stream
        for (P2PMessage& r : recvs) {
            const std::vector<float> v = tensor_to_host_f32(r.t);
            wrong += v[0] != pipeline_message_value(r.tag, 0) || v[(size_t)n - 1] != pipeline_message_value(r.tag, n - 1);
            received++;
            tensor_free(r.t);
        }
        for (const PipeOp& op : unit) {  // the unit's "compute": what it sends, queued for the next exchange
            PipeMessage msg;
            if (!pipe_op_sends(s, op, p, c.rank, m, &msg)) continue;
            const int tag = pipe_message_tag(msg, p, m);
            for (int64_t i = 0; i < n; i++) host[(size_t)i] = pipeline_message_value(tag, i);
            settle(ctx);  // the previous send_later's copy of `out` (on ctx.stream) is done
            tensor_from_host_f32(out, host.data());
            settle(ctx);
            send_later(c, ctx, out, msg.peer, tag, what);
        }
    }
    exchange(c, ctx, {}, what);
    if (ctx.device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    tensor_free(out);
    CHECK(received == expected && wrong == 0, "%s rank %d: %d of %d messages received, %d with the wrong contents", what, c.rank,
          received, expected, wrong);
}

// The three schedules at this group's size, with M < p, M = p and M > p where the schedule allows it.
inline void check_pipeline_schedules(Comm& c, const Ctx& ctx, int64_t n) {
    const int p = c.size;
    if (p < 2) return;
    for (int M : {p - 1, p, 2 * p + 1}) {
        if (M < 1) continue;
        check_pipeline_exchanges(c, ctx, PipeSchedule::AFAB, M, 1, n);
        check_pipeline_exchanges(c, ctx, PipeSchedule::OneFOneB, M, 1, n);
    }
    for (int M : {p, 2 * p}) check_pipeline_exchanges(c, ctx, PipeSchedule::Interleaved, M, 2, n);
}
