// mma.cuh — the tensor-core instructions the flash attention kernels use (layers/flash_attention_tc.cu), as
// inline functions around inline PTX: one warp-wide matrix product, the matrix loads from shared memory that
// feed it, and the asynchronous copy from global to shared memory. Each function says which PTX instruction
// it is and, lane by lane, which matrix elements each register holds: the layouts of NVIDIA's PTX ISA (the
// sections named at each function), which the kernels rely on without looking them up again.
//
// The emulated GPU (test/emulator) replaces this one header with test/emulator/include/mma.cuh: the same
// functions as warp collectives that implement the ISA's layouts element by element, so a kernel that
// assumes another layout computes wrong numbers there too (test/layers/test_mma.cu). For that to work,
// include it from .cu files only, as "mma.cuh" (a header of layers/ that included it would always find this
// copy, its own folder's, first).
//
// Names used in every layout below, for lane l of the warp (%laneid):
//   g = l >> 2   the lane's group of four (the ISA's groupID), 0..7
//   t = l & 3    the lane's place in its group (threadID_in_group), 0..3
// Two bf16 values share one 32-bit register: the element with the lower index in the lower 16 bits.
//
// Needs sm_80 or later (bf16 mma and cp.async); the real build compiles for sm_80 and sm_90. On an older
// architecture the functions trap, and the host refuses the launch first (flash_attention_tc.cu).
#pragma once
#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MM_MMA_UNSUPPORTED 1  // compiled for an architecture without these instructions: trap if reached
#endif

// D = A·B + D, A 16×16 bf16 (row-major), B 16×8 bf16 ("col": each column of B is contiguous in K), D 16×8 fp32,
// one warp: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Matrix Fragments for mma.m16n8k16
// with floating point type"). Every lane of the warp must call it (.sync.aligned).
//   a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
//   a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]       (two bf16 each: a0..a7 of the ISA)
//   b[0] = B[2t, 2t+1][g]          b[1] = B[2t+8, 2t+9][g]           (rows k, column n = g)
//   d[0], d[1] = D[g][2t], D[g][2t+1]      d[2], d[3] = D[g + 8][2t], D[g + 8][2t+1]
// So a row of D lives in the four lanes of one group, and D's layout is A's, pairwise: two D tiles side by
// side (columns 0..7 and 8..15), packed to bf16, are the A operand of a next product without any shuffle.
// Accumulation is in fp32, in an order and with a rounding the ISA does not specify: Fasi et al., "Numerical
// behavior of NVIDIA tensor cores" (PeerJ Computer Science 7:e330, 2021), measured on V100, T4 and A100 that the
// products are exact and the sum is not IEEE round-to-nearest (terms aligned to the largest, then truncated).
// The emulated version sums exactly and rounds once, to nearest: the two may differ in the last bits of fp32.
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// 2^x, ex2.approx.ftz.f32 (PTX ISA, "Floating Point Instructions: ex2"): the hardware's approximation (MUFU.EX2,
// a relative error of about 2^-22, as exp2f's) with subnormal inputs and results flushed to zero. exp2f, compiled
// without -ftz, wraps the same instruction in a guard for subnormals (a compare and two predicated multiplies);
// the softmax needs none: a probability below 2^-126 is 0 to its sums, and 2^-inf = +0 still masks a key.
__device__ __forceinline__ float ex2_approx_ftz(float x) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
    return x;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

// ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): N = 1, 2
// or 4 matrices of 8×8 b16 elements from shared memory, one register per matrix per lane. Every lane of the warp must
// call it. Lane l hands over `row`, the shared-memory address of one matrix row: lanes 8j .. 8j+7 give rows 0..7 of
// matrix j (for .x1 only lanes 0..7 are read, for .x2 lanes 0..15; the others' addresses are ignored). A row is 8
// consecutive b16 values (16 bytes) and must be 16-byte aligned; the rows of a matrix may lie anywhere.
//   without .trans: r[j] = M_j[g][2t], M_j[g][2t+1]         (row g, two neighbouring columns)
//   with .trans:    r[j] = M_j[2t][g], M_j[2t+1][g]         (column g, two neighbouring rows)
// Without .trans, four matrices at (rows 0..7 | 8..15) × (columns 0..7 | 8..15) of a row-major 16×16 tile —
// lane l pointing at row l & 15, column 8·(l >> 4) — are exactly the A fragment of mma_bf16_16816. An 8×8
// block of a row-major [n][k] matrix (rows of K, say) is a B fragment register as it is (b = B[2t..][g] =
// K[g][2t..]); a block of a row-major [k][n] matrix (rows of V) is one with .trans.
// A weak load: it sees other threads' writes only after a barrier (__syncthreads) that orders them.
__device__ __forceinline__ unsigned mma_smem_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldmatrix_x1(uint32_t r[1], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(mma_smem_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t r[1], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(mma_smem_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_address(row)));
#endif
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (PTX ISA, "Data Movement and Conversion Instructions:
// cp.async"): this thread starts a copy of 16 bytes from global to shared memory that does not pass through registers;
// the first src_bytes (0..16) come from src, the rest of the 16 are zero-filled (src_bytes = 0 reads nothing: a zero
// row past the end of a matrix). Both addresses 16-byte aligned. The copy belongs to the thread's current group:
// cp_async_commit closes the group, and cp_async_wait<N> (cp.async.wait_group N) waits until at most the N most recent
// groups are still in flight. Only then are the bytes this thread copied visible to it; to the other threads of the
// block, after a __syncthreads that follows the wait. Until the wait the destination may hold the old bytes, the new
// ones, or a mix: reading it earlier is a race, which the emulated version makes visible (its copies land at the wait).
__device__ __forceinline__ void cp_async_16(void* dst_smem, const void* src_global, int src_bytes) {
#ifdef MM_MMA_UNSUPPORTED
    __trap();
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mma_smem_address(dst_smem)),
                 "l"(__cvta_generic_to_global(src_global)), "r"(src_bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef MM_MMA_UNSUPPORTED
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef MM_MMA_UNSUPPORTED
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
