// Kernel launches on the emulated device: the launch limits, and a block's CUDA threads as fibers.
//
// A launch runs on its stream's worker thread, one block after another (blockIdx x fastest). Inside a block
// every CUDA thread is a fiber with a stack of its own (pooled per worker, reused by every launch): a fiber
// runs until it reaches __syncthreads, a warp collective (__syncwarp, __shfl*_sync, __ballot_sync,
// emu::warp_gather) or its end, then the scheduler resumes the next runnable one. A thread that never meets a
// barrier costs one fiber start and one switch back. The switch itself is a few instructions (ctx_switch.S),
// no system call.
//
// Thread order (EMU_THREAD_ORDER, read at the first launch): the scheduler's sweep over the runnable fibers
// goes forward (threads 0, 1, ..., the default), in reverse, or in an order shuffled afresh at every sweep
// from a seed ("shuffle:SEED"; plain "shuffle" picks one). A missing barrier between a write and a read of
// two threads lets the reader run first in one of the orders: forward catches a reader of lower index than
// its writer, reverse one of higher index. The order chosen (and the seed) is printed once.
//
// memcheck (the emulator built with -fsanitize=address, MM_EMU_SANITIZER=address, what make test-emulated
// builds): every cudaMalloc (runtime.cpp), every static __shared__ array of a block and the block's dynamic
// shared memory is a heap allocation of exactly its size, so AddressSanitizer stops at an access one byte
// past any of them; the report callback below then names the kernel, the block, the thread, the allocation or
// shared array the address belongs to, and the source line. The fiber switches are announced to it
// (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so that it knows which stack is live.
//
// Race mode (-fsanitize=thread, MM_EMU_SANITIZER=thread, build-emulated-race/): each fiber is a
// ThreadSanitizer fiber switched to WITHOUT synchronization, and the happens-before edges are exactly CUDA's:
// a __syncthreads orders every thread of the block, a __syncwarp the lanes of its mask, the block's start and
// end order the block against the host and the next block. A shuffle, a ballot or emu::warp_gather hands over
// its values but orders no memory (the CUDA C++ Programming Guide gives memory ordering to __syncwarp and
// __syncthreads only), so a kernel that passes data through shared memory between lanes with only a shuffle
// in between is reported. Two threads of a block touching the same shared (or global) word between barriers,
// one of them writing, is a ThreadSanitizer race report. Atomics are real atomics, so they are not reported.
// Blocks run one after another, ordered, so races between blocks are NOT found.
//
// synccheck (every build): a __syncthreads reached by the threads of a block at different source lines, a
// block whose live threads cannot all reach the same barrier (a deadlock), a warp collective whose mask names a
// lane that has exited, that does not name the caller, or whose lanes call different collectives or masks,
// each stops the program naming the kernel, the block and the source lines.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "device.h"
#include "runtime_internal.h"

// EMU_TSAN: the race mode (emulator.cmake defines it for this file, which it compiles uninstrumented).
#if defined(__SANITIZE_THREAD__) && !defined(EMU_TSAN)
#define EMU_TSAN 1
#endif
#if defined(EMU_TSAN)
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
// A race report stops the program with exit status 66 (what the race tests expect), after the first one. No
// lock-order checks: Open MPI's own locks trip them at MPI_Init, and the race mode is about data races.
const char* __tsan_default_options() { return "halt_on_error=1:exitcode=66:detect_deadlocks=0"; }
}
#define EMU_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define EMU_IGNORE_END() __tsan_ignore_thread_end()
#define EMU_ACQUIRE(p) __tsan_acquire((void*)(p))
#define EMU_RELEASE(p) __tsan_release((void*)(p))
#else
#define EMU_IGNORE_BEGIN() ((void)0)
#define EMU_IGNORE_END() ((void)0)
#define EMU_ACQUIRE(p) ((void)0)
#define EMU_RELEASE(p) ((void)0)
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
extern "C" {
// No leak check (every MPI program "leaks" its plugins at exit, and the emulator keeps its pools); an error
// aborts (SIGABRT, as the emulator's own checks do), after the report and the emulator's line below.
const char* __asan_default_options() { return "detect_leaks=0:abort_on_error=1:halt_on_error=1"; }
}
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

extern "C" void emu_ctx_switch(void** save_sp, void* new_sp);  // ctx_switch.S
extern "C" void emu_fiber_trampoline();                          // ctx_switch.S

// Called at the start of every CUDA thread, before the kernel's body: the place for a gdb breakpoint at a
// chosen thread (docs/testing.md, "Run the CUDA kernels without a GPU"):
//   break emu_thread_begin if bx == 2 && tx == 5
// EMU_BREAK="bx,by,bz/tx,ty,tz" (e.g. EMU_BREAK=2,0,0/5,0,0) raises SIGTRAP there instead, so that a plain
// `gdb --args prog` stops in that thread; `finish` then `step` enters the kernel.
extern "C" __attribute__((noinline)) void emu_thread_begin(unsigned bx, unsigned by, unsigned bz, unsigned tx,
                                                           unsigned ty, unsigned tz) {
    static const char* want = getenv("EMU_BREAK");
    if (want) {
        unsigned b[3] = {0, 0, 0}, t[3] = {0, 0, 0};
        sscanf(want, "%u,%u,%u/%u,%u,%u", &b[0], &b[1], &b[2], &t[0], &t[1], &t[2]);
        if (bx == b[0] && by == b[1] && bz == b[2] && tx == t[0] && ty == t[1] && tz == t[2]) raise(SIGTRAP);
    }
    asm volatile("" ::: "memory");
}

namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kStaticSharedLimit = 48 * 1024;
constexpr size_t kDynamicSharedDefault = 48 * 1024;
constexpr size_t kDynamicSharedOptin = 232448;  // 227 KB, sm_90 (sm_80: 163 KB)
constexpr size_t kMaxPayload = 128;             // warp_gather: bytes per lane

enum State { kReady, kBlocked, kDone };

struct Fiber {
    void* sp = nullptr;
    char* stack = nullptr;  // kStackBytes, with a guard page below
    State state = kDone;
    uint3 tid{};
    unsigned linear = 0;
    bool at_barrier = false;
    const char* wait_file = "";  // where it waits (__syncthreads or a warp collective), for the reports
    int wait_line = 0;
#ifdef EMU_TSAN
    void* tsan = nullptr;
#endif
#ifdef EMU_ASAN
    void* fake_stack = nullptr;
#endif
};

struct Warp {
    unsigned present = 0;  // lanes that exist and have not exited
    unsigned arrived = 0;
    unsigned want = 0;
    int kind = -1;
    const char* what = nullptr;
    const char* file = "";  // the first arrival's call site
    int line = 0;
    uint64_t gen = 0;
    uint64_t slots[2][32];
    // warp_gather's payloads, one per lane and parity of gen (kMaxPayload bytes each), and their size.
    unsigned char payload[2][32][kMaxPayload];
    size_t payload_bytes[2];
    char sync[2];  // ThreadSanitizer sync objects, one per parity of gen (__syncwarp only)
};

// A static __shared__ array as this worker holds it: one allocation of exactly its size per declaration,
// reused by every block and launch (its contents start as the NaN pattern in each block).
struct SharedArray {
    const void* site;
    char* base;
    size_t bytes;
    const char* name;
    const char* file;
    int line;
    uint64_t launch;  // the last launch that met it
};

// What one worker thread is running: one launch, one block at a time.
struct Runner {
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    void* sched_sp = nullptr;
    Fiber* cur = nullptr;
    bool in_fiber = false;
    const std::function<void()>* body = nullptr;
    const char* kernel = "";
    unsigned live = 0;
    unsigned bar_arrived = 0;
    uint64_t bar_gen = 0;
    const char* bar_file = "";  // the current __syncthreads' line (its first arrival's)
    int bar_line = 0;
    char bar_sync[2];
    char block_start, block_end;
    char* dyn_base = nullptr;  // dynamic shared memory: exactly dyn_bytes (a heap allocation of its own)
    size_t dyn_bytes = 0;
    bool dyn_allocated = false;
    std::vector<SharedArray> arrays;  // every static __shared__ array met by this worker
    uint64_t launch_id = 0;
    size_t static_bytes = 0;
    std::vector<unsigned> order;  // the scheduler's sweep
    uint64_t rng = 0;
#ifdef EMU_TSAN
    void* tsan_sched = nullptr;
#endif
#ifdef EMU_ASAN
    void* sched_fake_stack = nullptr;
    const void* sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
};
thread_local Runner* g_runner = nullptr;
std::atomic<void (*)()> g_thread_exit_check{nullptr};  // emu::at_thread_exit

std::mutex g_attr_mutex;
std::map<const void*, int> g_max_dyn_smem;  // cudaFuncSetAttribute(MaxDynamicSharedMemorySize)

// ---- the thread order (EMU_THREAD_ORDER) --------------------------------------------------------------------
enum class Order { kForward, kReverse, kShuffle };
struct OrderChoice {
    Order order = Order::kForward;
    uint64_t seed = 0;
};

const OrderChoice& order_choice() {
    static const OrderChoice choice = [] {
        OrderChoice c;
        const char* env = getenv("EMU_THREAD_ORDER");
        const std::string v = env ? env : "";
        if (v.empty() || v == "forward") return c;
        if (v == "reverse") {
            c.order = Order::kReverse;
        } else if (v == "shuffle" || v.rfind("shuffle:", 0) == 0) {
            c.order = Order::kShuffle;
            if (v == "shuffle") {
                c.seed = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count() ^ ((uint64_t)getpid() << 32);
                c.seed %= 1000000007ull;
            } else {
                char* end = nullptr;
                c.seed = strtoull(v.c_str() + 8, &end, 10);
                if (v.size() == 8 || *end) fatal("EMU_THREAD_ORDER=%s: the seed must be a decimal number", v.c_str());
            }
        } else {
            fatal("EMU_THREAD_ORDER=%s: expected forward, reverse, shuffle or shuffle:SEED", v.c_str());
        }
        if (c.order == Order::kReverse)
            fprintf(stderr, "emulated CUDA: thread order reverse (EMU_THREAD_ORDER=reverse): the highest thread of "
                    "a block runs first between barriers\n");
        else
            fprintf(stderr, "emulated CUDA: thread order shuffled, seed %llu (EMU_THREAD_ORDER=shuffle:%llu "
                    "repeats it)\n", (unsigned long long)c.seed, (unsigned long long)c.seed);
        return c;
    }();
    return choice;
}

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The order of one sweep of the scheduler over threads 0 .. n-1.
void next_order(Runner& r, unsigned n) {
    const OrderChoice& c = order_choice();
    r.order.resize(n);
    if (c.order == Order::kReverse) {
        for (unsigned i = 0; i < n; i++) r.order[i] = n - 1 - i;
        return;
    }
    std::iota(r.order.begin(), r.order.end(), 0u);
    if (c.order == Order::kShuffle)
        for (unsigned i = n; i > 1; i--) std::swap(r.order[i - 1], r.order[splitmix64(r.rng) % i]);
}

Runner& runner() {
    if (!g_runner) fatal("a device function (__syncthreads, a shuffle, __shared__) was called outside a kernel");
    return *g_runner;
}

// ---- fiber switches ---------------------------------------------------------------------------------------------
// Into fiber f (from the scheduler), and back; AddressSanitizer and ThreadSanitizer are told of each switch.
void switch_to_fiber(Runner& r, Fiber& f) {
    void* to = f.sp;
    r.in_fiber = true;
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(f.tsan, 1 /* no_sync */);
#endif
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&r.sched_fake_stack, f.stack, kStackBytes);
#endif
    emu_ctx_switch(&r.sched_sp, to);
    r.in_fiber = false;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(r.sched_fake_stack, nullptr, nullptr);
#endif
}

// `last`: the fiber has finished its block and is never resumed from here (its stack starts afresh).
void switch_to_scheduler(Runner& r, Fiber& f, bool last = false) {
    void* to = r.sched_sp;
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(r.tsan_sched, 1 /* no_sync */);
#endif
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(last ? nullptr : &f.fake_stack, r.sched_bottom, r.sched_size);
#else
    (void)last;
#endif
    emu_ctx_switch(&f.sp, to);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &r.sched_bottom, &r.sched_size);
#endif
}

void release_barrier(Runner& r) {
    r.bar_arrived = 0;
    r.bar_gen++;
    for (auto& g : r.fibers)
        if (g.at_barrier) {
            g.at_barrier = false;
            if (g.state == kBlocked) g.state = kReady;
        }
}

void fiber_main(Fiber* f) {
    Runner& r = *g_runner;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &r.sched_bottom, &r.sched_size);
#endif
    EMU_ACQUIRE(&r.block_start);
    emu_thread_begin(blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z);
    (*r.body)();
    if (void (*check)() = g_thread_exit_check.load(std::memory_order_acquire)) check();
    EMU_RELEASE(&r.block_end);
    f->state = kDone;
    r.live--;
    Warp& w = r.warps[f->linear / 32];
    const unsigned bit = 1u << (f->linear % 32);
    w.present &= ~bit;
    if (w.arrived && (w.want & bit))
        fatal("synccheck: kernel %s, block (%u,%u,%u): thread (%u,%u,%u) exited while lanes 0x%08x of its warp wait "
              "for it in %s at %s:%d (mask 0x%08x names it): undefined behaviour on a GPU", r.kernel, blockIdx.x,
              blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z, w.arrived, w.what, w.file, w.line, w.want);
    // An exited thread no longer counts at __syncthreads (as on sm_70 and later).
    if (r.bar_arrived && r.bar_arrived == r.live) release_barrier(r);
    switch_to_scheduler(r, *f, true);
    fatal("a finished fiber was resumed");
}

// In the race mode this file is compiled without ThreadSanitizer's instrumentation: the scheduler's and the
// meetings' own accesses (the fibers' frames, threadIdx, a warp's slots) are not the kernel's, and only the
// release/acquire edges count. The few calls of intercepted libc functions that fibers make here (memcpy and
// memset on the warp's slots and a shared array's NaN fill) are bracketed with EMU_IGNORE.
void run_block(Runner& r, unsigned nthreads) {
    // Shared memory starts undefined: the NaN pattern, so that a read of an unwritten word shows.
    if (r.dyn_bytes) memset(r.dyn_base, 0xff, r.dyn_bytes);
    for (auto& a : r.arrays)
        if (a.launch == r.launch_id) memset(a.base, 0xff, a.bytes);
    const dim3 bd = blockDim;
    for (unsigned i = 0; i < nthreads; i++) {
        Fiber& f = r.fibers[i];
        f.linear = i;
        f.tid = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
        f.state = kReady;
        f.at_barrier = false;
        // The initial frame that emu_ctx_switch pops (see ctx_switch.S).
        uint64_t* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
        top[-1] = 0;
        top[-2] = 0;
        top[-3] = reinterpret_cast<uint64_t>(&emu_fiber_trampoline);  // return address
        top[-4] = 0;                                                   // rbp
        top[-5] = 0;                                                   // rbx
        top[-6] = reinterpret_cast<uint64_t>(&f);                      // r12: the argument
        top[-7] = reinterpret_cast<uint64_t>(&fiber_main);             // r13: the entry
        top[-8] = 0;                                                   // r14
        top[-9] = 0;                                                   // r15
        top[-10] = 0x037F00001F80ull;                                  // mxcsr, x87 control word
        f.sp = &top[-10];
    }
    for (size_t w = 0; w < r.warps.size(); w++) {
        Warp& wp = r.warps[w];
        const unsigned lanes = std::min(32u, nthreads - (unsigned)w * 32);
        wp.present = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
        wp.arrived = wp.want = 0;
        wp.kind = -1;
    }
    r.live = nthreads;
    r.bar_arrived = 0;
    EMU_RELEASE(&r.block_start);
    while (r.live) {
        bool progress = false;
        next_order(r, nthreads);
        for (unsigned k = 0; k < nthreads; k++) {
            Fiber& f = r.fibers[r.order[k]];
            if (f.state != kReady) continue;
            progress = true;
            r.cur = &f;
            threadIdx = f.tid;
            switch_to_fiber(r, f);
        }
        if (!progress && r.live) {
            unsigned at_bar = 0;
            std::string warps;
            for (auto& f : r.fibers)
                if (f.state == kBlocked && f.at_barrier) at_bar++;
            for (size_t w = 0; w < r.warps.size(); w++)
                if (r.warps[w].arrived) {
                    char b[400];
                    snprintf(b, sizeof b, " warp %zu: lanes 0x%08x of mask 0x%08x wait in %s at %s:%d;", w,
                             r.warps[w].arrived, r.warps[w].want, r.warps[w].what, r.warps[w].file, r.warps[w].line);
                    warps += b;
                }
            fatal("synccheck: kernel %s, block (%u,%u,%u): deadlock: %u of %u live threads wait at __syncthreads%s%s:%d, "
                  "the others never reach it;%s (a barrier in divergent code, or a warp collective whose mask names "
                  "a lane that waits elsewhere)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z, at_bar, r.live,
                  at_bar ? " at " : "", at_bar ? r.bar_file : "", at_bar ? r.bar_line : 0, warps.c_str());
        }
    }
    EMU_ACQUIRE(&r.block_end);
}

Runner& worker_runner(unsigned nthreads) {
    if (!g_runner) {
        static std::atomic<uint64_t> workers{0};
        g_runner = new Runner();  // one per worker thread, kept for its lifetime
        uint64_t x = order_choice().seed + workers.fetch_add(1);
        g_runner->rng = splitmix64(x);
#ifdef EMU_TSAN
        g_runner->tsan_sched = __tsan_get_current_fiber();  // the worker thread's own
#endif
    }
    Runner& r = *g_runner;
    while (r.fibers.size() < nthreads) {
        Fiber f;
        void* m = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (m == MAP_FAILED) fatal("cannot map a fiber stack of %zu bytes", kStackBytes);
        mprotect(m, 4096, PROT_NONE);  // guard page: a kernel overflowing its stack faults here
        f.stack = static_cast<char*>(m) + 4096;
#ifdef EMU_TSAN
        f.tsan = __tsan_create_fiber(0);
        char name[32];
        snprintf(name, sizeof name, "CUDA thread %zu", r.fibers.size());
        __tsan_set_fiber_name(f.tsan, name);
#endif
        r.fibers.push_back(f);
    }
    r.warps.resize((nthreads + 31) / 32);
    return r;
}

// A heap allocation of exactly `bytes` (AddressSanitizer bounds it to the byte), aligned for any __align__ a
// shared array may ask (128 bytes).
char* exact_alloc(size_t bytes, size_t align) {
    void* p = nullptr;
    if (posix_memalign(&p, align, bytes) != 0 || !p) fatal("cannot allocate %zu bytes of shared memory", bytes);
    return static_cast<char*>(p);
}

}  // namespace

// ---- device functions ------------------------------------------------------------------------------------------
void syncthreads(const char* file, int line) {
    Runner& r = runner();
    Fiber& f = *r.cur;
    EMU_RELEASE(&r.bar_sync[r.bar_gen & 1]);
    const uint64_t parity = r.bar_gen & 1;
    if (r.bar_arrived == 0) {
        r.bar_file = file;
        r.bar_line = line;
    } else if (line != r.bar_line || strcmp(file, r.bar_file) != 0) {
        fatal("synccheck: kernel %s, block (%u,%u,%u): thread (%u,%u,%u) reaches __syncthreads at %s:%d while %u "
              "threads of the block wait at __syncthreads at %s:%d: a barrier reached by only part of the block "
              "(divergent threads: undefined behaviour in CUDA C++)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z,
              f.tid.x, f.tid.y, f.tid.z, file, line, r.bar_arrived, r.bar_file, r.bar_line);
    }
    f.at_barrier = true;
    f.wait_file = file;
    f.wait_line = line;
    r.bar_arrived++;
    const bool last = r.bar_arrived == r.live;
    if (last) release_barrier(r);
    if (!last) {
        f.state = kBlocked;
        switch_to_scheduler(r, f);
    }
    EMU_ACQUIRE(&r.bar_sync[parity]);
}


namespace {
// The meeting of a warp collective: every lane named in `mask` arrives (with `value`, and for warp_gather a
// payload of `bytes` at `in`); the last to arrive wakes the others. Returns the parity of the slots to read.
// Only __syncwarp (kind 0) is a happens-before edge for the race mode.
uint64_t warp_meet(Runner& r, unsigned mask, uint64_t value, const void* in, size_t bytes, int kind, int width,
                   const char* what, const char* file, int line) {
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    const unsigned lane = f.linear % 32, bit = 1u << lane;
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fatal("synccheck: kernel %s: %s at %s:%d with width %d: it must be a power of 2 up to 32", r.kernel, what,
              file, line, width);
    if (!(mask & bit))
        fatal("synccheck: kernel %s, block (%u,%u,%u): thread %u calls %s at %s:%d with mask 0x%08x that does not "
              "name its own lane %u (invalid arguments)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z, f.linear, what,
              file, line, mask, lane);
    if (mask & ~w.present)
        fatal("synccheck: kernel %s, block (%u,%u,%u): %s at %s:%d: mask 0x%08x names lanes 0x%08x of warp %u that "
              "do not exist or have exited (undefined behaviour on a GPU)", r.kernel, blockIdx.x, blockIdx.y,
              blockIdx.z, what, file, line, mask, mask & ~w.present, f.linear / 32);
    if (w.arrived == 0) {
        w.want = mask;
        w.kind = kind;
        w.what = what;
        w.file = file;
        w.line = line;
        w.payload_bytes[w.gen & 1] = bytes;
    } else if (w.want != mask || w.kind != kind || w.payload_bytes[w.gen & 1] != bytes) {
        fatal("synccheck: kernel %s, block (%u,%u,%u), warp %u: lane %u calls %s at %s:%d with mask 0x%08x while "
              "lanes 0x%08x wait in %s at %s:%d with mask 0x%08x: CUDA requires every lane named in a mask to call "
              "the same collective with the same mask (and this emulator runs one warp collective at a time per "
              "warp)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z, f.linear / 32, lane, what, file, line, mask,
              w.arrived, w.what, w.file, w.line, w.want);
    }
    f.wait_file = file;
    f.wait_line = line;
    const uint64_t p = w.gen & 1;
    w.slots[p][lane] = value;
    if (bytes) {  // the lanes' copies through the warp's slots are not the kernel's accesses
        EMU_IGNORE_BEGIN();
        memcpy(w.payload[p][lane], in, bytes);
        EMU_IGNORE_END();
    }
    w.arrived |= bit;
    const bool last = w.arrived == w.want;
    if (kind == 0) EMU_RELEASE(&w.sync[p]);
    if (last) {
        w.arrived = 0;
        w.gen++;
        const unsigned base = (f.linear / 32) * 32;
        for (unsigned l = 0; l < 32; l++)
            if ((mask >> l) & 1) {
                Fiber& g = r.fibers[base + l];
                if (&g != &f && g.state == kBlocked && !g.at_barrier) g.state = kReady;
            }
    } else {
        f.state = kBlocked;
        switch_to_scheduler(r, f);
    }
    if (kind == 0) EMU_ACQUIRE(&w.sync[p]);
    return p;
}
}  // namespace

uint64_t warp_collective(unsigned mask, uint64_t value, int kind, int arg, int width, const char* what,
                         const char* file, int line) {
    Runner& r = runner();
    const uint64_t p = warp_meet(r, mask, value, nullptr, 0, kind, width, what, file, line);
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    const unsigned lane = f.linear % 32;
    const unsigned seg = lane & ~(unsigned)(width - 1);
    int src = (int)lane;
    uint64_t out = 0;
    switch (kind) {
        case 0: break;
        case 1: src = (int)seg + (((arg % width) + width) % width); break;
        case 2: src = (int)(lane ^ (unsigned)arg); if (src >= (int)(seg + width)) src = (int)lane; break;
        case 3: src = (int)lane + arg; if (src >= (int)(seg + width)) src = (int)lane; break;
        case 4: src = (int)lane - arg; if (src < (int)seg) src = (int)lane; break;
        case 5:
            for (unsigned l = 0; l < 32; l++)
                if (((mask >> l) & 1) && w.slots[p][l]) out |= 1ull << l;
            break;
    }
    if (kind >= 1 && kind <= 4) {
        // Reading a lane outside the mask is undefined: the NaN pattern, so that it shows.
        out = (src >= 0 && src < 32 && ((mask >> src) & 1)) ? w.slots[p][src] : ~0ull;
    }
    return out;
}

void warp_gather(unsigned mask, const void* in, size_t bytes, void* all, const char* what, const char* file,
                 int line) {
    Runner& r = runner();
    if (bytes == 0 || bytes > kMaxPayload)
        fatal("kernel %s: %s at %s:%d gathers %zu bytes per lane: 1 to %zu allowed", r.kernel, what, file, line, bytes,
              kMaxPayload);
    const uint64_t p = warp_meet(r, mask, 0, in, bytes, 6, 32, what, file, line);
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    // Lanes outside the mask read as the NaN pattern.
    EMU_IGNORE_BEGIN();
    for (unsigned l = 0; l < 32; l++) {
        unsigned char* dst = static_cast<unsigned char*>(all) + l * bytes;
        if ((mask >> l) & 1) memcpy(dst, w.payload[p][l], bytes);
        else memset(dst, 0xff, bytes);
    }
    EMU_IGNORE_END();
}

void* shared_static(const void* site, size_t bytes, const char* name, const char* file, int line) {
    Runner& r = runner();
    SharedArray* a = nullptr;
    for (auto& s : r.arrays)
        if (s.site == site) a = &s;
    // The allocation and the NaN fill are not this thread's writes (the race mode must not see them as such).
    EMU_IGNORE_BEGIN();
    if (!a) {
        r.arrays.push_back(SharedArray{site, exact_alloc(bytes, 128), bytes, name, file, line, 0});
        a = &r.arrays.back();
    }
    if (a->launch != r.launch_id) {  // the first thread of this launch to meet it
        a->launch = r.launch_id;
        r.static_bytes += bytes;
        if (r.static_bytes > kStaticSharedLimit)
            fatal("kernel %s: static __shared__ memory of %zu bytes (with '%s', %s:%d) is above the 48 KB (49152 "
                  "bytes) per block that sm_80 and sm_90 allow: use dynamic shared memory and cudaFuncSetAttribute",
                  r.kernel, r.static_bytes, name, file, line);
        memset(a->base, 0xff, bytes);
    }
    EMU_IGNORE_END();
    return a->base;
}

void at_thread_exit(void (*check)()) {
    void (*none)() = nullptr;
    if (!g_thread_exit_check.compare_exchange_strong(none, check) && none != check)
        fatal("emu::at_thread_exit: a second, different check (one is supported)");
}

const char* current_kernel() { return runner().kernel; }

void* dynamic_shared_base() {
    Runner& r = runner();
    return r.dyn_base;
}

// ---- memcheck's report -----------------------------------------------------------------------------------------
// Where an address lies against one allocation [base, base + bytes): "inside", "N bytes past the end of",
// "N bytes before"; the distance (0 inside) ranks the candidates.
static size_t distance_to(uintptr_t a, uintptr_t base, size_t bytes, char* how, size_t n) {
    if (a >= base && a < base + bytes) {
        snprintf(how, n, "%zu bytes into", (size_t)(a - base));
        return 0;
    }
    if (a >= base + bytes) {
        snprintf(how, n, "%zu bytes past the end of", (size_t)(a - base - bytes));
        return a - base - bytes + 1;
    }
    snprintf(how, n, "%zu bytes before", (size_t)(base - a));
    return base - a;
}

// What the address belongs to on this worker: a static __shared__ array of the running launch, the block's
// dynamic shared memory, or (runtime.cpp) a cudaMalloc allocation; the nearest one, as AddressSanitizer puts
// a redzone after each.
void describe_address(const void* addr, char* out, size_t n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    size_t best = SIZE_MAX;
    char how[64];
    snprintf(out, n, "an address in no allocation the emulator knows");
    if (Runner* r = g_runner) {
        for (auto& s : r->arrays) {
            const size_t d = distance_to(a, reinterpret_cast<uintptr_t>(s.base), s.bytes, how, sizeof how);
            if (d < best) {
                best = d;
                snprintf(out, n, "%s the shared array '%s' (%zu bytes, declared at %s:%d)", how, s.name, s.bytes, s.file,
                         s.line);
            }
        }
        if (r->dyn_allocated) {
            const size_t d = distance_to(a, reinterpret_cast<uintptr_t>(r->dyn_base), r->dyn_bytes, how, sizeof how);
            if (d < best) {
                best = d;
                snprintf(out, n, "%s the dynamic shared memory of the launch (%zu bytes)", how, r->dyn_bytes);
            }
        }
    }
    char dev[256];
    const size_t d = describe_device_allocation(addr, dev, sizeof dev);
    if (d < best) snprintf(out, n, "%s", dev);
}

#ifdef EMU_ASAN
// AddressSanitizer's report (the whole text) has been printed; before the program stops, one line that says it
// in the kernel's terms: which kernel, block and thread, what the address belongs to, and the source line
// (the first frame of the report's stack in the project's sources).
static void memcheck_report(const char* report) {
    // The first frame in a .cu/.cuh file (the kernel's code), else the first one outside the system's files.
    char where[512] = "", fallback[512] = "";
    for (const char* l = report; l && *l;) {
        const char* e = strchr(l, '\n');
        const size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        if (strstr(line, "allocated by") || strstr(line, "freed by")) break;  // the access's stack ends there
        if (len < sizeof line && strchr(line, '#')) {
            char* in = strstr(line, " in ");
            char* loc = strrchr(line, ' ');
            if (in && loc && loc > in + 3 && strchr(loc, ':') && strncmp(loc, " /usr/", 6) && !strstr(line, "libsanitizer")) {
                *loc = 0;
                char text[512];
                snprintf(text, sizeof text, "at %s (in %s)", loc + 1, in + 4);
                if (!fallback[0]) snprintf(fallback, sizeof fallback, "%s", text);
                if (strstr(loc + 1, ".cu:") || strstr(loc + 1, ".cuh:")) {
                    snprintf(where, sizeof where, "%s", text);
                    break;
                }
            }
        }
        l = e ? e + 1 : nullptr;
    }
    if (!where[0]) snprintf(where, sizeof where, "%s", fallback);
    const void* addr = __asan_get_report_address();
    char what[512] = "";
    if (addr) describe_address(addr, what, sizeof what);
    char who[256] = "host code";
    if (Runner* r = g_runner)
        if (r->in_fiber && r->cur)
            snprintf(who, sizeof who, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", r->kernel, blockIdx.x,
                     blockIdx.y, blockIdx.z, r->cur->tid.x, r->cur->tid.y, r->cur->tid.z);
    if (addr)
        fprintf(stderr, "emulated CUDA: memcheck: %s: %s of %zu bytes at %p, %s %s\n", who,
                __asan_get_report_access_type() ? "write" : "read", __asan_get_report_access_size(), addr, what,
                where[0] ? where : "(no source line in the report)");
    else
        fprintf(stderr, "emulated CUDA: memcheck: %s: AddressSanitizer stops the program %s\n", who, where);
    fflush(stderr);
}
__attribute__((constructor)) static void install_memcheck_report() {
    __asan_set_error_report_callback(memcheck_report);
}
#endif

// ---- launches ---------------------------------------------------------------------------------------------------
void launch_grid(const void* fn, const char* name, const char* file, int line, dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, std::function<void()> body) {
    char why[512] = "";
    cudaError_t err = cudaSuccess;
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
        snprintf(why, sizeof why, "a zero dimension (grid %u x %u x %u, block %u x %u x %u)", grid.x, grid.y, grid.z,
                 block.x, block.y, block.z);
        err = cudaErrorInvalidConfiguration;
    } else if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
        snprintf(why, sizeof why, "block %u x %u x %u = %llu threads: at most 1024 threads per block (x, y <= 1024, "
                 "z <= 64)", block.x, block.y, block.z, threads);
        err = cudaErrorInvalidConfiguration;
    } else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        snprintf(why, sizeof why, "grid %u x %u x %u: x at most 2^31 - 1, y and z at most 65535", grid.x, grid.y,
                 grid.z);
        err = cudaErrorInvalidConfiguration;
    } else if (smem > kDynamicSharedOptin) {
        snprintf(why, sizeof why, "%zu bytes of dynamic shared memory: above the opt-in maximum of %zu bytes "
                 "(227 KB, sm_90; sm_80 allows 163 KB)", smem, kDynamicSharedOptin);
        err = cudaErrorInvalidValue;
    } else if (smem > kDynamicSharedDefault) {
        int allowed = 0;
        {
            std::lock_guard<std::mutex> lock(g_attr_mutex);
            auto it = g_max_dyn_smem.find(fn);
            if (it != g_max_dyn_smem.end()) allowed = it->second;
        }
        if ((size_t)allowed < smem) {
            snprintf(why, sizeof why, "%zu bytes of dynamic shared memory: above 48 KB (49152 bytes) it needs "
                     "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, >= %zu) first "
                     "(set: %d)", smem, smem, allowed);
            err = cudaErrorInvalidValue;
        }
    }
    if (err != cudaSuccess) {
        fprintf(stderr, "emulated CUDA: launch of %s (%s:%d) refused: %s\n", name, file, line, why);
        set_last_error(err);
        return;
    }
    // The queued work owns the body (the kernel's arguments): the worker that runs the grid also frees it, after
    // the blocks' end (a host thread holding the last reference would free it unordered with the fibers' reads).
    stream_enqueue(stream, [=, body = std::move(body)]() {
        const unsigned n = (unsigned)threads;
        Runner& r = worker_runner(n);
        r.body = &body;
        r.kernel = name;
        r.launch_id++;
        r.static_bytes = 0;
        // The dynamic shared memory: exactly `smem` bytes, a heap allocation of its own (reused while the
        // size stays the same), so that AddressSanitizer bounds it.
        if (!r.dyn_allocated || r.dyn_bytes != smem) {
            if (r.dyn_allocated) free(r.dyn_base);
            r.dyn_base = exact_alloc(smem, 128);
            r.dyn_allocated = true;
        }
        r.dyn_bytes = smem;
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = uint3{x, y, z};
                    run_block(r, n);
                }
        r.body = nullptr;
        r.kernel = "";
    }, name);
}

void set_func_max_dynamic_smem(const void* fn, int bytes) {
    std::lock_guard<std::mutex> lock(g_attr_mutex);
    g_max_dyn_smem[fn] = bytes;
}

}  // namespace emu
