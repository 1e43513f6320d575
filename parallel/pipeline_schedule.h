// pipeline_schedule.h — the order in which a pipeline stage runs the forward and backward passes of its
// micro-batches (paper §2 and §4.2.3; Narayanan et al. 2021 for 1F1B and the interleaved schedule).
//
// Pure host code: no MPI, no CUDA. A schedule is a list of ops for one rank; what a stage sends and receives
// follows from it (an op's input comes from the neighbouring stage), so the same list drives the trainer and
// a test that simulates every rank.
//
// Terms. p pipeline stages (ranks), M micro-batches per step, m model chunks per rank (interleaving; 1 for
// the plain schedules). Chunk c of rank r is virtual stage v = c·p + r of P = p·m: the model's layers are cut
// into P equal parts and virtual stage v holds part v. A micro-batch's forward runs v = 0, 1, …, P−1 (rank
// 0, 1, …, p−1, then rank 0 again for chunk 1, …) and its backward runs back from P−1 to 0.
//
//  AFAB ("all forward, all backward", GPipe): every forward, then every backward. Simple, and it holds all
//       M micro-batches' activations at once: the memory a pipeline should avoid.
//  1F1B (PipeDream-Flush, Megatron's default): rank r runs min(p − r − 1, M) warm-up forwards, then
//       alternates one forward and one backward, then drains the remaining backwards. A stage holds at most
//       p − r micro-batches in flight, so the first stage holds p micro-batches of L/p layers: L layers'
//       worth, whatever p is (§4.2.3).
//  Interleaved 1F1B: the same with m chunks per rank, micro-batches taken in groups of p through each chunk
//       in turn. The bubble shrinks by m; the first stage holds (p−1)·2 + (m−1)·p + 1 (micro-batch, chunk)
//       pairs of L/(p·m) layers each: L·(1 + (p−1)/(p·m)) layers' worth (§4.2.3). Needs M a multiple of p.
//
// Every schedule runs the backwards of one chunk in micro-batch order 0, 1, …, M−1 (FIFO), so each parameter
// accumulates its micro-batches' gradients in the order of a single-rank accumulation loop.
#pragma once
#include <string>
#include <vector>
#include "schedule_kinds.h"  // PipeSchedule (AFAB, OneFOneB, Interleaved, ...), its names, and PipeOp

// Why (p, M, m) cannot run `s`, in words naming the numbers; "" when it can. AFAB and 1F1B take m = 1;
// interleaving takes m >= 2 and M a multiple of p.
std::string pipe_schedule_problem(PipeSchedule s, int p, int M, int m);
// The ops of rank `rank` of p, in the order it runs them.
std::vector<PipeOp> pipe_schedule(PipeSchedule s, int p, int rank, int M, int m);
// The same ops cut into schedule units, what the executor runs between two exchanges (model/pipeline_step.cu):
// every op alone, except the interleaved steady state's (forward, backward) pairs. A unit's exchange receives
// the inputs of its ops and sends the outputs of the previous unit's ops: Megatron-LM's send_backward_recv_forward
// before a forward and send_forward_recv_backward before a backward.
// warmup >= 0 replaces pipe_warmup's count (the test that derives the warm-up counts tries others).
std::vector<std::vector<PipeOp>> pipe_units(PipeSchedule s, int p, int rank, int M, int m, int warmup = -1);

// What crosses a stage boundary for one op: a forward of virtual stage v > 0 receives the activation of
// boundary v − 1 (between v − 1 and v) from rank (v − 1) mod p and, when v < P − 1, sends its output over
// boundary v to rank (v + 1) mod p; a backward receives the gradient over boundary v from rank (v + 1) mod p
// (v < P − 1) and sends the gradient over boundary v − 1 to rank (v − 1) mod p (v > 0).
struct PipeMessage {
    bool gradient;   // backward direction
    int microbatch;
    int boundary;    // 0..P−2: between virtual stages boundary and boundary + 1
    int peer;        // the other rank
};
// false when the op receives (sends) nothing: the first virtual stage's forward, the last's backward (and
// conversely for sends).
bool pipe_op_receives(PipeSchedule s, const PipeOp& op, int p, int rank, int m, PipeMessage* msg);
bool pipe_op_sends(PipeSchedule s, const PipeOp& op, int p, int rank, int m, PipeMessage* msg);
// A message's name, the same on both sides: (micro-batch, boundary, direction) in one int (MPI tags go up to
// 32767 at least, hence the modulo; a tag only names a message, point_to_point.h).
int pipe_message_tag(const PipeMessage& msg, int p, int m);
// The number of forwards rank `rank` runs before its steady state (its warm-up); the steady state's first unit
// runs one more forward before the first backward.
int pipe_warmup(PipeSchedule s, int p, int rank, int M, int m);
// The most (micro-batch, chunk) pairs whose forward has run and backward has not, over the ops: what the
// stage holds at its peak, in units of one chunk's activations of one micro-batch.
int pipe_peak_in_flight(const std::vector<PipeOp>& ops);
// At the first op where the stage reaches that peak: how many of the pairs in flight belong to each chunk
// (m entries). What a stage's memory holds then: chunk c's layers, per_chunk[c] micro-batches each.
std::vector<int> pipe_in_flight_at_peak(const std::vector<PipeOp>& ops, int m);
// The ideal bubble b = (p − 1) / (m · M): a stage's idle time over its ideal (busy) time, when every forward
// and backward of a chunk takes the same time and communication is free. As a share of the whole step it is
// b / (1 + b) (the step is the busy time plus the idle time).
double pipe_ideal_bubble(int p, int M, int m);

// Beyond the paper: the schedules after these three are defined outside this file, which hands them over to
// this one hook wherever the schedule matters. The file that adds them defines it (function pointers, linked:
// nothing registers at start-up).
struct PipeScheduleExtension {
    std::string (*problem)(PipeSchedule s, int p, int M, int m);
    int (*warmup)(PipeSchedule s, int p, int rank, int M, int m);
    std::vector<std::vector<PipeOp>> (*units)(PipeSchedule s, int p, int rank, int M, int m, int warmup);
    int (*virtual_stage)(PipeSchedule s, int p, int rank, int chunk);  // where its virtual stages are
    int (*rank_of)(PipeSchedule s, int p, int v);
};
extern const PipeScheduleExtension pipe_schedule_extension;
