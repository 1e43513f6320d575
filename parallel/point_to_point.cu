// point_to_point.cu — sends and receives between two ranks over MPI or NCCL (see point_to_point.h): the
// pipeline's messages and ring attention's two-half exchange, under the communicator's rules.
//
// Reading order: send_later's copies; the order check's header; the MPI exchange (posted, then completed),
// the NCCL exchange and the watch that times it out; then the public exchange functions and the pipeline's
// host broadcast. Staging through host memory and waiting under --comm-timeout are the communicator's
// plumbing (comm.h, comm_detail).
#include "point_to_point.h"

#include <nccl.h>
#include <cstring>
#include <ctime>

using namespace comm_detail;

static ncclComm_t nccl_of(const Comm& c) { return (ncclComm_t)c.nccl; }

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
    auto mpi_tag = [&](int tag) { return c.rules.strict ? 0 : tag; };  // strict: one tag, matched in order
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
            f.out_hdr[i] = P2PHeader{p.tag, (int64_t)p.bytes, (int64_t)c.sent[(size_t)p.peer]++};
            MPI_CHECK(post(&f.out_hdr[i], (int)sizeof(P2PHeader), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
            f.reqs.push_back(q);
        }
        MPI_CHECK(post(p.host.ptr, mpi_count((int64_t)p.bytes), MPI_BYTE, p.peer, mpi_tag(p.tag), c.mpi, &q));
        f.reqs.push_back(q);
    }
}

static void mpi_exchange_complete(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    const std::vector<P2PMessage>& recvs = f.recvs;
    const bool check = c.rules.check_order;
    const int per = check ? 2 : 1;
    std::vector<MPI_Status> st;
    mpi_wait(c, f.reqs, st, [&](size_t q) {
        const size_t m = q / (size_t)per;
        const std::string& which = m < recvs.size() ? recvs[m].what : c.sends[m - recvs.size()].what;
        return which + " in the exchange " + f.what;
    });
    for (size_t i = 0; i < recvs.size(); i++) {
        const P2PMessage& r = recvs[i];
        if (check) check_header(c, f.in_hdr[i], r, c.received[(size_t)r.peer]++);
        int got = 0;
        MPI_CHECK(MPI_Get_count(&st[i * (size_t)per + (size_t)(per - 1)], MPI_BYTE, &got));
        if ((size_t)got != r.t.bytes())
            mm_fatal("comm: %s: got %d bytes, expected %zu (the stages disagree on the shapes)", r.what.c_str(), got, r.t.bytes());
        if (r.t.device != Device::CPU) host_to_device(ctx, r.t, c.recv_stage[i].ptr);
    }
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
            host_hdr[i] = P2PHeader{c.sends[i].tag, (int64_t)c.sends[i].bytes, (int64_t)c.sent[(size_t)c.sends[i].peer]++};
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
            check_header(c, host_hdr[c.sends.size() + i], recvs[i], c.received[(size_t)recvs[i].peer]++);
        tensor_free(hdr);
    }
}

// ---- the exchange, in two halves or in one ---------------------------------------------------------------------
void exchange_start(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
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
        nccl_exchange(c, s, recvs, what);
        if (f.stream) CUDA_CHECK(cudaEventRecord(c.done, s));
    } else {
        mpi_exchange_post(c, recvs);
    }
    c.counters.recv_wait_s += MPI_Wtime() - t0;
}

void exchange_finish(Comm& c, const Ctx& ctx) {
    Comm::InFlight& f = c.inflight;
    if (!f.active) mm_fatal("comm: exchange_finish without an exchange_start");
    const double t0 = MPI_Wtime();
    if (!f.recvs.empty() || !c.sends.empty()) {
        if (c.backend == CommBackend::NCCL) {
            if (f.stream) CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, c.done, 0));
        } else {
            mpi_exchange_complete(c, ctx);
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

void exchange(Comm& c, const Ctx& ctx, const std::vector<P2PMessage>& recvs, const std::string& what) {
    // The pipeline's exchanges run on ctx.stream itself (the next op needs what arrives at once).
    Ctx same = ctx;
    same.comm_stream = nullptr;
    exchange_start(c, same, recvs, what);
    exchange_finish(c, same);
}

// ---- the pipeline's loss: host bytes from the last stage to every stage ----------------------------------------
// NCCL: the previous exchange's end is watched first, so that a stage stuck there is reported as such.
void broadcast_host(Comm& c, void* data, int bytes, int root, const std::string& what) {
    if (c.size == 1) return;
    if (c.backend == CommBackend::NCCL) nccl_watch(c);
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(data, bytes, MPI_BYTE, root, c.mpi, &req));
    std::vector<MPI_Request> reqs{req};
    std::vector<MPI_Status> st;
    mpi_wait(c, reqs, st, [&](size_t) { return what + " from rank " + std::to_string(root); });
}

