// point_to_point.cu — sends and receives between two ranks over MPI or NCCL (see point_to_point.h): the
// pipeline's messages and ring attention's two-half exchange, under the communicator's rules.
//
// Reading order: send_later's copies; the order check's header; the MPI exchange (posted, then completed),
// the NCCL exchange and the watch that times it out; then the public exchange functions and the pipeline's
// host broadcast. Staging through host memory and waiting under --comm-timeout are the communicator's
// plumbing (comm.h, comm_detail).
#include "point_to_point.h"

#include <nccl.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <utility>
#include "../layers/trace.h"

using namespace comm_detail;

static ncclComm_t nccl_of(const Comm& c) { return (ncclComm_t)c.nccl; }
// A message's channel between two ranks (Comm::channels): one, or with two its tag's lowest bit (the pipeline's
// tags put the direction there, pipe_message_tag: activations 0, gradients 1). Messages of one channel match in
// issue order (strict: the channel is the MPI tag); the order check counts each (peer, channel) apart.
static int channel_of(const Comm& c, int tag) { return c.channels > 1 ? tag & 1 : 0; }
static size_t channel(const Comm& c, int peer, int tag) { return (size_t)peer * 2 + (size_t)channel_of(c, tag); }

// ---- the logical record (p2p_record) ---------------------------------------------------------------------------
// Per communicator: where the events go, and the sends posted since the last sends_wait (what it waits for).
struct P2PRecorder {
    std::vector<P2PEvent>* to = nullptr;
    std::vector<P2PEvent> unwaited_sends;
};
static std::map<const Comm*, P2PRecorder> g_recorders;
static P2PRecorder* recorder(const Comm& c) {
    auto it = g_recorders.find(&c);
    return it == g_recorders.end() ? nullptr : &it->second;
}
void p2p_record(Comm& c, std::vector<P2PEvent>* to) {
    if (to) g_recorders[&c] = P2PRecorder{to, {}};
    else g_recorders.erase(&c);
}
static void record(const Comm& c, P2PEvent::Kind kind, int peer, int tag) {
    P2PRecorder* r = recorder(c);
    if (!r) return;
    r->to->push_back(P2PEvent{kind, peer, tag});
    if (kind == P2PEvent::PostSend) r->unwaited_sends.push_back(P2PEvent{P2PEvent::WaitSend, peer, tag});
}

// ---- send_later: a copy of the tensor, queued -----------------------------------------------------------------
// send_later copies the tensor into a buffer of its own (taken from spare_sends when one is big enough) and
// queues it; exchange posts the queued sends and the given receives together, then waits for all of them.
// Tensors cross between ranks of one job, so the bytes are moved as they are (bf16 stays bf16).
//
// Why grouping is needed (point_to_point.h, rule 2), and why one stream: NCCL runs a communicator's operations one
// at a time in issue order whatever stream they are issued on, so a separate send stream buys no overlap
// between a stage's sends and receives; and pipeline sends on a stream of their own would run beside the
// other communicators' collectives on ctx.stream, which NCCL warns can deadlock (two communicators' kernels
// each waiting for the other's peers). So everything goes on ctx.stream, in program order.
static Comm::PendingSend take_send_buffer(Comm& c, size_t bytes, bool device) {
    for (size_t i = 0; i < c.spare_sends.size(); i++) {
        Comm::PendingSend& p = c.spare_sends[i];
        if ((device ? p.device_bytes : p.host.bytes) >= bytes) {
            Comm::PendingSend got = p;
            c.spare_sends.erase(c.spare_sends.begin() + (long)i);
            return got;
        }
    }
    Comm::PendingSend p;
    if (device) {
        CUDA_CHECK(cudaMalloc(&p.device, bytes));
        p.device_bytes = bytes;
    } else {
        host_buffer(c, p.host, bytes, false);
    }
    return p;
}

static void check_peer(const Comm& c, int peer, const char* what) {
    if (peer < 0 || peer >= c.size || peer == c.rank) mm_fatal("comm: %s rank %d of a group of %d", what, peer, c.size);
}

void send_later(Comm& c, const Ctx& ctx, Tensor t, int peer, int tag, const std::string& what) {
    check_tensor(c, ctx, t, "send_later");
    check_peer(c, peer, "send_later to");
    const size_t bytes = t.bytes();
    Comm::PendingSend p = take_send_buffer(c, bytes, c.backend == CommBackend::NCCL);
    if (c.backend == CommBackend::NCCL) CUDA_CHECK(cudaMemcpyAsync(p.device, t.data, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
    else if (t.device == Device::CPU) memcpy(p.host.ptr, t.data, bytes);
    else device_to_host(ctx, p.host.ptr, t);
    p.bytes = bytes;
    p.peer = peer;
    p.tag = tag;
    p.what = what;
    c.sends.push_back(p);
    c.counters.p2p_sends += 1;
    c.counters.p2p_bytes += bytes;
}

// ---- the order check (CommRules::check_order) ---------------------------------------------------------------
// The order check's header, sent before each message in the same exchange (so it matches in the same
// order as the message): the caller's tag, the byte count and the message's index among those from this
// rank to that peer. The receiver compares it with what it expects.
static void check_header(const Comm& c, const P2PHeader& got, const P2PMessage& want, uint64_t index) {
    if (got.tag == want.tag && got.bytes == (int64_t)want.t.bytes() && got.index == (int64_t)index) return;
    mm_fatal("comm: message order broken: rank %d expected %s (tag %d, %lld bytes, message %llu from rank %d) but rank %d "
             "sent tag %lld, %lld bytes as its message %lld; the two ranks issue their messages in different orders, and "
             "NCCL, which matches by order, would put it in the wrong buffer",
             c.rank, want.what.c_str(), want.tag, (long long)want.t.bytes(), (unsigned long long)index, want.peer, want.peer,
             (long long)got.tag, (long long)got.bytes, (long long)got.index);
}

// ---- MPI: posted, then completed (strict: MPI_Issend and one tag) ------------------------------------------
// MPI: every receive and send posted at once (MPI_Irecv, MPI_Isend or, strict, MPI_Issend), then one wait for
// all. Posting receives first lets MPI deliver straight into them.
// The exchange's requests are posted (mpi_exchange_post) and waited for (mpi_exchange_complete) apart, so that
// exchange_start can return in between; c.inflight keeps what the second half needs.
static void mpi_exchange_post(Comm& c, const std::vector<P2PMessage>& recvs) {
    Comm::InFlight& f = c.inflight;
    const bool check = c.rules.check_order;
    const int per = check ? 2 : 1;  // requests per message
    f.in_hdr.assign(recvs.size(), P2PHeader{});
    f.out_hdr.assign(c.sends.size(), P2PHeader{});
    f.reqs.clear();
    f.reqs.reserve((recvs.size() + c.sends.size()) * (size_t)per);
    if (c.recv_stage.size() < recvs.size()) c.recv_stage.resize(recvs.size());
    auto mpi_tag = [&](int tag) { return c.rules.strict ? channel_of(c, tag) : tag; };  // strict: a tag per channel, in order
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        void* dst = r.t.device == Device::CPU ? r.t.data : host_buffer(c, c.recv_stage[i], r.t.bytes(), true);
        MPI_Request q;
        if (check) {
            MPI_CHECK(MPI_Irecv(&f.in_hdr[i], (int)sizeof(P2PHeader), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &q));
            f.reqs.push_back(q);
        }
        MPI_CHECK(MPI_Irecv(dst, mpi_count((int64_t)r.t.bytes()), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &q));
        f.reqs.push_back(q);
    }
    for (size_t i = 0; i < c.sends.size(); i++) {
        Comm::PendingSend& p = c.sends[i];
        auto post = c.rules.strict ? MPI_Issend : MPI_Isend;
        MPI_Request q;
        if (check) {
            f.out_hdr[i] = P2PHeader{p.tag, (int64_t)p.bytes, (int64_t)c.sent[channel(c, p.peer, p.tag)]++};
            MPI_CHECK(post(&f.out_hdr[i], (int)sizeof(P2PHeader), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
            f.reqs.push_back(q);
        }
        MPI_CHECK(post(p.host.ptr, mpi_count((int64_t)p.bytes), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
        f.reqs.push_back(q);
    }
}

// Returns the seconds spent in the wait itself (the timeline's blocked time).
static double mpi_exchange_complete(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    const std::vector<P2PMessage>& recvs = f.recvs;
    const bool check = c.rules.check_order;
    const int per = check ? 2 : 1;
    std::vector<MPI_Status> st;
    const double t0 = MPI_Wtime();
    mpi_wait(c, f.reqs, st, [&](size_t q) {
        const size_t m = q / (size_t)per;
        const std::string& which = m < recvs.size() ? recvs[m].what : c.sends[m - recvs.size()].what;
        return which + " in the exchange " + f.what;
    });
    const double waited = MPI_Wtime() - t0;
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        if (check) check_header(c, f.in_hdr[i], r, c.received[channel(c, r.peer, r.tag)]++);
        int got = 0;
        MPI_CHECK(MPI_Get_count(&st[i * (size_t)per + (size_t)(per - 1)], MPI_BYTE, &got));
        if ((size_t)got != r.t.bytes())
            mm_fatal("comm: %s: got %d bytes, expected %zu (the stages disagree on the shapes)", r.what.c_str(), got, r.t.bytes());
        if (r.t.device != Device::CPU) host_to_device(ctx, r.t, c.recv_stage[i].ptr);
    }
    return waited;
}

// ---- NCCL: one group, and the timeout's watch ---------------------------------------------------------------
// NCCL: the exchange is one group on ctx.stream; the host returns at once. The timeout watches the previous
// exchange's end (event `exchanged`) before issuing the next, so the host runs at most one schedule unit
// ahead of the GPU, and a peer that never posts its side is reported here instead of hanging the stream.
static void nccl_watch(Comm& c) {
    if (c.rules.timeout_s <= 0 || c.exchanged_what.empty()) return;
    const double t0 = MPI_Wtime();
    for (;;) {
        cudaError_t e = cudaEventQuery(c.exchanged);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady)
            mm_fatal("CUDA error in cudaEventQuery(c.exchanged) at %s:%d (the exchange %s): %s", __FILE__, __LINE__,
                     c.exchanged_what.c_str(), cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(nccl_of(c), &async));
        if (async != ncclSuccess) mm_fatal("NCCL error during the exchange %s: %s", c.exchanged_what.c_str(), ncclGetErrorString(async));
        if (MPI_Wtime() - t0 > c.rules.timeout_s) {
            // Abort the communicator first, so that its kernels stop spinning, then every rank.
            NCCL_CHECK(ncclCommAbort(nccl_of(c)));
            c.nccl = nullptr;
            mm_fatal("comm timeout: rank %d of a group of %d waited %.1f s (--comm-timeout) for the exchange %s; stopping every rank",
                     c.rank, c.size, c.rules.timeout_s, c.exchanged_what.c_str());
        }
        const timespec pause{0, 50000};
        nanosleep(&pause, nullptr);
    }
    c.exchanged_what.clear();
}

static void nccl_exchange(Comm& c, cudaStream_t stream, const std::vector<P2PMessage>& recvs, const std::string& what) {
    nccl_watch(c);
    const bool check = c.rules.check_order;
    // The order check's headers: device copies of the headers, sent and received in the group before each
    // message; the received ones are read back (a host synchronization: debug builds only).
    Tensor hdr;
    std::vector<P2PHeader> host_hdr(c.sends.size() + recvs.size());
    if (check && !host_hdr.empty()) {
        for (size_t i = 0; i < c.sends.size(); i++)
            host_hdr[i] = P2PHeader{c.sends[i].tag, (int64_t)c.sends[i].bytes, (int64_t)c.sent[channel(c, c.sends[i].peer, c.sends[i].tag)]++};
        hdr = tensor_alloc(Device::CUDA, DType::U8, (int64_t)(host_hdr.size() * sizeof(P2PHeader)));
        CUDA_CHECK(cudaMemcpyAsync(hdr.data, host_hdr.data(), c.sends.size() * sizeof(P2PHeader), cudaMemcpyHostToDevice, stream));
    }
    P2PHeader* dev_hdr = (P2PHeader*)hdr.data;
    NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        if (check) NCCL_CHECK(ncclRecv(dev_hdr + c.sends.size() + i, sizeof(P2PHeader), ncclUint8, r.peer, nccl_of(c), stream));
        NCCL_CHECK(ncclRecv(r.t.data, r.t.bytes(), ncclUint8, r.peer, nccl_of(c), stream));
    }
    for (size_t i = 0; i < c.sends.size(); i++) {
        const Comm::PendingSend& p = c.sends[i];
        if (check) NCCL_CHECK(ncclSend(dev_hdr + i, sizeof(P2PHeader), ncclUint8, p.peer, nccl_of(c), stream));
        NCCL_CHECK(ncclSend(p.device, p.bytes, ncclUint8, p.peer, nccl_of(c), stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(c.exchanged, stream));
    // For the timeout's message: the exchange and every message in it (their peers).
    c.exchanged_what = what + " (";
    for (const P2PMessage& r : recvs) c.exchanged_what += r.what + "; ";
    for (const Comm::PendingSend& p : c.sends) c.exchanged_what += p.what + "; ";
    c.exchanged_what.replace(c.exchanged_what.size() - 2, 2, ")");
    if (check && !host_hdr.empty()) {
        nccl_watch(c);
        CUDA_CHECK(cudaMemcpyAsync(host_hdr.data(), hdr.data, host_hdr.size() * sizeof(P2PHeader), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < recvs.size(); i++)
            check_header(c, host_hdr[c.sends.size() + i], recvs[i], c.received[channel(c, recvs[i].peer, recvs[i].tag)]++);
        tensor_free(hdr);
    }
}

// ---- the timeline (--trace, layers/trace.h) ----------------------------------------------------------------------
// While a step is recorded, an exchange is one event on the communication thread ("exchange pp [recv grad 3.0;
// send act 4.0]"), or, in two halves, an "exchange_start" event (posting) and an "exchange_finish" event (the
// wait; on NCCL the group's time on its stream, between two events recorded there: nothing waits for them), and
// the pipeline's posted exchanges an "exchange_post" event (posting) and an "exchange_wait" per receive, with args:
//   what              the caller's words;
//   recv, send        a label per message: "act j.c" / "grad j.c" for a pipeline activation / gradient of
//                     micro-batch j (c: the chunk of the op that consumes it, for a receive; that produced it,
//                     for a send: model/pipeline_ops.cu's words), else the message's own words;
//   bytes_received, bytes_sent, peers (world ranks), group;
//   blocked_us        (MPI) the time spent in the final wait for the exchange's requests: the time this rank
//                     waited for its peers to post their side plus the transfer itself: MPI cannot tell the two
//                     apart (small messages move while the receiver waits; large ones only once both sides have
//                     posted). The rest of the event is posting the requests and staging copies.
// And a flow event per message: 's' on the sender when its exchange starts, 'f' on the receiver (bound to its
// exchange's event), with the same id: (sender, receiver, k) for the k-th message between these world ranks
// since recording started. Both sides count in issue order, the order in which messages between two ranks
// match (point_to_point.h, rule 1).
static std::string message_label(const std::string& what) {
    const std::pair<const char*, const char*> kinds[] = {{"the gradient of micro-batch ", "grad"},
                                                          {"the activation of micro-batch ", "act"}};
    for (const auto& k : kinds) {
        const size_t at = what.find(k.first);
        int j = 0, chunk = 0;
        if (at != std::string::npos && sscanf(what.c_str() + at + strlen(k.first), "%d (chunk %d)", &j, &chunk) == 2)
            return std::string(k.second) + " " + std::to_string(j) + "." + std::to_string(chunk);
    }
    return what;
}
static bool is_pipeline_label(const std::string& label) { return label.rfind("act ", 0) == 0 || label.rfind("grad ", 0) == 0; }

static int world_rank_of(const Comm& c, int peer) {
    MPI_Group mine, world;
    MPI_CHECK(MPI_Comm_group(c.mpi, &mine));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int w = -1;
    MPI_CHECK(MPI_Group_translate_ranks(mine, 1, &peer, world, &w));
    MPI_CHECK(MPI_Group_free(&mine));
    MPI_CHECK(MPI_Group_free(&world));
    return w;
}
static int my_world_rank() {
    int r = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
    return r;
}
// The k-th message from world rank `from` to world rank `to` while recording: its flow id.
static uint64_t flow_id(std::map<std::pair<int, int>, uint64_t>& count, int from, int to) {
    const uint64_t k = count[{from, to}]++;
    return ((uint64_t)from << 40) | ((uint64_t)to << 20) | (k & 0xFFFFF);
}
static std::map<std::pair<int, int>, uint64_t> g_flows_sent, g_flows_received;

static std::string json_list(const std::vector<std::string>& items) {
    std::string s = "[";
    for (size_t i = 0; i < items.size(); i++) s += (i ? "," : "") + trace_json_string(items[i]);
    return s + "]";
}

// At exchange_start, after posting: the sends' flows (NCCL: at the group's start on its stream), and for a split
// exchange its first event (the host's posting).
static void trace_exchange_posted(Comm& c, const std::string& what, double t0) {
    const int me = my_world_rank();
    std::vector<std::string> sends;
    const bool nccl = c.backend == CommBackend::NCCL;
    for (const Comm::PendingSend& p : c.sends) {
        sends.push_back(message_label(p.what));
        TracePoint at = nccl ? c.inflight.device0 : TracePoint{};
        if (!nccl) at.host_us = t0;
        trace_flow_at('s', flow_id(g_flows_sent, me, world_rank_of(c, p.peer)), TraceThread::Comm, at,
                      "\"send\":" + trace_json_string(sends.back()));
    }
    if (c.inflight.whole) return;
    const std::string& group = trace_group_name(&c);
    trace_event(nccl ? trace_host_thread() : TraceThread::Comm, "p2p", "exchange_start " + (group.empty() ? std::string("group") : group), t0,
                trace_now_us() - t0,
                "\"what\":" + trace_json_string(what) + ",\"send\":" + json_list(sends));
}

// At exchange_finish, after the wait: the exchange's (or its second half's) event and the receives' flows. On
// NCCL the event is the group's time on its stream (its two points), whole or split, and blocked_us is not
// measured (the host does not wait).
static void trace_exchange_done(Comm& c, double t_finish, double blocked_us) {
    const Comm::InFlight& f = c.inflight;
    const int me = my_world_rank();
    const bool nccl = c.backend == CommBackend::NCCL;
    TracePoint p0 = f.device0, p1 = f.device1;
    if (!nccl) p0 = TracePoint{}, p1 = TracePoint{}, p0.host_us = f.whole ? f.trace_t0 : t_finish, p1.host_us = trace_now_us();
    std::vector<std::string> recvs, sends, parts;
    std::vector<int> peers;
    bool short_names = true;
    uint64_t received = 0, sent = 0;
    auto peer = [&](int p) {
        const int w = world_rank_of(c, p);
        if (std::find(peers.begin(), peers.end(), w) == peers.end()) peers.push_back(w);
        return w;
    };
    for (const P2PMessage& r : f.recvs) {
        recvs.push_back(message_label(r.what));
        received += r.t.bytes();
        short_names = short_names && is_pipeline_label(recvs.back());
        parts.push_back("recv " + recvs.back());
        trace_flow_at('f', flow_id(g_flows_received, peer(r.peer), me), TraceThread::Comm, nccl ? p1 : p0,
                      "\"recv\":" + trace_json_string(recvs.back()));
    }
    for (const Comm::PendingSend& p : c.sends) {
        sends.push_back(message_label(p.what));
        sent += p.bytes;
        short_names = short_names && is_pipeline_label(sends.back());
        parts.push_back("send " + sends.back());
        peer(p.peer);
    }
    const std::string& group = trace_group_name(&c);
    std::string name = std::string(f.whole ? "exchange " : "exchange_finish ") + (group.empty() ? "group" : group);
    if (short_names && !parts.empty()) {
        name += " [";
        for (size_t i = 0; i < parts.size(); i++) name += (i ? "; " : "") + parts[i];
        name += "]";
    }
    std::string peer_list = "[";
    for (size_t i = 0; i < peers.size(); i++) peer_list += (i ? "," : "") + std::to_string(peers[i]);
    char nums[160];
    if (nccl) snprintf(nums, sizeof nums, ",\"bytes_received\":%llu,\"bytes_sent\":%llu,\"peers\":", (unsigned long long)received,
                       (unsigned long long)sent);
    else snprintf(nums, sizeof nums, ",\"blocked_us\":%.3f,\"bytes_received\":%llu,\"bytes_sent\":%llu,\"peers\":", blocked_us,
                  (unsigned long long)received, (unsigned long long)sent);
    trace_event_between(TraceThread::Comm, "p2p", name, p0, p1,
                "\"what\":" + trace_json_string(f.what) + ",\"group\":" + trace_json_string(group) + ",\"recv\":" +
                    json_list(recvs) + ",\"send\":" + json_list(sends) + nums + peer_list + "]");
}

// ---- the exchange, in two halves or in one ---------------------------------------------------------------------
// start and finish are the two halves; `whole`: exchange() runs both at once (one event on the timeline).
static void start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what, bool whole) {
    if (c.inflight.active)
        mm_fatal("comm: exchange_start (%s) while the exchange %s is still in flight: finish it first", what.c_str(),
                 c.inflight.what.c_str());
    for (const P2PMessage& r : recvs) {
        check_tensor(c, ctx, r.t, "exchange");
        check_peer(c, r.peer, "exchange: receive from");
    }
    Comm::InFlight& f = c.inflight;
    f.active = true;
    f.what = what;
    f.recvs = recvs;
    f.stream = false;
    f.whole = whole;
    f.traced = trace_recording() && !(recvs.empty() && c.sends.empty());
    if (f.traced) f.trace_t0 = trace_now_us();
    for (const P2PMessage& r : recvs) record(c, P2PEvent::PostReceive, r.peer, r.tag);
    for (const Comm::PendingSend& p : c.sends) record(c, P2PEvent::PostSend, p.peer, p.tag);
    const double t0 = MPI_Wtime();
    if (recvs.empty() && c.sends.empty()) return;
    if (c.backend == CommBackend::NCCL) {
        // On the communication stream, after what ctx.stream has queued so far (the send copies, the
        // receive buffers' last readers); exchange_finish makes ctx.stream wait for its end.
        f.stream = ctx.comm_stream != nullptr;
        cudaStream_t s = f.stream ? ctx.comm_stream : ctx.stream;
        if (f.stream) {
            CUDA_CHECK(cudaEventRecord(c.ready, ctx.stream));
            CUDA_CHECK(cudaStreamWaitEvent(s, c.ready, 0));
        }
        if (f.traced) f.device0 = trace_point(s);  // (--trace: the group's two ends on its stream, layers/trace.h)
        nccl_exchange(c, s, recvs, what);
        if (f.traced) f.device1 = trace_point(s);
        if (f.stream) CUDA_CHECK(cudaEventRecord(c.done, s));
    } else {
        mpi_exchange_post(c, recvs);
    }
    c.counters.recv_wait_s += MPI_Wtime() - t0;
    if (f.traced) trace_exchange_posted(c, what, f.trace_t0);
}

static void finish(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    if (!f.active) mm_fatal("comm: exchange_finish without an exchange_start");
    const double t0 = MPI_Wtime(), t_finish = f.traced ? trace_now_us() : 0;
    double blocked_us = 0;
    if (!f.recvs.empty() || !c.sends.empty()) {
        if (c.backend == CommBackend::NCCL) {
            if (f.stream) CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, c.done, 0));
        } else {
            blocked_us = 1e6 * mpi_exchange_complete(c, ctx);
        }
    }
    if (f.traced) trace_exchange_done(c, t_finish, blocked_us);
    f.traced = false;
    if (P2PRecorder* r = recorder(c)) {  // a whole exchange: each receive and each send waited for
        for (const P2PMessage& m : f.recvs) record(c, P2PEvent::WaitReceive, m.peer, m.tag);
        for (const Comm::PendingSend& p : c.sends) {
            record(c, P2PEvent::WaitSend, p.peer, p.tag);
            for (auto it = r->unwaited_sends.begin(); it != r->unwaited_sends.end(); ++it)
                if (it->peer == p.peer && it->tag == p.tag) {
                    r->unwaited_sends.erase(it);
                    break;
                }
        }
    }
    // The send copies are free again: MPI has completed them; NCCL reads them on its stream before ctx.stream
    // (which waits for it) can run any later send_later's copy into them.
    for (Comm::PendingSend& p : c.sends) c.spare_sends.push_back(p);
    c.sends.clear();
    f.active = false;
    f.recvs.clear();
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void exchange_start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    start(c, ctx, recvs, what, false);
}
void exchange_finish(Comm& c, const Ctx& ctx) { finish(c, ctx); }

void exchange(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    // The pipeline's exchanges run on ctx.stream itself (the next op needs what arrives at once).
    Ctx same = ctx;
    same.comm_stream = nullptr;
    start(c, same, recvs, what, true);
    finish(c, same);
}

// ---- the posted exchange: waits for receives only (point_to_point.h) ------------------------------------------
// MPI: each receive and each send is posted at once, as in mpi_exchange_post; a receive's requests are kept by id
// until receive_wait, a send's until MPI reports it done (reap_sends, at every post, or sends_wait). The order
// check's expected index is taken when the receive is posted: receives from one peer are posted in the order
// its sends are, whatever order they are waited for in. NCCL: one whole exchange (exchange_post's header says
// why), its receives marked done.
static void reap_sends(Comm& c, bool wait_all_of_them) {
    for (auto it = c.posted_sends.begin(); it != c.posted_sends.end();) {
        Comm::PostedSend& p = *it;
        int done = 1;
        if (wait_all_of_them) {
            std::vector<MPI_Request> reqs{p.reqs[0], p.reqs[1]};
            std::vector<MPI_Status> st;
            mpi_wait(c, reqs, st, [&](size_t) { return p.send.what + " (a posted send, waited for by sends_wait)"; });
        } else {
            MPI_CHECK(MPI_Testall(2, p.reqs, &done, MPI_STATUSES_IGNORE));
        }
        if (!done) {
            ++it;
            continue;
        }
        c.spare_sends.push_back(p.send);
        it = c.posted_sends.erase(it);
    }
}

static std::string trace_labels(const std::vector<std::string>& parts) {
    std::string s;
    for (size_t i = 0; i < parts.size(); i++) s += (i ? "; " : "") + parts[i];
    return s.empty() ? s : " [" + s + "]";
}

std::vector<int64_t> exchange_post(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    std::vector<int64_t> ids;
    if (c.backend == CommBackend::NCCL) {  // one group, completed as a unit on ctx.stream (the header says why)
        exchange(c, ctx, recvs, what);
        for (const P2PMessage& r : recvs) {
            Comm::PostedRecv& p = c.posted_recvs[c.next_recv_id];
            p.msg = r, p.done = true;
            ids.push_back(c.next_recv_id++);
        }
        return ids;
    }
    if (c.inflight.active) mm_fatal("comm: exchange_post (%s) while the exchange %s is in flight", what.c_str(), c.inflight.what.c_str());
    const double t0 = MPI_Wtime(), trace_t0 = trace_recording() ? trace_now_us() : 0;
    reap_sends(c, false);
    const bool check = c.rules.check_order;
    auto mpi_tag = [&](int tag) { return c.rules.strict ? channel_of(c, tag) : tag; };  // strict: a tag per channel, in order
    std::vector<std::string> labels;
    for (const P2PMessage& r : recvs) {
        check_tensor(c, ctx, r.t, "exchange_post");
        check_peer(c, r.peer, "exchange_post: receive from");
        Comm::PostedRecv& p = c.posted_recvs[c.next_recv_id];
        ids.push_back(c.next_recv_id++);
        p.msg = r;
        p.exchange = what;
        p.index = c.received[channel(c, r.peer, r.tag)]++;
        void* dst = r.t.data;
        if (r.t.device != Device::CPU) {
            if (!c.spare_stage.empty()) p.stage = c.spare_stage.back(), c.spare_stage.pop_back();
            dst = host_buffer(c, p.stage, r.t.bytes(), true);
        }
        if (check) MPI_CHECK(MPI_Irecv(&p.hdr, (int)sizeof(P2PHeader), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &p.reqs[0]));
        MPI_CHECK(MPI_Irecv(dst, mpi_count((int64_t)r.t.bytes()), MPI_BYTE, r.peer, mpi_tag(r.tag), c.mpi, &p.reqs[1]));
        labels.push_back("recv " + message_label(r.what));
        record(c, P2PEvent::PostReceive, r.peer, r.tag);
    }
    const int me = trace_recording() ? my_world_rank() : 0;
    for (Comm::PendingSend& send : c.sends) {
        c.posted_sends.emplace_back();
        Comm::PostedSend& p = c.posted_sends.back();
        p.send = send;
        auto post = c.rules.strict ? MPI_Issend : MPI_Isend;
        if (check) {
            p.hdr = P2PHeader{send.tag, (int64_t)send.bytes, (int64_t)c.sent[channel(c, send.peer, send.tag)]++};
            MPI_CHECK(post(&p.hdr, (int)sizeof(P2PHeader), MPI_BYTE, send.peer, mpi_tag(send.tag), c.mpi, &p.reqs[0]));
        }
        MPI_CHECK(post(send.host.ptr, mpi_count((int64_t)send.bytes), MPI_BYTE, send.peer, mpi_tag(send.tag), c.mpi, &p.reqs[1]));
        labels.push_back("send " + message_label(send.what));
        record(c, P2PEvent::PostSend, send.peer, send.tag);
        if (trace_recording())  // the message's flow starts here (its finish: the receiver's receive_wait)
            trace_flow('s', flow_id(g_flows_sent, me, world_rank_of(c, send.peer)), TraceThread::Comm, trace_t0,
                       "\"send\":" + trace_json_string(message_label(send.what)));
    }
    c.sends.clear();
    c.counters.recv_wait_s += MPI_Wtime() - t0;
    if (trace_recording() && !labels.empty()) {
        const std::string& group = trace_group_name(&c);
        trace_event(TraceThread::Comm, "p2p", "exchange_post " + (group.empty() ? std::string("group") : group) + trace_labels(labels),
                    trace_t0, trace_now_us() - trace_t0, "\"what\":" + trace_json_string(what));
    }
    return ids;
}

void receive_wait(Comm& c, const Ctx& ctx, int64_t id) {
    auto it = c.posted_recvs.find(id);
    if (it == c.posted_recvs.end()) mm_fatal("comm: receive_wait: no posted receive %lld (waited for twice?)", (long long)id);
    Comm::PostedRecv& p = it->second;
    if (p.done) return void(c.posted_recvs.erase(it));  // (NCCL: its whole exchange waited for it, and recorded so)
    record(c, P2PEvent::WaitReceive, p.msg.peer, p.msg.tag);
    const double t0 = MPI_Wtime(), trace_t0 = trace_recording() ? trace_now_us() : 0;
    std::vector<MPI_Request> reqs{p.reqs[0], p.reqs[1]};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return p.msg.what + " in the exchange " + p.exchange; });
    const double blocked_us = 1e6 * (MPI_Wtime() - t0);
    if (c.rules.check_order) check_header(c, p.hdr, p.msg, p.index);
    int got = 0;
    MPI_CHECK(MPI_Get_count(&st[1], MPI_BYTE, &got));
    if ((size_t)got != p.msg.t.bytes())
        mm_fatal("comm: %s: got %d bytes, expected %zu (the stages disagree on the shapes)", p.msg.what.c_str(), got, p.msg.t.bytes());
    if (p.msg.t.device != Device::CPU) {
        host_to_device(ctx, p.msg.t, p.stage.ptr);
        c.spare_stage.push_back(p.stage);
    }
    if (trace_recording()) {  // the flow ends where the wait ends: when the message was there
        const std::string label = message_label(p.msg.what), &group = trace_group_name(&c);
        trace_flow('f', flow_id(g_flows_received, world_rank_of(c, p.msg.peer), my_world_rank()), TraceThread::Comm,
                   trace_now_us(), "\"recv\":" + trace_json_string(label));
        char nums[96];
        snprintf(nums, sizeof nums, ",\"blocked_us\":%.3f,\"bytes_received\":%zu", blocked_us, p.msg.t.bytes());
        trace_event(TraceThread::Comm, "p2p", "exchange_wait " + (group.empty() ? std::string("group") : group) + " [recv " + label + "]",
                    trace_t0, trace_now_us() - trace_t0,
                    "\"what\":" + trace_json_string(p.exchange) + ",\"recv\":[" + trace_json_string(label) + "]" + nums);
    }
    c.posted_recvs.erase(it);
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void sends_wait(Comm& c, const Ctx& ctx) {
    (void)ctx;
    if (P2PRecorder* r = recorder(c)) {
        for (const P2PEvent& e : r->unwaited_sends) r->to->push_back(e);
        r->unwaited_sends.clear();
    }
    if (c.backend == CommBackend::MPI) reap_sends(c, true);
}

// ---- a sum of host values by messages (point_to_point.h) -----------------------------------------------------------
MPI_Comm side_comm(Comm& c) {
    if (c.side == MPI_COMM_NULL) MPI_CHECK(MPI_Comm_dup(c.mpi, &c.side));
    return c.side;
}

void host_sum_post(MPI_Comm comm, const double* values, int n, HostSum* s) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    s->n = n;
    s->mine.assign(values, values + n);
    s->all.assign((size_t)n * size, 0.0);
    std::copy(values, values + n, s->all.begin() + (long)rank * n);
    s->reqs.clear();
    for (int r = 0; r < size; r++) {
        if (r == rank) continue;
        MPI_Request q;
        MPI_CHECK(MPI_Irecv(s->all.data() + (size_t)r * n, n, MPI_DOUBLE, r, 7401, comm, &q));
        s->reqs.push_back(q);
        MPI_CHECK(MPI_Isend(s->mine.data(), n, MPI_DOUBLE, r, 7401, comm, &q));
        s->reqs.push_back(q);
    }
}

void host_sum_wait(MPI_Comm comm, HostSum* s, double* sums, double timeout_s, const std::string& what) {
    int size = 1;
    MPI_CHECK(MPI_Comm_size(comm, &size));
    for (MPI_Request q : s->reqs) comm_wait_request(q, timeout_s, what);
    s->reqs.clear();
    for (int i = 0; i < s->n; i++) {
        double total = 0;
        for (int r = 0; r < size; r++) total += s->all[(size_t)r * s->n + (size_t)i];  // rank order: the same bits everywhere
        sums[i] = total;
    }
}

// ---- the pipeline's loss: host bytes from the last stage to every stage ----------------------------------------
// NCCL: the previous exchange's end is watched first, so that a stage stuck there is reported as such.
void broadcast_host(Comm& c, void* data, int bytes, int root, const std::string& what) {
    if (c.size == 1) return;
    if (c.backend == CommBackend::NCCL) nccl_watch(c);
    const double t0 = trace_recording() ? trace_now_us() : 0;
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(data, bytes, MPI_BYTE, root, c.mpi, &req));
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return what + " from rank " + std::to_string(root); });
    if (trace_recording()) {  // on the timeline: one collective event (--trace)
        const std::string& group = trace_group_name(&c);
        trace_event(trace_host_thread(), "collective", "broadcast of " + what + " (host, " + (group.empty() ? "group" : group) + ")", t0,
                    trace_now_us() - t0, "\"group\":" + trace_json_string(group) + ",\"ranks\":" + std::to_string(c.size) +
                                             ",\"bytes\":" + std::to_string(bytes) + ",\"root\":" + std::to_string(root));
    }
}

