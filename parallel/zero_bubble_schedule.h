// zero_bubble_schedule.h — the zero-bubble pipeline schedules ZB-H1 and ZB-H2 (Qi, Wan, Huang, Lin, "Zero Bubble
// Pipeline Parallelism", ICLR 2024, arXiv 2401.10241): beyond the paper this project reproduces, so apart from
// pipeline_schedule.cu, which knows them only as the schedules past its three and hands them over to the hook
// this file defines (pipe_schedule_extension, pipeline_schedule.h): their problems, warm-ups, units and ZB-V's
// placement of the virtual stages. Their enum values, names and the W op's kind: schedule_kinds.h.
//
// Each backward splits in two. B is the gradient of the stage's input: the stage before waits for it, so it
// stays on the critical path. W is the gradient of the weights (dW = dYᵀ·X of every linear layer): nobody waits
// for it, so it can run later, where the stage would otherwise sit idle. W needs X and dY, kept until it runs
// (layers/weight_grad_queue.h).
//
// Stage r of p, M micro-batches: w warm-up forwards, then steady units F(w+k), B(k) — each followed by
// W(k − d) once k ≥ d, where d is the stage's W lag — then the cool-down B's, each followed by the next pending
// W, and the last W's.
//  ZB-H1: w = p − 1 − r (1F1B's), d = r. The first stage still holds p micro-batches (F run, W not), as 1F1B;
//         the later stages hold their W's back so that, in the cool-down, the W's fill the time 1F1B spends
//         waiting for gradients. Bubble (p − 1)(T_F + T_B − T_W) against 1F1B's (p − 1)(T_F + T_B + T_W).
//  ZB-H2: w = 2(p − 1 − r), d = 2r. Extra warm-up forwards fill the start as well: no stage waits in the middle
//         of the step; what is left is the start of the later stages and the end of the earlier ones (a
//         parallelogram), which only an optimizer step that does not synchronize would overlap with the next
//         step (the paper's post-validation; not done here: the gradient norm and the clip synchronize). The
//         first stage holds 2p − 1 micro-batches' activations.
//  ZB-V: two model chunks per rank in a V (the paper's §6 schedule): the 2p virtual stages go down the ranks and
//         back up, rank r holding v = r (chunk 0) and v = 2p − 1 − r (chunk 1), so rank 0 holds the first and the
//         last virtual stage (the embedding and the loss) and rank p − 1 the turn, whose message stays on the
//         rank. Each chunk holds L/(2p) layers. Order of rank r: min(2(p − r) − 1, M) forwards of chunk 0; r
//         times a forward of chunk 1 and one of chunk 0; p − r times a forward and a B of chunk 1; then, until
//         every B has run, F0 B0 F1 B1 (each while there is one left); after each B its W once more than r are
//         pending (lag r, as ZB-H1's), the rest at the end. The first stage then holds 2p chunk-micro-batches
//         at its peak, 2p · L/(2p) = L layers' worth: 1F1B's (once M >= 2p), with half the bubble of ZB-H1 at equal
//         op times (recompute/formulas.h); twice 1F1B's point-to-point volume (each micro-batch crosses 2p − 2
//         boundaries between ranks, and one on rank p − 1).
// (All counts are capped by M.) Within a chunk the B's and the W's each run in micro-batch order, so every
// weight gradient accumulates its micro-batches in a single rank's order.
//
// Units (what the executor runs between exchanges where an exchange completes as a whole: NCCL's grouped
// exchanges, model/pipeline_step.cu): under ZB-H1 each F and each B alone, as in 1F1B; under ZB-H2 each steady
// (F, B) pair in one unit. (ZB-H2's extra warm-up forwards put a stage's sends ahead of its neighbour's
// receives; a whole exchange completes only when its sends are matched too, so with every op alone the stage
// would wait on the sends of its forwards before each B; the pairs still make its first stage wait for a B's
// gradient before the F: bench/PERF_NOTES.md.) Each W goes to the front of the unit after it, run while that
// unit's exchange is in flight (exchange_start ... exchange_finish, parallel/point_to_point.h); W's after the
// last B form a last unit of their own. Elsewhere the executor posts one exchange per op and waits only for the
// op's receive, so the units do not matter. W's exchange nothing: test_pipeline_schedule simulates the F's and
// B's exchanges under NCCL's rules, both ways.
#pragma once
#include <string>
#include <vector>
#include "pipeline_schedule.h"

inline bool is_zero_bubble(PipeSchedule s) {
    return s == PipeSchedule::ZeroBubbleH1 || s == PipeSchedule::ZeroBubbleH2 || s == PipeSchedule::ZeroBubbleV;
}
// ZB-V's placement: virtual stage v is on rank v (v < p) or 2p − 1 − v; elsewhere (v_shape false) on v mod p.
// (pipe_op_receives / pipe_op_sends take it from the hook; pipeline_simulation.cu and the tests from here.)
inline bool pipe_v_shape(PipeSchedule s) { return s == PipeSchedule::ZeroBubbleV; }
inline int pipe_virtual_stage(int p, int rank, int chunk, bool v_shape) {
    return v_shape && chunk == 1 ? 2 * p - 1 - rank : chunk * p + rank;
}
inline int pipe_rank_of(int p, int v, bool v_shape) { return v_shape && v >= p ? 2 * p - 1 - v : v % p; }
// Why these schedules cannot run m chunks per stage ("" when they can: ZB-V takes 2, the others 1).
std::string zero_bubble_problem(PipeSchedule s, int m);
// The stage's W lag d (above).
int zero_bubble_weight_lag(PipeSchedule s, int p, int rank);
// The forwards before the stage's first B (pipe_warmup for these schedules).
int zero_bubble_warmup(PipeSchedule s, int p, int rank, int M);
// The ops of ZB-H1 / ZB-H2 / ZB-V in units, warm-up count `warmup` (pipe_warmup's unless a test tries another;
// ZB-V's order takes none).
std::vector<std::vector<PipeOp>> zero_bubble_units(PipeSchedule s, int p, int rank, int M, int warmup);
// The moment a zero-bubble stage holds the most: the first op after which the most (micro-batch, chunk) pairs
// have run their F and not their W (each holds either its saved activations or its W inputs; the executor marks
// the memory report's snapshot there). held = saved + pending: saved, B not run yet; pending, B run, W not;
// saved_per_chunk: saved by chunk (m entries).
struct ZeroBubblePeak {
    int held = 0, saved = 0, pending = 0;
    std::vector<int> saved_per_chunk;
};
ZeroBubblePeak zero_bubble_peak(const std::vector<PipeOp>& ops, int m = 1);
