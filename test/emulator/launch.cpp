// Kernel launches on the emulated device: the launch limits, and a block's CUDA threads as fibers.
//
// A launch runs on its stream's worker thread, one block after another (blockIdx x fastest). Inside a block
// every CUDA thread is a fiber with a stack of its own (pooled per worker, reused by every launch): a fiber
// runs until it reaches __syncthreads, a warp collective (__syncwarp, __shfl*_sync, __ballot_sync) or its
// end, then the scheduler resumes the next runnable one. A thread that never meets a barrier costs one fiber
// start and one switch back. The switch itself is a few instructions (ctx_switch.S), no system call.
//
// Race mode (the emulator built with -fsanitize=thread, test/emulator/emulator.cmake): each fiber is a
// ThreadSanitizer fiber switched to WITHOUT synchronization, and the happens-before edges are exactly CUDA's:
// a __syncthreads orders every thread of the block, a warp collective the lanes of its mask, the block's
// start and end order the block against the host and the next block. Two threads of a block touching the
// same shared (or global) word between barriers, one of them writing, is then a ThreadSanitizer race report.
// Atomics are real atomics, so they are not reported. Blocks run one after another, ordered, so races
// between blocks are NOT found.
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>

#include <cuda_runtime.h>

#include "device.h"
#include "runtime_internal.h"

#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
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

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

extern "C" void emu_ctx_switch(void** save_sp, void* new_sp);  // ctx_switch.S
extern "C" void emu_fiber_trampoline();                          // ctx_switch.S

// Called at the start of every CUDA thread, before the kernel's body: the place for a gdb breakpoint at a
// chosen thread (README, "Run the CUDA kernels without a GPU"):
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
#ifdef EMU_TSAN
    void* tsan = nullptr;
#endif
};

struct Warp {
    unsigned present = 0;  // lanes that exist and have not exited
    unsigned arrived = 0;
    unsigned want = 0;
    int kind = -1;
    const char* what = nullptr;
    uint64_t gen = 0;
    uint64_t slots[2][32];
    // warp_gather's payloads, one per lane and parity of gen (kMaxPayload bytes each), and their size.
    unsigned char payload[2][32][kMaxPayload];
    size_t payload_bytes[2];
    char sync[2];  // ThreadSanitizer sync objects, one per parity of gen
};

// What one worker thread is running: one launch, one block at a time.
struct Runner {
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    void* sched_sp = nullptr;
    Fiber* cur = nullptr;
    const std::function<void()>* body = nullptr;
    const char* kernel = "";
    unsigned live = 0;
    unsigned bar_arrived = 0;
    uint64_t bar_gen = 0;
    char bar_sync[2];
    char block_start, block_end;
    std::vector<char> dyn;  // dynamic shared memory, 128-byte aligned start
    char* dyn_base = nullptr;
    size_t dyn_bytes = 0;
    std::vector<std::pair<void*, size_t>> statics;  // static __shared__ arrays met in this launch
    size_t static_bytes = 0;
#ifdef EMU_TSAN
    void* tsan_sched = nullptr;
#endif
};
thread_local Runner* g_runner = nullptr;

std::mutex g_attr_mutex;
std::map<const void*, int> g_max_dyn_smem;  // cudaFuncSetAttribute(MaxDynamicSharedMemorySize)

Runner& runner() {
    if (!g_runner) fatal("a device function (__syncthreads, a shuffle, __shared__) was called outside a kernel");
    return *g_runner;
}

void switch_to_scheduler(Runner& r, Fiber& f) {
    void* to = r.sched_sp;  // read before the switch of ThreadSanitizer's fiber: the fiber's own access
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(r.tsan_sched, 1 /* no_sync */);
#endif
    emu_ctx_switch(&f.sp, to);
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
    EMU_ACQUIRE(&r.block_start);
    emu_thread_begin(blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z);
    (*r.body)();
    EMU_RELEASE(&r.block_end);
    EMU_IGNORE_BEGIN();
    f->state = kDone;
    r.live--;
    Warp& w = r.warps[f->linear / 32];
    const unsigned bit = 1u << (f->linear % 32);
    w.present &= ~bit;
    if (w.arrived && (w.want & bit))
        fatal("kernel %s: thread (%u,%u,%u) of block (%u,%u,%u) exited while lanes of its warp wait for it in %s "
              "(mask 0x%08x names it): undefined behaviour on a GPU", r.kernel, f->tid.x, f->tid.y, f->tid.z,
              blockIdx.x, blockIdx.y, blockIdx.z, w.what, w.want);
    // An exited thread no longer counts at __syncthreads (as on sm_70 and later).
    if (r.bar_arrived && r.bar_arrived == r.live) release_barrier(r);
    EMU_IGNORE_END();
    switch_to_scheduler(r, *f);
    fatal("a finished fiber was resumed");
}

// The scheduler's own accesses (the fibers' frames, threadIdx, the NaN fill of shared memory) are not the
// kernel's: ThreadSanitizer ignores them (the release/acquire edges still count).
void run_block(Runner& r, unsigned nthreads) {
    EMU_IGNORE_BEGIN();
    // Shared memory starts undefined: the NaN pattern, so that a read of an unwritten word shows.
    if (r.dyn_bytes) memset(r.dyn_base, 0xff, r.dyn_bytes);
    for (auto& s : r.statics) memset(s.first, 0xff, s.second);
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
        for (unsigned i = 0; i < nthreads; i++) {
            Fiber& f = r.fibers[i];
            if (f.state != kReady) continue;
            progress = true;
            r.cur = &f;
            threadIdx = f.tid;
            void* to = f.sp;  // read before the switch of ThreadSanitizer's fiber (the scheduler's access)
#ifdef EMU_TSAN
            __tsan_switch_to_fiber(f.tsan, 1 /* no_sync */);
#endif
            emu_ctx_switch(&r.sched_sp, to);
        }
        if (!progress && r.live) {
            unsigned at_bar = 0;
            std::string warps;
            for (auto& f : r.fibers)
                if (f.state == kBlocked && f.at_barrier) at_bar++;
            for (size_t w = 0; w < r.warps.size(); w++)
                if (r.warps[w].arrived) {
                    char b[160];
                    snprintf(b, sizeof b, " warp %zu: lanes 0x%08x of mask 0x%08x in %s;", w, r.warps[w].arrived,
                             r.warps[w].want, r.warps[w].what);
                    warps += b;
                }
            fatal("kernel %s, block (%u,%u,%u): deadlock: %u of %u live threads wait at __syncthreads, the others "
                  "never reach it;%s (a barrier in divergent code, or a warp collective whose mask names a lane "
                  "that calls a different one)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z, at_bar, r.live,
                  warps.c_str());
        }
    }
    EMU_ACQUIRE(&r.block_end);
    EMU_IGNORE_END();
}

Runner& worker_runner(unsigned nthreads) {
    if (!g_runner) g_runner = new Runner();  // one per worker thread, kept for its lifetime
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
#ifdef EMU_TSAN
    r.tsan_sched = __tsan_get_current_fiber();
#endif
    return r;
}

}  // namespace

// ---- device functions ------------------------------------------------------------------------------------------
void syncthreads() {
    Runner& r = runner();
    Fiber& f = *r.cur;
    EMU_RELEASE(&r.bar_sync[r.bar_gen & 1]);
    const uint64_t parity = r.bar_gen & 1;
    (void)parity;
    EMU_IGNORE_BEGIN();
    f.at_barrier = true;
    r.bar_arrived++;
    const bool last = r.bar_arrived == r.live;
    if (last) release_barrier(r);
    EMU_IGNORE_END();
    if (!last) {
        EMU_IGNORE_BEGIN();
        f.state = kBlocked;
        EMU_IGNORE_END();
        switch_to_scheduler(r, f);
    }
    EMU_ACQUIRE(&r.bar_sync[parity]);
}


namespace {
// The meeting of a warp collective: every lane named in `mask` arrives (with `value`, and for warp_gather a
// payload of `bytes` at `in`); the last to arrive wakes the others. Returns the parity of the slots to read.
uint64_t warp_meet(Runner& r, unsigned mask, uint64_t value, const void* in, size_t bytes, int kind, int width,
                   const char* what) {
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    const unsigned lane = f.linear % 32, bit = 1u << lane;
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fatal("kernel %s: %s with width %d: it must be a power of 2 up to 32", r.kernel, what, width);
    if (!(mask & bit))
        fatal("kernel %s: thread %u calls %s with mask 0x%08x that does not name its own lane %u", r.kernel,
              f.linear, what, mask, lane);
    if (mask & ~w.present)
        fatal("kernel %s, block (%u,%u,%u): %s mask 0x%08x names lanes 0x%08x of warp %u that do not exist or have "
              "exited (undefined behaviour on a GPU)", r.kernel, blockIdx.x, blockIdx.y, blockIdx.z, what, mask,
              mask & ~w.present, f.linear / 32);
    EMU_IGNORE_BEGIN();
    if (w.arrived == 0) {
        w.want = mask;
        w.kind = kind;
        w.what = what;
        w.payload_bytes[w.gen & 1] = bytes;
    } else if (w.want != mask || w.kind != kind || w.payload_bytes[w.gen & 1] != bytes) {
        fatal("kernel %s, block (%u,%u,%u), warp %u: lane %u calls %s with mask 0x%08x while lanes 0x%08x wait in %s "
              "with mask 0x%08x: CUDA requires every lane named in a mask to call the same collective with the same "
              "mask (and this emulator runs one warp collective at a time per warp)", r.kernel, blockIdx.x,
              blockIdx.y, blockIdx.z, f.linear / 32, lane, what, mask, w.arrived, w.what, w.want);
    }
    const uint64_t p = w.gen & 1;
    w.slots[p][lane] = value;
    if (bytes) memcpy(w.payload[p][lane], in, bytes);
    w.arrived |= bit;
    const bool last = w.arrived == w.want;
    EMU_IGNORE_END();
    EMU_RELEASE(&w.sync[p]);
    if (last) {
        EMU_IGNORE_BEGIN();
        w.arrived = 0;
        w.gen++;
        const unsigned base = (f.linear / 32) * 32;
        for (unsigned l = 0; l < 32; l++)
            if ((mask >> l) & 1) {
                Fiber& g = r.fibers[base + l];
                if (&g != &f && g.state == kBlocked && !g.at_barrier) g.state = kReady;
            }
        EMU_IGNORE_END();
    } else {
        EMU_IGNORE_BEGIN();
        f.state = kBlocked;
        EMU_IGNORE_END();
        switch_to_scheduler(r, f);
    }
    EMU_ACQUIRE(&w.sync[p]);
    return p;
}
}  // namespace

uint64_t warp_collective(unsigned mask, uint64_t value, int kind, int arg, int width, const char* what) {
    Runner& r = runner();
    const uint64_t p = warp_meet(r, mask, value, nullptr, 0, kind, width, what);
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    const unsigned lane = f.linear % 32;
    EMU_IGNORE_BEGIN();
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
    EMU_IGNORE_END();
    return out;
}

void warp_gather(unsigned mask, const void* in, size_t bytes, void* all, const char* what) {
    Runner& r = runner();
    if (bytes == 0 || bytes > kMaxPayload)
        fatal("kernel %s: %s gathers %zu bytes per lane: 1 to %zu allowed", r.kernel, what, bytes, kMaxPayload);
    const uint64_t p = warp_meet(r, mask, 0, in, bytes, 6, 32, what);
    Fiber& f = *r.cur;
    Warp& w = r.warps[f.linear / 32];
    EMU_IGNORE_BEGIN();
    // Lanes outside the mask read as the NaN pattern.
    for (unsigned l = 0; l < 32; l++) {
        unsigned char* dst = static_cast<unsigned char*>(all) + l * bytes;
        if ((mask >> l) & 1) memcpy(dst, w.payload[p][l], bytes);
        else memset(dst, 0xff, bytes);
    }
    EMU_IGNORE_END();
}


void shared_static(void* p, size_t bytes, const char* name) {
    Runner& r = runner();
    EMU_IGNORE_BEGIN();
    bool known = false;
    for (auto& s : r.statics)
        if (s.first == p) known = true;
    if (!known) {
        r.statics.emplace_back(p, bytes);
        r.static_bytes += bytes;
        if (r.static_bytes > kStaticSharedLimit)
            fatal("kernel %s: static __shared__ memory of %zu bytes (with '%s') is above the 48 KB (49152 bytes) per "
                  "block that sm_80 and sm_90 allow: use dynamic shared memory and cudaFuncSetAttribute",
                  r.kernel, r.static_bytes, name);
        memset(p, 0xff, bytes);
    }
    EMU_IGNORE_END();
}

void* dynamic_shared_base() {
    Runner& r = runner();
    return r.dyn_base;
}

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
    auto shared_body = std::make_shared<std::function<void()>>(std::move(body));
    stream_enqueue(stream, [=]() {
        const unsigned n = (unsigned)threads;
        Runner& r = worker_runner(n);
        r.body = shared_body.get();
        r.kernel = name;
        r.statics.clear();
        r.static_bytes = 0;
        r.dyn_bytes = smem;
        if (smem) {
            r.dyn.resize(smem + 128);
            r.dyn_base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(r.dyn.data()) + 127) & ~uintptr_t(127));
        } else {
            r.dyn_base = nullptr;
        }
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = uint3{x, y, z};
                    run_block(r, n);
                }
        r.body = nullptr;
    }, name);
}

void set_func_max_dynamic_smem(const void* fn, int bytes) {
    std::lock_guard<std::mutex> lock(g_attr_mutex);
    g_max_dyn_smem[fn] = bytes;
}

}  // namespace emu
