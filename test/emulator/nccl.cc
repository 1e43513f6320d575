// nccl.cc — the emulated NCCL (include/nccl.h) on MPI: one emulated GPU per MPI process. Test only.
//
// How an operation runs. The host call checks its arguments (a bad one returns ncclInvalidArgument, as NCCL
// does), takes the communicator's next ticket, and queues a piece of host work on its stream
// (emu::stream_enqueue, device.h). On the stream's worker that work waits for its ticket's turn (a
// communicator runs its operations one at a time in host issue order, as NCCL's internal stream does), posts
// nonblocking MPI requests on the communicator's own MPI communicator, and polls them to completion, watching
// for ncclCommAbort. So the stream's later work sees the result, and the host returns at once.
//
// Point to point, NCCL's rules as `--comm mpi-strict` has them (parallel/comm.h "point to point"): a send is
// MPI_Issend (it completes only once the matching receive is posted), every message has tag 0 (between two
// ranks the k-th send matches the k-th receive; NCCL has no tags), and an operation outside a group is a unit
// of its own: a rank whose ungrouped ncclSend comes before its ncclRecv waits in the send until the peer
// receives, and two ranks that both send first deadlock, as NCCL does beyond its internal buffers. Inside
// ncclGroupStart/End the calls are only collected; ncclGroupEnd queues each communicator's calls as one unit
// whose receives and sends are all posted before any is waited for.
//
// MPI from the streams' worker threads needs MPI_THREAD_MULTIPLE, while the project initializes MPI with a
// plain MPI_Init. This file therefore defines MPI_Init and MPI_Init_thread through MPI's standard profiling
// interface (PMPI_Init_thread asking for MPI_THREAD_MULTIPLE): the program's own MPI calls (its MPI backend,
// its host all-reduces) and the NCCL work on the workers may then run at the same time on any thread. A
// communication thread of our own would not be enough: the host thread keeps calling MPI too. The same
// wrapper makes a copy of MPI_COMM_WORLD (MPI_Comm_dup), the bootstrap communicator on which
// ncclCommInitRank's ranks find each other (every process calls MPI_Init, so the copy is safely collective).
//
// The unique id holds the creating process's rank in MPI_COMM_WORLD and a number unique to that process.
// ncclCommInitRank sends (rank, world rank) to the creator, which answers with the table of world ranks, and
// the ranks make their MPI communicator from it (MPI_Comm_create_group: collective over the members only).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device.h"
#include "nccl.h"

namespace {

MPI_Comm g_boot = MPI_COMM_NULL;  // a copy of MPI_COMM_WORLD, for ncclCommInitRank's rendezvous

void boot_setup(int provided) {
    if (provided < MPI_THREAD_MULTIPLE)
        emu::fatal("emulated NCCL: MPI gave thread level %d, not MPI_THREAD_MULTIPLE (%d): the NCCL operations run "
                   "on the streams' worker threads; use an MPI built with thread support (OpenMPI: --enable-mpi-thread-multiple)",
                   provided, MPI_THREAD_MULTIPLE);
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &g_boot) != MPI_SUCCESS) emu::fatal("emulated NCCL: MPI_Comm_dup(MPI_COMM_WORLD) failed");
}

}  // namespace

// ---- MPI initialization through the profiling interface ------------------------------------------------
extern "C" int MPI_Init(int* argc, char*** argv) {
    int provided = 0;
    const int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc == MPI_SUCCESS) boot_setup(provided);
    return rc;
}
extern "C" int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    (void)required;  // always the highest level: the emulated NCCL needs it whatever the program asks
    const int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, provided);
    if (rc == MPI_SUCCESS) boot_setup(*provided);
    return rc;
}

struct ncclComm {
    MPI_Comm mpi = MPI_COMM_NULL;  // this communicator's ranks, in NCCL rank order (null: one rank, no MPI)
    int rank = 0, size = 1;
    std::mutex mu;
    std::condition_variable cv;
    uint64_t issued = 0, completed = 0;  // tickets: operations run one at a time in issue order
    std::atomic<bool> aborted{false};
    std::atomic<int> async{ncclSuccess};
};

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (emulated NCCL: an MPI call failed, see stderr)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (emulated NCCL: see the message on stderr)";
        case ncclInvalidUsage: return "invalid usage (emulated NCCL: see the message on stderr)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

namespace {

ncclResult_t refuse(ncclResult_t r, const char* fmt, ...) {
    va_list a;
    va_start(a, fmt);
    std::fprintf(stderr, "emulated NCCL: ");
    std::vfprintf(stderr, fmt, a);
    std::fprintf(stderr, "\n");
    va_end(a);
    return r;
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}
// The MPI type a reduction runs in (bf16 is widened to float and rounded back once); MPI_DATATYPE_NULL: none.
MPI_Datatype reduce_type(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: return MPI_INT8_T;
        case ncclUint8: return MPI_UINT8_T;
        case ncclInt32: return MPI_INT32_T;
        case ncclUint32: return MPI_UINT32_T;
        case ncclInt64: return MPI_INT64_T;
        case ncclUint64: return MPI_UINT64_T;
        case ncclFloat32: case ncclBfloat16: return MPI_FLOAT;
        case ncclFloat64: return MPI_DOUBLE;
        default: return MPI_DATATYPE_NULL;  // fp16: this project never reduces it
    }
}
MPI_Op reduce_op(ncclRedOp_t op) {
    switch (op) {
        case ncclSum: case ncclAvg: return MPI_SUM;
        case ncclProd: return MPI_PROD;
        case ncclMax: return MPI_MAX;
        case ncclMin: return MPI_MIN;
        default: return MPI_OP_NULL;
    }
}

float bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f) {  // round to nearest even, as NCCL stores a bf16 sum
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ---- running on the stream --------------------------------------------------------------------------------
// Poll MPI requests to completion. An MPI error is the communicator's async error (ncclCommGetAsyncError);
// an abort cancels what can be cancelled and returns.
bool wait_all(ncclComm* c, std::vector<MPI_Request>& reqs, const char* what) {
    int spins = 0;
    for (;;) {
        int done = 0;
        const int rc = MPI_Testall((int)reqs.size(), reqs.data(), &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            std::fprintf(stderr, "emulated NCCL: %s on rank %d of %d failed in MPI: %s\n", what, c->rank, c->size, msg);
            c->async = ncclSystemError;
            return false;
        }
        if (done) return true;
        if (c->aborted) {
            for (MPI_Request& r : reqs)
                if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);  // point-to-point only; collectives are left behind
            return false;
        }
        if (++spins > 64) {
            const timespec pause{0, 20000};
            nanosleep(&pause, nullptr);
        }
    }
}

bool mpi_ok(ncclComm* c, int rc, const char* what) {
    if (rc == MPI_SUCCESS) return true;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    std::fprintf(stderr, "emulated NCCL: %s on rank %d of %d could not start in MPI: %s\n", what, c->rank, c->size, msg);
    c->async = ncclSystemError;
    return false;
}

// Queue `body` on the stream as the communicator's next operation.
void enqueue(ncclComm* c, cudaStream_t s, std::function<void()> body, const char* what) {
    uint64_t ticket;
    {
        std::lock_guard<std::mutex> l(c->mu);
        ticket = c->issued++;
    }
    emu::stream_enqueue(s, [c, ticket, body = std::move(body)] {
        {
            std::unique_lock<std::mutex> l(c->mu);
            c->cv.wait(l, [&] { return c->completed == ticket || c->aborted; });
        }
        // After an error or an abort the communicator is unusable (NCCL: the async error); its later
        // operations do nothing.
        if (!c->aborted && c->async == ncclSuccess) body();
        {
            std::lock_guard<std::mutex> l(c->mu);
            c->completed++;
        }
        c->cv.notify_all();
    }, what);
}

// ---- groups -----------------------------------------------------------------------------------------------
struct P2P {
    bool send;
    void* buf;
    size_t bytes;
    int peer;
};
struct Pending {  // one call collected between ncclGroupStart and ncclGroupEnd
    ncclComm* comm;
    cudaStream_t stream;
    bool is_p2p;
    P2P p2p;
    std::function<void()> collective;  // a collective's body (run in the unit, before its sends and receives)
    const char* what;
};
thread_local int g_group_depth = 0;
thread_local std::vector<Pending> g_group;

// EMU_NCCL_P2P_DELAY_MS (a test's environment): each unit of sends and receives starts this late, as over a
// slow link, so that a program reading a receive buffer without waiting for the exchange reads it before the
// data lands (test/emulator/trainer.cmake's negative control). 0 by default.
int p2p_delay_ms() {
    static const int ms = [] {
        const char* v = std::getenv("EMU_NCCL_P2P_DELAY_MS");
        return v ? std::atoi(v) : 0;
    }();
    return ms;
}

// A unit's sends and receives, all posted, then waited for together.
void run_p2p(ncclComm* c, const std::vector<P2P>& ops, const char* what) {
    if (ops.empty()) return;
    if (p2p_delay_ms() > 0) {
        const timespec pause{p2p_delay_ms() / 1000, (long)(p2p_delay_ms() % 1000) * 1000000L};
        nanosleep(&pause, nullptr);
    }
    if (c->mpi == MPI_COMM_NULL) {
        std::fprintf(stderr, "emulated NCCL: %s on a communicator made without MPI (ncclCommInitAll before MPI_Init)\n", what);
        c->async = ncclInvalidUsage;
        return;
    }
    std::vector<MPI_Request> reqs;
    for (const P2P& o : ops)  // receives first: a send to this rank itself then finds its receive posted
        if (!o.send) {
            reqs.push_back(MPI_REQUEST_NULL);
            if (!mpi_ok(c, MPI_Irecv(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, c->mpi, &reqs.back()), what)) return;
        }
    for (const P2P& o : ops)
        if (o.send) {
            reqs.push_back(MPI_REQUEST_NULL);
            if (!mpi_ok(c, MPI_Issend(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, c->mpi, &reqs.back()), what)) return;
        }
    wait_all(c, reqs, what);
}

// Either queue now (outside a group) or collect (inside one).
ncclResult_t submit(Pending p) {
    if (g_group_depth > 0) {
        g_group.push_back(std::move(p));
        return ncclSuccess;
    }
    ncclComm* c = p.comm;
    const char* what = p.what;
    if (p.is_p2p) {
        const P2P o = p.p2p;
        enqueue(c, p.stream, [c, o, what] { run_p2p(c, {o}, what); }, what);
    } else {
        enqueue(c, p.stream, std::move(p.collective), what);
    }
    return ncclSuccess;
}

ncclResult_t check_comm(ncclComm_t c, const char* what) {
    if (c == nullptr) return refuse(ncclInvalidArgument, "%s: the communicator is null", what);
    if (c->aborted) return refuse(ncclInvalidUsage, "%s: the communicator was aborted", what);
    return ncclSuccess;
}
ncclResult_t check_buffer(const void* p, size_t bytes, const char* what, const char* which) {
    if (bytes == 0) return ncclSuccess;
    if (p == nullptr) return refuse(ncclInvalidArgument, "%s: %s is null", what, which);
    if (bytes > (size_t)INT32_MAX) return refuse(ncclInvalidArgument, "%s: %zu bytes in one call (the emulator takes at most 2^31 - 1)", what, bytes);
    emu::check_device_range(p, bytes, what);
    return ncclSuccess;
}

#define NCCL_TRY(x)                           \
    do {                                      \
        ncclResult_t r_ = (x);                \
        if (r_ != ncclSuccess) return r_;     \
    } while (0)

std::atomic<int> g_id_serial{0};
constexpr char kIdMagic[8] = "emuNCCL";
struct IdBody {
    char magic[8];
    int creator_world;  // the creating process's rank in MPI_COMM_WORLD
    int serial;         // unique to the creating process: the rendezvous' MPI tag
};

}  // namespace

// ---- communicators ------------------------------------------------------------------------------------------
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (id == nullptr) return refuse(ncclInvalidArgument, "ncclGetUniqueId: the id pointer is null");
    if (g_boot == MPI_COMM_NULL)
        return refuse(ncclInvalidUsage, "ncclGetUniqueId: MPI is not initialized (the emulated NCCL runs on MPI: call MPI_Init first)");
    std::memset(id, 0, sizeof *id);
    IdBody b{};
    std::memcpy(b.magic, kIdMagic, sizeof b.magic);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.creator_world);
    int tag_ub_flag = 0, *tag_ub = nullptr;
    MPI_Comm_get_attr(g_boot, MPI_TAG_UB, &tag_ub, &tag_ub_flag);
    b.serial = ++g_id_serial;
    if (tag_ub_flag && b.serial > *tag_ub) return refuse(ncclInternalError, "ncclGetUniqueId: more ids than MPI tags");
    std::memcpy(id->internal, &b, sizeof b);
    std::memcpy(id->internal + sizeof b, emu::device_uuid(), 16);  // for the reader: whose GPU made it
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    const char* what = "ncclCommInitRank";
    if (comm == nullptr) return refuse(ncclInvalidArgument, "%s: the communicator pointer is null", what);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return refuse(ncclInvalidArgument, "%s: rank %d of %d ranks", what, rank, nranks);
    IdBody b;
    std::memcpy(&b, id.internal, sizeof b);
    if (std::memcmp(b.magic, kIdMagic, sizeof b.magic) != 0)
        return refuse(ncclInvalidArgument, "%s: the id was not made by ncclGetUniqueId (or did not reach this rank intact)", what);
    if (g_boot == MPI_COMM_NULL) return refuse(ncclInvalidUsage, "%s: MPI is not initialized (call MPI_Init first)", what);
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    // The rendezvous at the id's creator: every rank sends (rank, world rank), the creator answers the table.
    std::vector<int> table((size_t)nranks, -1);
    if (world == b.creator_world) {
        table[(size_t)rank] = world;
        for (int i = 1; i < nranks; i++) {
            int msg[3];
            MPI_Recv(msg, 3, MPI_INT, MPI_ANY_SOURCE, b.serial, g_boot, MPI_STATUS_IGNORE);
            if (msg[2] != nranks || msg[0] < 0 || msg[0] >= nranks || table[(size_t)msg[0]] != -1)
                emu::fatal("ncclCommInitRank: world rank %d joined the communicator of %d ranks as rank %d of %d, which "
                           "%s: every rank must pass the same nranks and a rank of its own",
                           msg[1], nranks, msg[0], msg[2], msg[2] != nranks ? "disagrees on the size" : "is taken or out of range");
            table[(size_t)msg[0]] = msg[1];
        }
        for (int i = 0; i < nranks; i++)
            if (table[(size_t)i] != world) MPI_Send(table.data(), nranks, MPI_INT, table[(size_t)i], b.serial, g_boot);
    } else {
        const int msg[3] = {rank, world, nranks};
        MPI_Send(msg, 3, MPI_INT, b.creator_world, b.serial, g_boot);
        MPI_Recv(table.data(), nranks, MPI_INT, b.creator_world, b.serial, g_boot, MPI_STATUS_IGNORE);
    }
    MPI_Group boot_group, group;
    MPI_Comm_group(g_boot, &boot_group);
    MPI_Group_incl(boot_group, nranks, table.data(), &group);
    ncclComm* c = new ncclComm();
    const int rc = MPI_Comm_create_group(g_boot, group, b.serial, &c->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&boot_group);
    if (rc != MPI_SUCCESS || c->mpi == MPI_COMM_NULL) {
        delete c;
        return refuse(ncclSystemError, "%s: MPI_Comm_create_group failed", what);
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);  // an MPI error becomes the async error
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    if (c->rank != rank) emu::fatal("%s: MPI ordered the ranks differently (%d, not %d)", what, c->rank, rank);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
    if (comms == nullptr) return refuse(ncclInvalidArgument, "ncclCommInitAll: the communicator array is null");
    if (ndev != 1)
        return refuse(ncclInvalidArgument, "ncclCommInitAll: %d devices in one process; the emulator has one GPU per process", ndev);
    if (devlist != nullptr && devlist[0] != 0)
        return refuse(ncclInvalidArgument, "ncclCommInitAll: device %d; the emulated process has device 0 only", devlist[0]);
    ncclComm* c = new ncclComm();
    if (g_boot != MPI_COMM_NULL) {
        MPI_Comm_dup(MPI_COMM_SELF, &c->mpi);
        MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    }
    comms[0] = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (c == nullptr) return ncclSuccess;
    {
        // The operations queued so far finish first (they read the communicator).
        std::unique_lock<std::mutex> l(c->mu);
        c->cv.wait(l, [&] { return c->completed == c->issued || c->aborted; });
    }
    if (c->aborted) return ncclSuccess;  // ncclCommAbort keeps it (see there)
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (c == nullptr) return ncclSuccess;
    // The running operation sees the flag in its poll and cancels its requests; the queued ones skip. The
    // object itself is never freed: work already on the streams still refers to it.
    c->aborted = true;
    c->cv.notify_all();
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* err) {
    if (c == nullptr || err == nullptr) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: a null argument");
    *err = (ncclResult_t)c->async.load();
    return ncclSuccess;
}

// ---- collectives ----------------------------------------------------------------------------------------------
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* what = "ncclAllReduce";
    NCCL_TRY(check_comm(comm, what));
    const MPI_Datatype mt = reduce_type(dt);
    const MPI_Op mo = reduce_op(op);
    if (mt == MPI_DATATYPE_NULL || mo == MPI_OP_NULL) return refuse(ncclInvalidArgument, "%s: datatype %d or op %d not supported", what, (int)dt, (int)op);
    const size_t bytes = count * type_size(dt);
    NCCL_TRY(check_buffer(sendbuff, bytes, what, "sendbuff"));
    NCCL_TRY(check_buffer(recvbuff, bytes, what, "recvbuff"));
    ncclComm* c = comm;
    auto body = [=] {
        if (count == 0) return;
        const bool bf = dt == ncclBfloat16;
        std::vector<float> wide;
        void* buf = recvbuff;
        if (bf) {  // widen, reduce in fp32, round once
            wide.resize(count);
            for (size_t i = 0; i < count; i++) wide[i] = bf16_to_f32(static_cast<const uint16_t*>(sendbuff)[i]);
            buf = wide.data();
        } else if (sendbuff != recvbuff) {
            std::memcpy(recvbuff, sendbuff, bytes);
        }
        if (c->size > 1) {
            std::vector<MPI_Request> req(1);
            if (!mpi_ok(c, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mt, mo, c->mpi, &req[0]), what) ||
                !wait_all(c, req, what))
                return;
        }
        if (op == ncclAvg) {
            if (mt == MPI_FLOAT)
                for (size_t i = 0; i < count; i++) static_cast<float*>(buf)[i] /= (float)c->size;
            else if (mt == MPI_DOUBLE)
                for (size_t i = 0; i < count; i++) static_cast<double*>(buf)[i] /= (double)c->size;
        }
        if (bf)
            for (size_t i = 0; i < count; i++) static_cast<uint16_t*>(recvbuff)[i] = f32_to_bf16(wide[i]);
    };
    return submit(Pending{c, stream, false, {}, body, what});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t stream) {
    const char* what = "ncclAllGather";
    NCCL_TRY(check_comm(comm, what));
    const size_t es = type_size(dt);
    if (es == 0) return refuse(ncclInvalidArgument, "%s: datatype %d", what, (int)dt);
    const size_t bytes = sendcount * es;
    NCCL_TRY(check_buffer(sendbuff, bytes, what, "sendbuff"));
    NCCL_TRY(check_buffer(recvbuff, bytes * (size_t)comm->size, what, "recvbuff"));
    ncclComm* c = comm;
    auto body = [=] {
        if (bytes == 0) return;
        char* mine = static_cast<char*>(recvbuff) + (size_t)c->rank * bytes;
        if (sendbuff != mine) std::memmove(mine, sendbuff, bytes);  // in place when sendbuff is the rank's slot
        if (c->size == 1) return;
        std::vector<MPI_Request> req(1);
        if (mpi_ok(c, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, recvbuff, (int)bytes, MPI_BYTE, c->mpi, &req[0]), what))
            wait_all(c, req, what);
    };
    return submit(Pending{c, stream, false, {}, body, what});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    const char* what = "ncclReduceScatter";
    NCCL_TRY(check_comm(comm, what));
    const MPI_Datatype mt = reduce_type(dt);
    const MPI_Op mo = reduce_op(op);
    if (mt == MPI_DATATYPE_NULL || mo == MPI_OP_NULL) return refuse(ncclInvalidArgument, "%s: datatype %d or op %d not supported", what, (int)dt, (int)op);
    const size_t es = type_size(dt), bytes = recvcount * es;
    NCCL_TRY(check_buffer(sendbuff, bytes * (size_t)comm->size, what, "sendbuff"));
    NCCL_TRY(check_buffer(recvbuff, bytes, what, "recvbuff"));
    if ((uint64_t)recvcount * (uint64_t)comm->size > (uint64_t)INT32_MAX)
        return refuse(ncclInvalidArgument, "%s: %zu elements in one call", what, recvcount * (size_t)comm->size);
    ncclComm* c = comm;
    auto body = [=] {
        if (recvcount == 0) return;
        const size_t total = recvcount * (size_t)c->size;
        const size_t wes = mt == MPI_FLOAT ? 4 : es;  // bf16 is reduced as fp32
        // A copy of the input first: recvbuff may be the rank's slot of sendbuff (in place).
        std::vector<unsigned char> in(total * wes), out(recvcount * wes);
        if (dt == ncclBfloat16)
            for (size_t i = 0; i < total; i++) reinterpret_cast<float*>(in.data())[i] = bf16_to_f32(static_cast<const uint16_t*>(sendbuff)[i]);
        else
            std::memcpy(in.data(), sendbuff, total * es);
        if (c->size > 1) {
            std::vector<MPI_Request> req(1);
            if (!mpi_ok(c, MPI_Ireduce_scatter_block(in.data(), out.data(), (int)recvcount, mt, mo, c->mpi, &req[0]), what) ||
                !wait_all(c, req, what))
                return;
        } else {
            std::memcpy(out.data(), in.data(), out.size());
        }
        if (op == ncclAvg) {
            if (mt == MPI_FLOAT)
                for (size_t i = 0; i < recvcount; i++) reinterpret_cast<float*>(out.data())[i] /= (float)c->size;
            else if (mt == MPI_DOUBLE)
                for (size_t i = 0; i < recvcount; i++) reinterpret_cast<double*>(out.data())[i] /= (double)c->size;
        }
        if (dt == ncclBfloat16)
            for (size_t i = 0; i < recvcount; i++)
                static_cast<uint16_t*>(recvbuff)[i] = f32_to_bf16(reinterpret_cast<const float*>(out.data())[i]);
        else
            std::memcpy(recvbuff, out.data(), bytes);
    };
    return submit(Pending{c, stream, false, {}, body, what});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* what = "ncclBroadcast";
    NCCL_TRY(check_comm(comm, what));
    const size_t es = type_size(dt);
    if (es == 0) return refuse(ncclInvalidArgument, "%s: datatype %d", what, (int)dt);
    if (root < 0 || root >= comm->size) return refuse(ncclInvalidArgument, "%s: root %d of %d ranks", what, root, comm->size);
    const size_t bytes = count * es;
    if (comm->rank == root) NCCL_TRY(check_buffer(sendbuff, bytes, what, "sendbuff"));
    NCCL_TRY(check_buffer(recvbuff, bytes, what, "recvbuff"));
    ncclComm* c = comm;
    auto body = [=] {
        if (bytes == 0) return;
        if (c->rank == root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
        if (c->size == 1) return;
        std::vector<MPI_Request> req(1);
        if (mpi_ok(c, MPI_Ibcast(recvbuff, (int)bytes, MPI_BYTE, root, c->mpi, &req[0]), what)) wait_all(c, req, what);
    };
    return submit(Pending{c, stream, false, {}, body, what});
}

// ---- point to point -------------------------------------------------------------------------------------------
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    const char* what = "ncclSend";
    NCCL_TRY(check_comm(comm, what));
    const size_t es = type_size(dt);
    if (es == 0) return refuse(ncclInvalidArgument, "%s: datatype %d", what, (int)dt);
    if (peer < 0 || peer >= comm->size) return refuse(ncclInvalidArgument, "%s: peer %d of %d ranks", what, peer, comm->size);
    NCCL_TRY(check_buffer(sendbuff, count * es, what, "sendbuff"));
    return submit(Pending{comm, stream, true, P2P{true, const_cast<void*>(sendbuff), count * es, peer}, {}, what});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t stream) {
    const char* what = "ncclRecv";
    NCCL_TRY(check_comm(comm, what));
    const size_t es = type_size(dt);
    if (es == 0) return refuse(ncclInvalidArgument, "%s: datatype %d", what, (int)dt);
    if (peer < 0 || peer >= comm->size) return refuse(ncclInvalidArgument, "%s: peer %d of %d ranks", what, peer, comm->size);
    NCCL_TRY(check_buffer(recvbuff, count * es, what, "recvbuff"));
    return submit(Pending{comm, stream, true, P2P{false, recvbuff, count * es, peer}, {}, what});
}

ncclResult_t ncclGroupStart() {
    g_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (g_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group_depth > 0) return ncclSuccess;  // nested groups launch with the outermost end
    std::vector<Pending> ops;
    ops.swap(g_group);
    // One unit per communicator, in the order the communicators first appear; its calls keep their order.
    std::vector<ncclComm*> comms;
    for (const Pending& p : ops)
        if (std::find(comms.begin(), comms.end(), p.comm) == comms.end()) comms.push_back(p.comm);
    for (ncclComm* c : comms) {
        cudaStream_t stream = nullptr;
        bool first = true;
        std::vector<P2P> p2p;
        std::vector<std::function<void()>> collectives;
        for (const Pending& p : ops) {
            if (p.comm != c) continue;
            if (first) stream = p.stream;
            else if (p.stream != stream)
                return refuse(ncclInvalidUsage, "ncclGroupEnd: one communicator's calls on two streams in one group (the emulator runs a group on one stream)");
            first = false;
            if (p.is_p2p) p2p.push_back(p.p2p);
            else collectives.push_back(p.collective);
        }
        enqueue(c, stream, [c, p2p, collectives] {
            for (const std::function<void()>& f : collectives) f();
            run_p2p(c, p2p, "ncclGroupEnd (grouped ncclSend/ncclRecv)");
        }, "ncclGroupEnd");
    }
    return ncclSuccess;
}
