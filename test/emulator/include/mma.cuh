// mma.cuh for the EMULATED device: the functions of layers/mma.cuh (the tensor-core instructions the flash
// attention kernels use) as warp collectives in host C++, each doing what NVIDIA's PTX ISA says the instruction
// does, lane by lane. Test infrastructure only: the real build uses layers/mma.cuh and its inline PTX. The
// emulated build finds this copy first because test/emulator/include comes before the project's folders on
// its include path (test/emulator/cmake/emulator.cmake); layers/mma.cuh must therefore be included from .cu
// files only, by the name "mma.cuh".
//
// Every function is built on emu::warp_gather (emu_device.h): each lane of the warp hands over what it holds
// (fragments, or a row address) and receives every lane's; then it computes its own result from them. Like
// the instructions, the gather orders no memory: an ldmatrix here reads shared memory itself, in the calling
// lane, after the gather, so a write that no __syncthreads ordered before it is a race the race mode sees, and
// with another thread order may read the old value.
//
// Names: lane l = the thread's linear index in its block mod 32, g = l >> 2, t = l & 3 (the ISA's groupID and
// threadID_in_group). Two bf16 values share a 32-bit register, the lower index in the lower 16 bits.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>

namespace emu_mma {

// The emulation's own bookkeeping (the groups of cp.async, kept per worker thread) is not the kernel's memory:
// in the race mode (-fsanitize=thread, one ThreadSanitizer fiber per CUDA thread) it is left out of the race
// analysis, as launch.cpp leaves out the scheduler's. The kernel's own accesses (the copies, ldmatrix's reads)
// are not.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
extern "C" void __tsan_write_range(void* addr, size_t size);
struct Bookkeeping {
    Bookkeeping() { __tsan_ignore_thread_begin(); }
    ~Bookkeeping() { __tsan_ignore_thread_end(); }
};
#else
struct Bookkeeping {};
#endif

// A write of the kernel's by memset, announced to the race mode. g++ (12, -O2) expands a memset of constant size
// inline after ThreadSanitizer's instrumentation pass: cp_async_16's 16-byte NaN fill was one uninstrumented
// store, and the race mode missed a copy issued into a buffer another warp still reads (the double buffer's
// write-after-read, flash_attention_tc.cu). A memset the compiler leaves as a call is seen twice: no harm.
inline void kernel_memset(void* dst, int byte, size_t n) {
    memset(dst, byte, n);
#if defined(__SANITIZE_THREAD__)
    __tsan_write_range(dst, n);
#endif
}

inline unsigned lane_id() {
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32u;
}
[[noreturn]] inline void fail(const char* what, const char* why) {
    fprintf(stderr, "emulated CUDA: %s in block (%u,%u,%u), thread (%u,%u,%u): %s\n", what, blockIdx.x, blockIdx.y,
            blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, why);
    abort();
}
inline float bf16_bits_to_float(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;  // a bf16 is the upper half of an fp32
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float lo_bf16(uint32_t r) { return bf16_bits_to_float((uint16_t)(r & 0xffffu)); }
inline float hi_bf16(uint32_t r) { return bf16_bits_to_float((uint16_t)(r >> 16)); }

}  // namespace emu_mma

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D = A·B + D (layouts: layers/mma.cuh). Every lane hands
// over its four registers of A and two of B; each lane then computes its own four elements of D from the
// elements of A's rows and B's columns it needs, found where the ISA's "Matrix Fragments for mma.m16n8k16 with
// floating point type" places them:
//   A: a_i of lane l is A[g + 8·((i >> 1) & 1)][2t + (i & 1) + 8·(i >> 2)], i = 0..7 (register i/2, half i%2)
//   B: b_i of lane l is B[2t + (i & 1) + 8·(i >> 1)][g],                    i = 0..3
//   D: d_i of lane l is D[g + 8·(i >> 1)][2t + (i & 1)],                    i = 0..3
// (mma_layout runs the A and B formulas forward once, lane and index to row and column, into a table of where
// each element sits.) Rounding: the 16 products of bf16 values are exact in double, their sum and D's old value
// are added in double and rounded once to fp32 (round to nearest). The hardware's order and rounding are
// unspecified and not IEEE's (layers/mma.cuh): results can differ from a GPU's in the last bits of fp32.
namespace emu_mma {
struct Slot {
    uint8_t lane, reg, half;  // lane `lane`, register `reg` of its A (or B) fragment, lower (0) or upper (1) half
};
struct MmaLayout {
    Slot a[16][16], b[16][8];
};
inline const MmaLayout& mma_layout() {
    static const MmaLayout layout = [] {
        MmaLayout m{};
        for (int l = 0; l < 32; l++) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 8; i++)
                m.a[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = {(uint8_t)l, (uint8_t)(i >> 1),
                                                                               (uint8_t)(i & 1)};
            for (int i = 0; i < 4; i++)
                m.b[2 * t + (i & 1) + 8 * (i >> 1)][g] = {(uint8_t)l, (uint8_t)(i >> 1), (uint8_t)(i & 1)};
        }
        return m;
    }();
    return layout;
}
inline float half_of(uint32_t r, int half) { return half ? hi_bf16(r) : lo_bf16(r); }
}  // namespace emu_mma

inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    struct Fragments {
        uint32_t a[4], b[2];
    };
    const Fragments mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
    Fragments all[32];
    emu::warp_gather(0xffffffffu, &mine, sizeof mine, all, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    const emu_mma::MmaLayout& at = emu_mma::mma_layout();
    const unsigned l = emu_mma::lane_id();
    const int g = (int)(l >> 2), t = (int)(l & 3);
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        double s = d[i];
        for (int k = 0; k < 16; k++) {
            const emu_mma::Slot sa = at.a[row][k], sb = at.b[k][col];
            s += (double)emu_mma::half_of(all[sa.lane].a[sa.reg], sa.half) *
                 (double)emu_mma::half_of(all[sb.lane].b[sb.reg], sb.half);
        }
        d[i] = (float)s;
    }
}

// ldmatrix.sync.aligned.m8n8.x{N}{.trans}.shared.b16: every lane hands over its row address; lanes 8j .. 8j+7
// give the rows of matrix j (the others' addresses are not used). Then each lane reads its own two elements of
// each matrix from (shared) memory: without .trans M_j[g][2t], M_j[g][2t+1]; with .trans M_j[2t][g], M_j[2t+1][g].
// A row address that is not 16-byte aligned stops the kernel, as the ISA requires the alignment.
template <int N, bool Trans>
inline void emu_ldmatrix(uint32_t* r, const void* row, const char* what) {
    const void* all[32];
    emu::warp_gather(0xffffffffu, &row, sizeof row, all, what);
    for (int j = 0; j < 8 * N; j++)
        if (reinterpret_cast<uintptr_t>(all[j]) % 16 != 0) {
            char why[96];
            snprintf(why, sizeof why, "lane %d's row address %p is not 16-byte aligned", j, all[j]);
            emu_mma::fail(what, why);
        }
    const unsigned l = emu_mma::lane_id();
    const unsigned g = l >> 2, t = l & 3;
    for (int j = 0; j < N; j++) {
        uint16_t lo, hi;
        if (!Trans) {
            const char* p = static_cast<const char*>(all[8 * j + g]);
            memcpy(&lo, p + 2 * (2 * t), 2);
            memcpy(&hi, p + 2 * (2 * t + 1), 2);
        } else {
            memcpy(&lo, static_cast<const char*>(all[8 * j + 2 * t]) + 2 * g, 2);
            memcpy(&hi, static_cast<const char*>(all[8 * j + 2 * t + 1]) + 2 * g, 2);
        }
        r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
inline void ldmatrix_x1(uint32_t r[1], const void* row) {
    emu_ldmatrix<1, false>(r, row, "ldmatrix.sync.aligned.m8n8.x1.shared.b16");
}
inline void ldmatrix_x2(uint32_t r[2], const void* row) {
    emu_ldmatrix<2, false>(r, row, "ldmatrix.sync.aligned.m8n8.x2.shared.b16");
}
inline void ldmatrix_x4(uint32_t r[4], const void* row) {
    emu_ldmatrix<4, false>(r, row, "ldmatrix.sync.aligned.m8n8.x4.shared.b16");
}
inline void ldmatrix_x1_trans(uint32_t r[1], const void* row) {
    emu_ldmatrix<1, true>(r, row, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16");
}
inline void ldmatrix_x2_trans(uint32_t r[2], const void* row) {
    emu_ldmatrix<2, true>(r, row, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16");
}
inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    emu_ldmatrix<4, true>(r, row, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
}

// cp.async.cg.shared.global, cp.async.commit_group, cp.async.wait_group: asynchronous for real. Between the issue
// and the wait the ISA leaves the destination's bytes undefined, and the emulation makes them so at both ends: at
// the issue the 16 bytes become the NaN pattern (a warp that still reads the old tile there, because no
// __syncthreads kept the copy back, reads NaN: the write-after-read of double buffering), and the copied bytes
// land only at the wait: the thread's open group is closed by cp_async_commit, and cp_async_wait<N> carries out,
// in the waiting thread, every copy of all but the N most recent closed groups. So a kernel that reads its tile
// before the wait reads NaN, and one whose other threads read it without a __syncthreads after the wait races
// with the copy (the race mode sees both writes as the issuing thread's).
// Each CUDA thread has its own groups (kept per worker thread, by the thread's index in the block). A thread
// that returns from the kernel with copies issued and never waited for stops the program (the check runs at
// every thread's exit, emu::at_thread_exit: the ISA leaves such copies' bytes undefined, and a kernel that
// reads its tile only after the next launch starts, or never, is wrong either way).
namespace emu_mma {
struct AsyncCopy {
    void* dst;
    const void* src;
    int src_bytes;
};
struct AsyncGroups {
    std::vector<AsyncCopy> open;                 // issued, not yet committed
    std::vector<std::vector<AsyncCopy>> closed;  // committed, oldest first
    uint3 block{};
    dim3 grid{};
};
inline std::vector<AsyncGroups>& per_thread_groups() {
    static thread_local std::vector<AsyncGroups> per_thread;  // one worker runs one block at a time
    return per_thread;
}
inline unsigned thread_in_block() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline bool same_block(const AsyncGroups& s) {
    return s.block.x == blockIdx.x && s.block.y == blockIdx.y && s.block.z == blockIdx.z && s.grid.x == gridDim.x &&
           s.grid.y == gridDim.y && s.grid.z == gridDim.z;
}
// The check at a thread's exit: none of its copies left pending.
inline void check_all_waited() {
    Bookkeeping b;
    std::vector<AsyncGroups>& v = per_thread_groups();
    const unsigned i = thread_in_block();
    if (i >= v.size() || !same_block(v[i])) return;  // this thread issued no cp.async
    const size_t pending = v[i].open.size() + [&] {
        size_t n = 0;
        for (const auto& g : v[i].closed) n += g.size();
        return n;
    }();
    if (pending) {
        char why[256];
        snprintf(why, sizeof why, "kernel %s: the thread ends with %zu cp.async copies never waited for "
                 "(cp_async_wait<0>, cp.async.wait_group 0, before the thread exits)", emu::current_kernel(), pending);
        fail("cp.async", why);
    }
    v[i].closed.clear();  // empty groups committed and never waited for are complete: nothing pends
}
inline AsyncGroups& async_groups() {
    static const bool registered = (emu::at_thread_exit(check_all_waited), true);
    (void)registered;
    std::vector<AsyncGroups>& v = per_thread_groups();
    const unsigned i = thread_in_block();
    if (v.size() <= i) v.resize(i + 1);
    AsyncGroups& s = v[i];
    if (!same_block(s)) {  // this thread's first cp.async in this block (its exit check left nothing pending)
        s.open.clear();
        s.closed.clear();
        s.block = blockIdx;
        s.grid = gridDim;
    }
    return s;
}
}  // namespace emu_mma

// ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to zero (layers/mma.cuh). exp2f here is the
// host's (correctly rounded or within an ulp); the device's approximation differs from it by about 2^-22 relative.
inline float ex2_approx_ftz(float x) {
    if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.f, x);
    const float y = exp2f(x);
    return std::fpclassify(y) == FP_SUBNORMAL ? 0.f : y;
}

inline void cp_async_16(void* dst_smem, const void* src_global, int src_bytes) {
    if (src_bytes < 0 || src_bytes > 16) emu_mma::fail("cp.async.cg.shared.global", "src-size outside 0..16");
    if (reinterpret_cast<uintptr_t>(dst_smem) % 16 || (src_bytes && reinterpret_cast<uintptr_t>(src_global) % 16))
        emu_mma::fail("cp.async.cg.shared.global", "an address that is not 16-byte aligned");
    {
        emu_mma::Bookkeeping b;
        emu_mma::async_groups().open.push_back({dst_smem, src_global, src_bytes});
    }
    emu_mma::kernel_memset(dst_smem, 0xff, 16);  // undefined until the wait
}
inline void cp_async_commit() {
    emu_mma::Bookkeeping b;
    emu_mma::AsyncGroups& s = emu_mma::async_groups();
    s.closed.push_back(std::move(s.open));  // an empty group is allowed: it is complete at once
    s.open.clear();
}
template <int N>
inline void cp_async_wait() {
    std::vector<emu_mma::AsyncCopy> due;  // the copies of all but the N most recent groups, oldest first
    {
        emu_mma::Bookkeeping b;
        emu_mma::AsyncGroups& s = emu_mma::async_groups();
        while (s.closed.size() > (size_t)N) {
            due.insert(due.end(), s.closed.front().begin(), s.closed.front().end());
            s.closed.erase(s.closed.begin());
        }
    }
    for (const emu_mma::AsyncCopy& c : due) {  // the kernel's own writes, the race mode sees them
        memcpy(c.dst, c.src, (size_t)c.src_bytes);
        emu_mma::kernel_memset(static_cast<char*>(c.dst) + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
    }
}
