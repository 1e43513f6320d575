// The CUDA runtime of the emulated device: memory, streams, events, the device's identity and attributes.
//
// Device memory is host memory (256-byte aligned), every allocation filled with the NaN pattern 0xFF bytes
// (NaN as fp32, bf16 and fp64; -1 as an integer), so a read of memory nobody wrote shows in the results.
// Under AddressSanitizer (make test-emulated's build) an allocation is exactly the bytes asked for, so a kernel
// (or a copy) that touches one byte past its end is stopped (memcheck, launch.cpp); without it, the 256-byte
// rounding tail is there, and holds the NaN pattern too.
//
// Streams are asynchronous: each stream has a worker thread that runs its queue in issue order (kernels,
// copies, memsets, event records, waits, and the emulated libraries' work). cudaStreamWaitEvent queues a
// wait for the event's last record. The legacy default stream (0) synchronizes implicitly with the blocking
// streams, as CUDA's does; a stream made with cudaStreamNonBlocking does not. A missing wait between two
// streams therefore leaves the two really running at the same time, as on a GPU.
//
// Host reads of device results. A cudaMemcpyAsync from the device to host memory (pageable or pinned) is
// done at its place in the stream into a staging buffer, and reaches the host buffer only at a host
// synchronization that covers it: cudaStreamSynchronize or a successful cudaStreamQuery of that stream,
// cudaEventSynchronize or a successful cudaEventQuery of an event recorded on that stream after the copy,
// cudaDeviceSynchronize, or a synchronous cudaMemcpy/cudaMemset. Until then the host buffer holds the NaN
// pattern (written at the call). So a host read that is not synchronized with the copy's stream reads NaN,
// every time, instead of racing. What is NOT detected: a synchronization only through another stream (an
// event on stream B that waited for the copy's stream A does not publish A's copies: such a program reads
// NaN although it is correct on a GPU, a false alarm on the safe side); a host write into a pinned buffer
// before the H2D cudaMemcpyAsync that reads it has run (the source is read at the call, as CUDA does for
// pageable memory); and host reads of device memory through a raw pointer (the emulator cannot see them).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cuda_runtime.h>

#include "device.h"
#include "runtime_internal.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Item {
    std::function<void()> work;
    const char* what;
    uint64_t seq;
};

}  // namespace

struct CUstream_st {
    bool blocking = true;
    bool legacy = false;
    std::mutex m;
    std::condition_variable cv, done_cv;
    std::deque<Item> q;
    uint64_t enqueued = 0, completed = 0;
    bool stop = false;
    std::thread worker;
};

struct CUevent_st {
    unsigned flags = 0;
    std::mutex m;
    CUstream_st* stream = nullptr;  // the last record's stream and position, null before any record
    uint64_t seq = 0;
    std::shared_ptr<std::atomic<double>> when;  // seconds since start, written by the worker
};

namespace emu {
namespace {

thread_local cudaError_t g_last_error = cudaSuccess;

std::mutex g_streams_mutex;
std::set<CUstream_st*>* g_streams = new std::set<CUstream_st*>();  // never destroyed: workers outlive main
CUstream_st* g_legacy = nullptr;

std::mutex g_mem_mutex;
std::map<uintptr_t, size_t>* g_allocs = new std::map<uintptr_t, size_t>();  // device allocations
std::set<void*>* g_pinned = new std::set<void*>();
size_t g_live_bytes = 0;
constexpr size_t kTotalMem = 80ull << 30;  // what cudaMemGetInfo reports as the device's memory

struct PendingCopy {
    CUstream_st* stream;
    uint64_t seq;
    void* dst;
    size_t bytes;
    std::shared_ptr<std::vector<char>> staging;
};
std::mutex g_pending_mutex;
std::vector<PendingCopy>* g_pending = new std::vector<PendingCopy>();

const Clock::time_point g_start = Clock::now();

void worker_loop(CUstream_st* s) {
    for (;;) {
        Item it;
        {
            std::unique_lock<std::mutex> lock(s->m);
            s->cv.wait(lock, [&] { return s->stop || !s->q.empty(); });
            if (s->q.empty()) return;
            it = std::move(s->q.front());
            s->q.pop_front();
        }
        it.work();
        {
            std::lock_guard<std::mutex> lock(s->m);
            s->completed = it.seq;
        }
        s->done_cv.notify_all();
    }
}

CUstream_st* make_stream(bool blocking, bool legacy) {
    auto* s = new CUstream_st();
    s->blocking = blocking;
    s->legacy = legacy;
    s->worker = std::thread(worker_loop, s);
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    g_streams->insert(s);
    return s;
}

CUstream_st* resolve(cudaStream_t s) {
    if (s) return s;
    static std::once_flag once;
    std::call_once(once, [] { g_legacy = make_stream(true, true); });
    return g_legacy;
}

void wait_for(CUstream_st* s, uint64_t seq) {
    std::unique_lock<std::mutex> lock(s->m);
    s->done_cv.wait(lock, [&] { return s->completed >= seq; });
}

bool reached(CUstream_st* s, uint64_t seq) {
    std::lock_guard<std::mutex> lock(s->m);
    return s->completed >= seq;
}

uint64_t push(CUstream_st* s, std::function<void()> work, const char* what) {
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lock(s->m);
        seq = ++s->enqueued;
        s->q.push_back(Item{std::move(work), what, seq});
    }
    s->cv.notify_one();
    return seq;
}

// Queue work, with the legacy default stream's implicit synchronization. Returns its position.
uint64_t enqueue(cudaStream_t stream, std::function<void()> work, const char* what) {
    CUstream_st* s = resolve(stream);
    std::vector<std::pair<CUstream_st*, uint64_t>> waits;
    {
        std::lock_guard<std::mutex> lock(g_streams_mutex);
        for (CUstream_st* t : *g_streams) {
            if (t == s || !t->blocking) continue;
            if (!s->legacy && !t->legacy) continue;  // two blocking streams: no implicit order
            if (s->legacy == t->legacy) continue;
            std::lock_guard<std::mutex> l2(t->m);
            if (t->enqueued > t->completed) waits.emplace_back(t, t->enqueued);
        }
    }
    if (s->blocking)
        for (auto& w : waits) {
            CUstream_st* t = w.first;
            uint64_t seq = w.second;
            push(s, [t, seq] { wait_for(t, seq); }, "implicit synchronization with the legacy default stream");
        }
    return push(s, std::move(work), what);
}

void drain(CUstream_st* s) {
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lock(s->m);
        seq = s->enqueued;
    }
    wait_for(s, seq);
}

// Deferred device-to-host copies of stream s up to position seq (all streams: s == null) reach the host.
void publish(CUstream_st* s, uint64_t seq) {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    auto& p = *g_pending;
    for (size_t i = 0; i < p.size();) {
        if ((s == nullptr || (p[i].stream == s && p[i].seq <= seq)) && reached(p[i].stream, p[i].seq)) {
            memcpy(p[i].dst, p[i].staging->data(), p[i].bytes);
            p[i] = p.back();
            p.pop_back();
        } else {
            i++;
        }
    }
}

void drain_all() {
    std::vector<CUstream_st*> all;
    {
        std::lock_guard<std::mutex> lock(g_streams_mutex);
        all.assign(g_streams->begin(), g_streams->end());
    }
    for (auto* s : all) drain(s);
    publish(nullptr, 0);
}

bool is_device(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs->upper_bound(reinterpret_cast<uintptr_t>(p));
    if (it == g_allocs->begin()) return false;
    --it;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return a >= it->first && a + bytes <= it->first + it->second && (bytes > 0 || a < it->first + it->second);
}

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}

}  // namespace

void set_last_error(cudaError_t err) { g_last_error = err; }

void fatal(const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emulated CUDA: %s\n", buf);
    fflush(stderr);
    abort();
}

void stream_enqueue(cudaStream_t s, std::function<void()> work, const char* what) { enqueue(s, std::move(work), what); }

void stream_drain(cudaStream_t s) { drain(resolve(s)); }

void check_device_range(const void* p, size_t bytes, const char* what) {
    if (bytes == 0) return;
    if (!is_device(p, bytes))
        fatal("%s: [%p, %p + %zu bytes) is not inside one live cudaMalloc allocation", what, p, p, bytes);
}

size_t describe_device_allocation(const void* addr, char* out, size_t n) {
    std::unique_lock<std::mutex> lock(g_mem_mutex, std::try_to_lock);
    if (!lock.owns_lock() || g_allocs->empty()) return SIZE_MAX;
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    auto after = g_allocs->upper_bound(a);  // the first allocation starting after a
    size_t best = SIZE_MAX;
    if (after != g_allocs->begin()) {
        auto it = std::prev(after);
        const uintptr_t end = it->first + it->second;
        best = a < end ? 0 : a - end + 1;
        if (a < end)
            snprintf(out, n, "%zu bytes into the cudaMalloc allocation of %zu bytes at %p", (size_t)(a - it->first),
                     it->second, reinterpret_cast<void*>(it->first));
        else
            snprintf(out, n, "%zu bytes past the end of the cudaMalloc allocation of %zu bytes at %p",
                     (size_t)(a - end), it->second, reinterpret_cast<void*>(it->first));
    }
    if (after != g_allocs->end() && after->first - a < best) {
        best = after->first - a;
        snprintf(out, n, "%zu bytes before the cudaMalloc allocation of %zu bytes at %p", (size_t)(after->first - a),
                 after->second, reinterpret_cast<void*>(after->first));
    }
    return best;
}

const unsigned char* device_uuid() {
    static unsigned char uuid[16];
    static std::once_flag once;
    std::call_once(once, [] {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        uint64_t h = 1469598103934665603ull;  // FNV-1a over host name, pid and start time
        auto mix = [&](const void* d, size_t n) {
            for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char*>(d)[i]) * 1099511628211ull;
        };
        mix(host, strlen(host));
        const pid_t pid = getpid();
        mix(&pid, sizeof pid);
        const auto t = std::chrono::system_clock::now().time_since_epoch().count();
        mix(&t, sizeof t);
        memcpy(uuid, &h, 8);
        memcpy(uuid + 8, &pid, sizeof pid);
        uuid[12] = 'e', uuid[13] = 'm', uuid[14] = 'u', uuid[15] = 0;
    });
    return uuid;
}

const char* device_pci_bus_id() {
    static char id[32];
    static std::once_flag once;
    // Distinct per process on a host: the domain is the pid.
    std::call_once(once, [] { snprintf(id, sizeof id, "%08x:01:00.0", (unsigned)getpid()); });
    return id;
}

}  // namespace emu

using namespace emu;

// ---- errors -------------------------------------------------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}
cudaError_t cudaGetLastError() {
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }

// ---- the device -----------------------------------------------------------------------------------------------------
static thread_local int g_device = 0;
cudaError_t cudaGetDeviceCount(int* count) {
    // One emulated GPU per process (per MPI rank); none when CUDA_VISIBLE_DEVICES hides it (empty, or -1), as
    // the real runtime does: what a test that must skip without a GPU sees (emu_skip_fails_the_run).
    const char* visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible && (!*visible || visible[0] == '-')) {
        *count = 0;
        return ret(cudaErrorNoDevice);
    }
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device != 0) return ret(cudaErrorInvalidDevice);
    g_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    *device = g_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    if (device != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "emulated CUDA device (sm_90 limits; times mean nothing)");
    memcpy(p->uuid.bytes, device_uuid(), 16);
    p->totalGlobalMem = kTotalMem;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 132;
    p->pciBusID = 1;
    p->pciDomainID = (int)getpid();
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return ret(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrMultiProcessorCount: *value = 132; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 232448; break;  // 227 KB (sm_90)
        default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
    if (device != 0) return ret(cudaErrorInvalidDevice);
    if (len <= 0) return ret(cudaErrorInvalidValue);
    snprintf(id, (size_t)len, "%s", device_pci_bus_id());
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    drain_all();
    return cudaSuccess;
}
cudaError_t cudaDeviceReset() {
    drain_all();
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    *total = kTotalMem;
    *free_bytes = kTotalMem - std::min(kTotalMem, g_live_bytes);
    return cudaSuccess;
}

// ---- memory ---------------------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        if (g_live_bytes + bytes > kTotalMem) return ret(cudaErrorMemoryAllocation);
    }
#if defined(__SANITIZE_ADDRESS__)
    const size_t held = bytes;  // exactly: AddressSanitizer's redzone starts at the first byte past the end
#else
    const size_t held = (bytes + 255) / 256 * 256;
#endif
    void* p = nullptr;
    if (posix_memalign(&p, 256, held) != 0 || !p) return ret(cudaErrorMemoryAllocation);
    memset(p, 0xff, held);  // the NaN pattern: unwritten memory (and the rounding tail) shows
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    (*g_allocs)[reinterpret_cast<uintptr_t>(p)] = bytes;
    g_live_bytes += bytes;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    drain_all();  // cudaFree synchronizes the device: no queued work still uses the memory
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs->find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_allocs->end()) fatal("cudaFree(%p): not the start of a live cudaMalloc allocation", ptr);
    g_live_bytes -= it->second;
    g_allocs->erase(it);
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
    if (!ptr) return ret(cudaErrorInvalidValue);
    void* p = aligned_alloc(4096, (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096);
    if (!p) return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_pinned->insert(p);
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
    if (!ptr) return cudaSuccess;
    drain_all();
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (!g_pinned->erase(ptr)) fatal("cudaFreeHost(%p): not a live cudaMallocHost allocation", ptr);
    free(ptr);
    return cudaSuccess;
}

static cudaError_t memcpy_impl(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                               bool sync, const char* call) {
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return ret(cudaErrorInvalidValue);
    const bool dd = is_device(dst, bytes), sd = is_device(src, bytes);
    if (kind == cudaMemcpyDefault) kind = sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                             : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    const bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (want_src_dev) check_device_range(src, bytes, call);
    if (want_dst_dev) check_device_range(dst, bytes, call);
    if (!want_src_dev && sd) fatal("%s: the source %p is device memory but the kind says host", call, src);
    if (!want_dst_dev && dd) fatal("%s: the destination %p is device memory but the kind says host", call, dst);
    CUstream_st* s = resolve(stream);
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
        // The host source is read now (CUDA stages pageable memory at the call).
        auto data = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                        static_cast<const char*>(src) + bytes);
        uint64_t seq = enqueue(stream, [dst, data] { memcpy(dst, data->data(), data->size()); }, call);
        if (sync) wait_for(s, seq);
    } else if (kind == cudaMemcpyDeviceToDevice) {
        uint64_t seq = enqueue(stream, [dst, src, bytes] { memmove(dst, src, bytes); }, call);
        if (sync) wait_for(s, seq);
    } else {
        if (sync) {
            uint64_t seq = enqueue(stream, [dst, src, bytes] { memcpy(dst, src, bytes); }, call);
            wait_for(s, seq);
            publish(s, seq);
        } else {
            memset(dst, 0xff, bytes);  // until a synchronization publishes the copy: NaN
            auto staging = std::make_shared<std::vector<char>>(bytes);
            uint64_t seq = enqueue(stream, [staging, src, bytes] { memcpy(staging->data(), src, bytes); }, call);
            std::lock_guard<std::mutex> lock(g_pending_mutex);
            g_pending->push_back(PendingCopy{s, seq, dst, bytes, staging});
        }
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    return memcpy_impl(dst, src, bytes, kind, nullptr, true, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    return memcpy_impl(dst, src, bytes, kind, stream, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
    if (bytes == 0) return cudaSuccess;
    check_device_range(ptr, bytes, "cudaMemset");
    CUstream_st* s = resolve(nullptr);
    wait_for(s, enqueue(nullptr, [=] { memset(ptr, value, bytes); }, "cudaMemset"));
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    check_device_range(ptr, bytes, "cudaMemsetAsync");
    enqueue(stream, [=] { memset(ptr, value, bytes); }, "cudaMemsetAsync");
    return cudaSuccess;
}

// ---- streams --------------------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    if (!stream || (flags & ~1u)) return ret(cudaErrorInvalidValue);
    *stream = make_stream(!(flags & cudaStreamNonBlocking), false);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s || s->legacy) return ret(cudaErrorInvalidResourceHandle);
    drain(s);
    publish(s, UINT64_MAX);
    {
        std::lock_guard<std::mutex> lock(g_streams_mutex);
        g_streams->erase(s);
    }
    {
        std::lock_guard<std::mutex> lock(s->m);
        s->stop = true;
    }
    s->cv.notify_all();
    s->worker.join();
    // The struct is kept (its queue is empty, its counters final): an event recorded on it, or a wait queued
    // on another stream, may still look at them. A few hundred bytes per stream ever made.
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    CUstream_st* s = resolve(stream);
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lock(s->m);
        seq = s->enqueued;
    }
    wait_for(s, seq);
    publish(s, seq);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    CUstream_st* s = resolve(stream);
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lock(s->m);
        seq = s->enqueued;
        if (s->completed < seq) return cudaErrorNotReady;
    }
    publish(s, seq);
    return cudaSuccess;
}
// Where an event was last recorded: its stream (null when never recorded) and its place in that stream's queue.
static void event_position(cudaEvent_t e, CUstream_st** s, uint64_t* seq) {
    std::lock_guard<std::mutex> lock(e->m);
    *s = e->stream;
    *seq = e->seq;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
    if (!e || flags) return ret(cudaErrorInvalidValue);
    CUstream_st* src;
    uint64_t seq;
    event_position(e, &src, &seq);
    if (!src) return cudaSuccess;  // an event never recorded: nothing to wait for (as CUDA)
    enqueue(stream, [src, seq] { wait_for(src, seq); }, "cudaStreamWaitEvent");
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
    if (!fn) return ret(cudaErrorInvalidValue);
    enqueue(stream, [fn, data] { fn(data); }, "cudaLaunchHostFunc");
    return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    if (!e || (flags & ~3u)) return ret(cudaErrorInvalidValue);
    *e = new CUevent_st();
    (*e)->flags = flags;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    delete e;  // the queued record holds only its own time slot, not the event
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    auto when = std::make_shared<std::atomic<double>>(-1.0);
    uint64_t seq = enqueue(stream, [when] {
        when->store(std::chrono::duration<double>(Clock::now() - g_start).count());
    }, "cudaEventRecord");
    std::lock_guard<std::mutex> lock(e->m);
    e->stream = resolve(stream);
    e->seq = seq;
    e->when = when;
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    CUstream_st* s;
    uint64_t seq;
    event_position(e, &s, &seq);
    if (!s) return cudaSuccess;
    if (!reached(s, seq)) return cudaErrorNotReady;
    publish(s, seq);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    CUstream_st* s;
    uint64_t seq;
    event_position(e, &s, &seq);
    if (!s) return cudaSuccess;
    wait_for(s, seq);
    publish(s, seq);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || !ms) return ret(cudaErrorInvalidValue);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
    if (!a->stream || !b->stream) return ret(cudaErrorInvalidResourceHandle);
    if (!reached(a->stream, a->seq) || !reached(b->stream, b->seq)) return ret(cudaErrorNotReady);
    *ms = (float)((b->when->load() - a->when->load()) * 1e3);  // host time: it means nothing about a GPU
    return cudaSuccess;
}

// ---- functions --------------------------------------------------------------------------------------------------------
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return ret(cudaErrorInvalidValue);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 232448) {
            fprintf(stderr, "emulated CUDA: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): above the opt-in "
                    "maximum of 232448 bytes (227 KB, sm_90)\n", value);
            return ret(cudaErrorInvalidValue);
        }
        set_func_max_dynamic_smem(func, value);
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return ret(cudaErrorInvalidValue);
}
