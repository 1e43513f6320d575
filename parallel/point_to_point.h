// point_to_point.h — messages between two ranks of a communicator (comm.h): what crosses a pipeline stage
// boundary (model/pipeline_step.cu), ring attention's K and V (parallel/context_parallel.cu) and the
// pipeline's loss; with the rules that keep them from deadlocking (NCCL's, checked on CPUs by
// --comm mpi-strict), the order check, and the exchange's timeout.
// `peer` and the ranks are those of the group (pp_comm: rank = pipeline stage).
//
// NCCL's rules, which both backends follow:
//  1. NCCL has no tags: between two ranks, the k-th message one sends is the k-th message the other
//     receives. Every directed pair of stages must therefore issue its sends and its receives in the same
//     order (test_pipeline_schedule checks it for every schedule). `tag` only names a message for the order
//     check and error messages; the MPI backend uses it as the MPI tag unless the rules are strict.
//  2. An NCCL send may wait, on the GPU, until the peer has posted the matching receive (always for
//     messages beyond NCCL's internal buffers), and a communicator runs its operations one at a time in
//     issue order. So a send followed by a receive, ungrouped, deadlocks as soon as two stages each send
//     first. Sends and receives that must progress together are issued as one exchange (an NCCL group),
//     which completes as a unit.
//
// The communicator's rules (CommRules, comm.h) as they apply here:
//  strict:      the MPI backend with NCCL's semantics: an exchange completes only when every one of its
//               messages has been matched by the peer (MPI_Issend), and every message travels with one tag,
//               so messages between two ranks match in issue order. A CPU run then deadlocks exactly where
//               NCCL would, instead of getting by on MPI's buffering.
//  timeout_s:   MPI: every wait polls against the deadline, and the message names the message waited for and
//               its peer. NCCL: each exchange's end is watched before the next is issued (ncclCommAbort, then
//               MPI_Abort).
//  check_order: every message is preceded by a small header (P2PHeader: tag, bytes, sequence number per
//               peer), checked on arrival: a stage whose k-th message to a peer is not the peer's k-th
//               expected one stops with both descriptions (NCCL would silently deliver it into the wrong
//               buffer). On NCCL it reads the headers back, a host synchronization per exchange.
#pragma once
#include "comm.h"

// send_later copies `t` (any dtype) and queues it; the next exchange sends it. exchange posts the queued
// sends and the receives `recvs` (P2PMessage, comm.h) together and returns when all of them are done (NCCL:
// ctx.stream waits; the sends' bytes may be reused after that). The pipeline issues one exchange per schedule
// unit: the previous unit's sends with this unit's receives (model/pipeline_step.cu says why that order
// cannot deadlock). `what` says what the caller is doing, for the timeout message.
void send_later(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag, const std::string& what);
void exchange(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what);
// The same exchange in two halves, so that work runs while its messages travel (ring attention's K and V,
// parallel/context_parallel.cu): exchange_start posts the queued sends and the receives `recvs` and returns;
// exchange_finish waits for them (afterwards, as after exchange). In between, the caller leaves the receive
// buffers alone and starts no other exchange, nor an all_gather_async (collectives.h), on c. NCCL: the group
// runs on ctx.comm_stream (when the context has one) after the work ctx.stream has queued so far, and
// exchange_finish makes ctx.stream wait for it. MPI: the requests are posted at once; MPI moves the bytes as
// it progresses, at the latest inside the wait.
void exchange_start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what);
void exchange_finish(Comm& c, const Ctx& ctx);
// The pipeline's exchange (model/pipeline_step.cu), NCCL's rules kept, that waits only for what the next op
// receives. An exchange that completes as a unit makes an op wait for the previous op's sends too, i.e. for the
// neighbour to reach the op that receives them: ZB-H2's first stage waited a whole B per steady unit that way
// (bench/PERF_NOTES.md, "Zero-bubble schedules"). Here:
//  - exchange_post posts the queued sends (send_later) and the receives `recvs` and returns at once, with one
//    id per receive; the caller leaves the receive buffers alone until it has waited for them;
//  - receive_wait waits for one posted receive: afterwards its tensor holds the message;
//  - a posted send completes when its peer receives it: each exchange_post reaps those done (their copies are
//    reused), sends_wait waits for all that are left.
// Under the strict rules (--comm mpi-strict) the sends are synchronous (MPI_Issend) and every message between
// two ranks travels with one tag, so the receives of a directed pair match its sends in issue order, and a send
// is done only once received: what NCCL allows for a pair of ranks whose two directions do not wait for each
// other (a communicator per direction). On NCCL this project still issues one group per exchange on ctx.stream
// (exchange's semantics: the GPU waits for the sends too); the communicator per direction is not built.
std::vector<int64_t> exchange_post(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what);
void receive_wait(Comm& c, const Ctx& ctx, int64_t id);
void sends_wait(Comm& c, const Ctx& ctx);
// The exchanges as a logical record (the pipeline's bubble test replays it: model/pipeline_timeline.h): while a
// record is set on c, every message posted and every completion waited for is appended to it in program order,
// with no time. A send is named by its peer and tag, as its receive is on the other side. What counts as waited
// for is what the call waits for by its rules, not what happened to be done already: exchange and exchange_finish
// wait for each of their receives and sends (a whole exchange), receive_wait for its receive, sends_wait for every
// send posted since the last sends_wait (whether or not MPI has already reaped it); exchange_post waits for none.
// On NCCL, exchange_post is a whole exchange, and its record says so.
struct P2PEvent {
    enum Kind { PostReceive, PostSend, WaitReceive, WaitSend } kind;
    int peer = -1, tag = 0;
};
void p2p_record(Comm& c, std::vector<P2PEvent>* to);  // nullptr: stop recording on c
// A sum of a few host values over a group, by messages: each rank sends its values to every other one and adds
// all of them in rank order, so every rank gets the same bits at any group size, and a rank's part, once posted,
// needs nothing more from it (a few bytes go eagerly: the others complete the sum without this rank calling MPI
// again, which an MPI all-reduce in flight would need). Its own communicator (comm: a duplicate; no other
// message may use it). host_sum_post starts it; host_sum_wait completes it into sums (n values) under the timeout.
struct HostSum {
    std::vector<double> mine, all;
    std::vector<MPI_Request> reqs;
    int n = 0;
};
MPI_Comm side_comm(Comm& c);  // c's duplicate (Comm::side), made on first use: every rank of c calls it first together
void host_sum_post(MPI_Comm comm, const double* values, int n, HostSum* s);
void host_sum_wait(MPI_Comm comm, HostSum* s, double* sums, double timeout_s, const std::string& what);
// Bytes of host memory `bytes` from rank `root` to every rank of the group, under the communicator's rules
// (timeout): the pipeline's loss, which the last stage computes.
void broadcast_host(Comm& c, void* data, int bytes, int root, const std::string& what);
