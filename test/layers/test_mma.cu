// test_mma.cu — the tensor-core wrappers of layers/mma.cuh (on the emulated GPU: test/emulator/include/mma.cuh)
// against plain matrix products, with the fragment layouts of NVIDIA's PTX ISA transcribed here a second time,
// in the ISA's own words, so that a slip in either transcription shows.
//
// --cpu (label unit): this file's transcription of the layouts puts every element of A, B and D in exactly one
//   (lane, register) slot.
// --gpu (label gpu):
//  - mma_bf16_16816 with A, B, D loaded and stored lane by lane from global memory by the ISA's formulas:
//    D = C + A·B against a double product, on random values and on integer values (every product and sum
//    exact in fp32, so the result must be exact);
//  - ldmatrix_x{1,2,4}{,_trans}: each lane's registers against the ISA's "thread i receives row i/4, elements
//    2(i%4) and 2(i%4)+1" (and the transpose), rows scattered through shared memory, the addresses of the lanes
//    the instruction does not read pointing elsewhere;
//  - a 16×16×16 product whose A and B fragments come from ldmatrix, once per load of the wrapper set: A by x4,
//    x2, x1 from A and by x4, x2, x1 .trans from Aᵀ; B by x4, x2, x1 .trans from B and by x4, x2, x1 from Bᵀ;
//  - cp_async_16 with 16, 8 and 0 source bytes (zero fill), two groups, wait<1> then wait<0>.
// Negative controls (the emulated build registers them as tests that must fail, test/layers/layers.cmake):
//   --gpu-wrong-layout            the mma test with A's registers 1 and 2 swapped (rows g+8 taken for columns
//                                 8..15): the product must come out wrong;
//   --gpu-cp-async-without-wait   the cp.async test without its waits: the tile is read before the copies land.
#include <random>
#include "layers/runtime.h"
#include "mma.cuh"  // layers/mma.cuh, or on the emulated GPU test/emulator/include/mma.cuh (layers.cmake)
#include "test/test_util.h"

// ---- the ISA's layouts, as it writes them ("Matrix Fragments for mma.m16n8k16 with floating point type") -----
// groupID = laneid >> 2, threadID_in_group = laneid % 4.
struct RowCol {
    int row, col;
};
// Multiplicand A (16×16), a_i, i = 0..7 (register i / 2, lower half for even i):
//   row = groupID for a_i where 0 <= i < 2 || 4 <= i < 6, groupID + 8 otherwise
//   col = threadID_in_group * 2 + (i & 1) for a_i where i < 4, + 8 for i >= 4
__host__ __device__ inline RowCol isa_a(int lane, int i) {
    const int group = lane >> 2, tig = lane % 4;
    return {(i < 2 || (4 <= i && i < 6)) ? group : group + 8, tig * 2 + (i & 1) + (i < 4 ? 0 : 8)};
}
// Multiplicand B (16×8), b_i, i = 0..3: row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID
__host__ __device__ inline RowCol isa_b(int lane, int i) {
    return {(lane % 4) * 2 + (i & 1) + (i < 2 ? 0 : 8), lane >> 2};
}
// Accumulators C, D (16×8), c_i, i = 0..3: row = groupID for i < 2, groupID + 8 otherwise;
// col = threadID_in_group * 2 + (i & 1)
__host__ __device__ inline RowCol isa_c(int lane, int i) {
    return {i < 2 ? lane >> 2 : (lane >> 2) + 8, (lane % 4) * 2 + (i & 1)};
}

static std::mt19937 g_rng(20240613);

// =========================================================================================================
// CPU checks: every element in exactly one slot
// =========================================================================================================

static void cpu_checks() {
    int a[16][16] = {}, b[16][8] = {}, c[16][8] = {};
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 8; i++) a[isa_a(lane, i).row][isa_a(lane, i).col]++;
        for (int i = 0; i < 4; i++) b[isa_b(lane, i).row][isa_b(lane, i).col]++;
        for (int i = 0; i < 4; i++) c[isa_c(lane, i).row][isa_c(lane, i).col]++;
    }
    bool once = true;
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) once &= a[r][k] == 1 && (k >= 8 || (b[r][k] == 1 && c[r][k] == 1));
    CHECK(once, "the A, B and D layouts place every element in exactly one (lane, register) slot");
    // A pair of registers of D (d0, d1 / d2, d3) is a pair of A (a0, a1 / a2, a3) of the same lane: the fact
    // the kernels use to feed a product's output into the next product's A without a shuffle.
    bool pairs = true;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++)
            pairs &= isa_c(lane, i).row == isa_a(lane, i).row && isa_c(lane, i).col == isa_a(lane, i).col &&
                     isa_c(lane, i).row == isa_a(lane, i + 4).row && isa_c(lane, i).col + 8 == isa_a(lane, i + 4).col;
    CHECK(pairs, "D's layout of columns 0..7 and 8..15 is A's");
}

// =========================================================================================================
// GPU checks
// =========================================================================================================

// Two bf16 in one register, the first in the lower 16 bits.
__device__ inline uint32_t pack_pair(bf16 lo, bf16 hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | ((uint32_t)h << 16);
}

template <class T>
static T* to_device(const std::vector<T>& v) {
    T* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <class T>
static std::vector<T> to_host_and_free(T* p, size_t n) {
    std::vector<T> v(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(p));
    return v;
}
static std::vector<bf16> bf16_matrix(int n, bool integers) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::uniform_int_distribution<int> k(-8, 8);
    std::vector<bf16> m(n);
    for (auto& x : m) x = from_f32<bf16>(integers ? (float)k(g_rng) : u(g_rng));
    return m;
}

// ---- mma with fragments from global memory --------------------------------------------------------------
// One warp: a (16×16) and b (16×8 as [k][n]) bf16 row-major, c and d (16×8) f32 row-major. swap_a12: the
// negative control's wrong layout.
__global__ void mma_global_kernel(const bf16* a, const bf16* b, const float* c, float* d, bool swap_a12) {
    const int lane = threadIdx.x;
    uint32_t ra[4], rb[2];
    float acc[4];
    for (int r = 0; r < 4; r++) {
        const RowCol lo = isa_a(lane, 2 * r), hi = isa_a(lane, 2 * r + 1);
        ra[r] = pack_pair(a[lo.row * 16 + lo.col], a[hi.row * 16 + hi.col]);
    }
    if (swap_a12) {
        const uint32_t x = ra[1];
        ra[1] = ra[2];
        ra[2] = x;
    }
    for (int r = 0; r < 2; r++) {
        const RowCol lo = isa_b(lane, 2 * r), hi = isa_b(lane, 2 * r + 1);
        rb[r] = pack_pair(b[lo.row * 8 + lo.col], b[hi.row * 8 + hi.col]);
    }
    for (int i = 0; i < 4; i++) acc[i] = c[isa_c(lane, i).row * 8 + isa_c(lane, i).col];
    mma_bf16_16816(acc, ra, rb);
    for (int i = 0; i < 4; i++) d[isa_c(lane, i).row * 8 + isa_c(lane, i).col] = acc[i];
}

// D = C + A·B in double, and Σ|C| + |A|·|B| (the scale of the rounding error), for A m×16, B 16×n, C m×n.
static void reference_product(const std::vector<bf16>& a, const std::vector<bf16>& b, const std::vector<float>& c,
                              int m, int n, std::vector<double>& d, std::vector<double>& scale) {
    d.assign((size_t)m * n, 0.0), scale.assign((size_t)m * n, 0.0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = c[i * n + j], t = fabs(c[i * n + j]);
            for (int k = 0; k < 16; k++) {
                const double p = (double)to_f32(a[i * 16 + k]) * to_f32(b[k * n + j]);
                s += p, t += fabs(p);
            }
            d[i * n + j] = s, scale[i * n + j] = t;
        }
}
// The largest |got − want| / scale (scale floored at 1e-30): fp32 accumulation of 17 terms, however ordered
// and rounded (layers/mma.cuh), stays below 17 · 2^-23 ≈ 2e-6 of the sum of magnitudes.
static double worst_error(const std::vector<float>& got, const std::vector<double>& want,
                          const std::vector<double>& scale) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double e = fabs((double)got[i] - want[i]) / std::max(scale[i], 1e-30);
        worst = std::isnan(got[i]) ? INFINITY : std::max(worst, e);
    }
    return worst;
}

// Returns the worst error of one mma from global fragments (swap_a12: the wrong layout).
static double run_mma_global(bool integers, bool swap_a12) {
    const std::vector<bf16> a = bf16_matrix(256, integers), b = bf16_matrix(128, integers);
    std::vector<float> c(128);
    for (size_t i = 0; i < c.size(); i++) c[i] = integers ? (float)((int)(i % 11) - 5) : (float)(i % 7) * 0.25f - 0.7f;
    bf16 *da = to_device(a), *db = to_device(b);
    float* dc = to_device(c);
    float* dd = to_device(std::vector<float>(128, NAN));
    mma_global_kernel<<<1, 32>>>(da, db, dc, dd, swap_a12);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> d = to_host_and_free(dd, 128);
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dc));
    std::vector<double> want, scale;
    reference_product(a, b, c, 16, 8, want, scale);
    return integers ? (bitwise_equal(d, to_float(want)) ? 0.0 : INFINITY) : worst_error(d, want, scale);
}

static void test_mma_global() {
    const double e = run_mma_global(false, false);
    CHECK(e < 2e-6, "mma_bf16_16816 (fragments by the ISA's layout) == C + A·B in double: worst error %g", e);
    CHECK(run_mma_global(true, false) == 0.0, "mma_bf16_16816 on integers: exact");
}

// ---- ldmatrix, lane by lane -------------------------------------------------------------------------------
// N matrices of 8×8 b16, given in global memory as m[j][r][c], staged into shared memory with their rows
// scattered: row r of matrix j at smem + (8·(N−1−j) + (7−r))·kScatter (reverse order, 16-byte aligned rows with
// a 16-byte gap). Lane l < 8N gives row l & 7 of matrix l >> 3; the lanes past 8N give row 0 of matrix 0's
// neighbour slot (a row of zeros), which the instruction must not read. out[l·N + j] = the lane's register j.
constexpr int kScatter = 16;  // elements between two rows in shared memory (32 bytes: 16 of data, 16 of gap)
template <int N, bool Trans>
__global__ void ldmatrix_kernel(const uint16_t* m, uint32_t* out) {
    extern __shared__ uint16_t smem[];  // (8N + 1) rows of kScatter
    const int lane = threadIdx.x;
    for (int i = lane; i < (8 * N + 1) * kScatter; i += 32) smem[i] = 0;
    __syncthreads();
    for (int i = lane; i < 8 * N * 8; i += 32) {
        const int j = i / 64, r = (i / 8) % 8, c = i % 8;
        smem[(8 * (N - 1 - j) + (7 - r)) * kScatter + c] = m[i];
    }
    __syncthreads();
    const int j = lane >> 3, r = lane & 7;
    const uint16_t* row = lane < 8 * N ? smem + (8 * (N - 1 - j) + (7 - r)) * kScatter : smem + 8 * N * kScatter;
    uint32_t reg[4];
    if (N == 1) Trans ? ldmatrix_x1_trans(reg, row) : ldmatrix_x1(reg, row);
    if (N == 2) Trans ? ldmatrix_x2_trans(reg, row) : ldmatrix_x2(reg, row);
    if (N == 4) Trans ? ldmatrix_x4_trans(reg, row) : ldmatrix_x4(reg, row);
    for (int q = 0; q < N; q++) out[lane * N + q] = reg[q];
}

template <int N, bool Trans>
static void test_ldmatrix() {
    std::vector<uint16_t> m(64 * N);
    for (size_t i = 0; i < m.size(); i++) m[i] = (uint16_t)(1000 + i);  // distinct: a wrong element shows
    uint16_t* dm = to_device(m);
    uint32_t* dout = to_device(std::vector<uint32_t>(32 * N, 0xdeadbeefu));
    ldmatrix_kernel<N, Trans><<<1, 32, (8 * N + 1) * kScatter * sizeof(uint16_t)>>>(dm, dout);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<uint32_t> out = to_host_and_free(dout, 32 * N);
    CUDA_CHECK(cudaFree(dm));
    // The ISA ("ldmatrix"): thread i receives, of each matrix, row i/4 and elements 2·(i%4), 2·(i%4) + 1 of it;
    // with .trans the matrix is read column-major: column i/4, elements 2·(i%4), 2·(i%4) + 1 of that column.
    int wrong = 0;
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < N; j++) {
            const int major = i / 4, minor0 = 2 * (i % 4);
            auto at = [&](int minor) {
                const int r = Trans ? minor : major, c = Trans ? major : minor;
                return (uint32_t)m[j * 64 + r * 8 + c];
            };
            wrong += out[i * N + j] != (at(minor0) | (at(minor0 + 1) << 16));
        }
    CHECK(wrong == 0, "ldmatrix_x%d%s: every lane's registers as the ISA lays them out (%d of %d wrong)", N,
          Trans ? "_trans" : "", wrong, 32 * N);
}

// ---- a 16×16×16 product through ldmatrix, once per load ----------------------------------------------------
// Shared memory (bf16, rows kLd apart): A [m][k], At = Aᵀ [k][m], B [k][n], Bt = Bᵀ [n][k], each 16×16. d =
// C + A·B (16×16 f32 row-major) from two mma over n 0..7 and 8..15. kLoad picks the loads: 0 A x4 + B x4.trans,
// 1 A x2 + B x2.trans, 2 A x1 + B x1.trans, 3 Aᵀ x4.trans + Bᵀ x4, 4 Aᵀ x2.trans + Bᵀ x2, 5 Aᵀ x1.trans + Bᵀ x1.
constexpr int kLd = 24;  // 48 bytes: rows stay 16-byte aligned
__device__ inline void load_a(int load, const bf16* As, const bf16* At, int l, uint32_t a[4]) {
    // a[q] is the 8×8 block of A at rows 8·(q & 1), columns 8·(q >> 1) (mma_bf16_16816's a[0..3]).
    switch (load) {
        case 0: ldmatrix_x4(a, As + (l & 15) * kLd + (l >> 4) * 8); break;
        case 1:
            for (int h = 0; h < 2; h++) ldmatrix_x2(a + 2 * h, As + (l & 15) * kLd + 8 * h);
            break;
        case 2:
            for (int q = 0; q < 4; q++) ldmatrix_x1(a + q, As + ((l & 7) + 8 * (q & 1)) * kLd + 8 * (q >> 1));
            break;
        // From Aᵀ: block q of A is the transpose of Aᵀ's block at rows 8·(q >> 1), columns 8·(q & 1).
        case 3: ldmatrix_x4_trans(a, At + (8 * ((l >> 3) >> 1) + (l & 7)) * kLd + 8 * ((l >> 3) & 1)); break;
        case 4:
            for (int h = 0; h < 2; h++) ldmatrix_x2_trans(a + 2 * h, At + (8 * h + (l & 7)) * kLd + 8 * ((l >> 3) & 1));
            break;
        default:
            for (int q = 0; q < 4; q++)
                ldmatrix_x1_trans(a + q, At + (8 * (q >> 1) + (l & 7)) * kLd + 8 * (q & 1));
    }
}
__device__ inline void load_b(int load, const bf16* Bs, const bf16* Bt, int l, uint32_t b[2][2]) {
    // b[nt][h] is the 8×8 block of B at rows (k) 8h, columns (n) 8·nt.
    uint32_t r[4];
    switch (load) {
        case 0:  // from B [k][n]: block (k 8·(j & 1), n 8·(j >> 1)) as matrix j
            ldmatrix_x4_trans(r, Bs + (8 * ((l >> 3) & 1) + (l & 7)) * kLd + 8 * (l >> 4));
            b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
            break;
        case 1:
            for (int nt = 0; nt < 2; nt++) ldmatrix_x2_trans(b[nt], Bs + (8 * ((l >> 3) & 1) + (l & 7)) * kLd + 8 * nt);
            break;
        case 2:
            for (int nt = 0; nt < 2; nt++)
                for (int h = 0; h < 2; h++) ldmatrix_x1_trans(&b[nt][h], Bs + (8 * h + (l & 7)) * kLd + 8 * nt);
            break;
        case 3:  // from Bᵀ [n][k]: block (n 8·(j >> 1), k 8·(j & 1)) as matrix j, no transpose needed
            ldmatrix_x4(r, Bt + (8 * (l >> 4) + (l & 7)) * kLd + 8 * ((l >> 3) & 1));
            b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
            break;
        case 4:
            for (int nt = 0; nt < 2; nt++) ldmatrix_x2(b[nt], Bt + (8 * nt + (l & 7)) * kLd + 8 * ((l >> 3) & 1));
            break;
        default:
            for (int nt = 0; nt < 2; nt++)
                for (int h = 0; h < 2; h++) ldmatrix_x1(&b[nt][h], Bt + (8 * nt + (l & 7)) * kLd + 8 * h);
    }
}
__global__ void product_kernel(const bf16* a, const bf16* b, const float* c, float* d, int load) {
    extern __shared__ bf16 tiles[];  // As, At, Bs, Bt: 16 rows of kLd each
    bf16 *As = tiles, *At = As + 16 * kLd, *Bs = At + 16 * kLd, *Bt = Bs + 16 * kLd;
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) {
        const int r = i / 16, k = i % 16;
        As[r * kLd + k] = a[i];
        At[k * kLd + r] = a[i];
        Bs[r * kLd + k] = b[i];
        Bt[k * kLd + r] = b[i];
    }
    __syncthreads();
    uint32_t ra[4], rb[2][2];
    load_a(load, As, At, l, ra);
    load_b(load, Bs, Bt, l, rb);
    for (int nt = 0; nt < 2; nt++) {
        float acc[4];
        for (int i = 0; i < 4; i++) acc[i] = c[isa_c(l, i).row * 16 + 8 * nt + isa_c(l, i).col];
        mma_bf16_16816(acc, ra, rb[nt]);
        for (int i = 0; i < 4; i++) d[isa_c(l, i).row * 16 + 8 * nt + isa_c(l, i).col] = acc[i];
    }
}

static void test_products() {
    static const char* kLoads[] = {"A x4, B x4.trans",  "A x2, B x2.trans",  "A x1, B x1.trans",
                                   "Aᵀ x4.trans, Bᵀ x4", "Aᵀ x2.trans, Bᵀ x2", "Aᵀ x1.trans, Bᵀ x1"};
    const std::vector<bf16> a = bf16_matrix(256, false), b = bf16_matrix(256, false);
    std::vector<float> c(256);
    for (size_t i = 0; i < c.size(); i++) c[i] = (float)(i % 13) * 0.125f - 0.75f;
    std::vector<double> want, scale;
    reference_product(a, b, c, 16, 16, want, scale);
    bf16 *da = to_device(a), *db = to_device(b);
    float* dc = to_device(c);
    for (int load = 0; load < 6; load++) {
        float* dd = to_device(std::vector<float>(256, NAN));
        product_kernel<<<1, 32, 4 * 16 * kLd * sizeof(bf16)>>>(da, db, dc, dd, load);
        CUDA_CHECK(cudaGetLastError());
        const double e = worst_error(to_host_and_free(dd, 256), want, scale);
        CHECK(e < 2e-6, "16x16x16 product with fragments from ldmatrix (%s) == C + A·B: worst error %g", kLoads[load],
              e);
    }
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dc));
}

// ---- cp.async ----------------------------------------------------------------------------------------------
// Lane l copies chunk l (16 bytes) of `src` into shared slot l of group 0 and chunk 32 + l into slot 32 + l of
// group 1, with src_bytes 16, 8 or 0 by l % 3; then waits for group 0 (wait<1>), and for group 1 (wait<0>), a
// __syncthreads after each, and writes out what the whole block sees: out[0..32) after the first wait,
// out[32..64) after the second, chunk by chunk, each copied by another lane than its own. kWait false: the
// negative control, which reads before waiting (and waits only at the end, as a kernel must).
constexpr int kChunkBytes = 16;
__host__ __device__ inline int chunk_bytes(int l) { return l % 3 == 0 ? 16 : l % 3 == 1 ? 8 : 0; }
template <bool kWait>
__global__ void cp_async_kernel(const uint4* src, uint4* out) {
    extern __shared__ uint4 slots[];  // 64 chunks
    const int l = threadIdx.x;
    cp_async_16(&slots[l], &src[l], chunk_bytes(l));
    cp_async_commit();
    cp_async_16(&slots[32 + l], &src[32 + l], chunk_bytes(l));
    cp_async_commit();
    if (kWait) cp_async_wait<1>();
    __syncthreads();
    out[l] = slots[(l + 5) % 32];  // a chunk another lane copied
    if (kWait) cp_async_wait<0>();
    __syncthreads();
    out[32 + l] = slots[32 + (l + 7) % 32];
    cp_async_wait<0>();
}

static int run_cp_async(bool wait) {
    std::vector<uint8_t> src(64 * kChunkBytes);
    for (size_t i = 0; i < src.size(); i++) src[i] = (uint8_t)(1 + i % 251);  // no zero byte
    std::vector<uint4> src4(64);
    memcpy(src4.data(), src.data(), src.size());
    uint4* dsrc = to_device(src4);
    uint4* dout = to_device(std::vector<uint4>(64, uint4{0x5a5a5a5au, 0x5a5a5a5au, 0x5a5a5a5au, 0x5a5a5a5au}));
    if (wait) cp_async_kernel<true><<<1, 32, 64 * sizeof(uint4)>>>(dsrc, dout);
    else cp_async_kernel<false><<<1, 32, 64 * sizeof(uint4)>>>(dsrc, dout);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<uint4> out4 = to_host_and_free(dout, 64);
    CUDA_CHECK(cudaFree(dsrc));
    std::vector<uint8_t> out(64 * kChunkBytes);
    memcpy(out.data(), out4.data(), out.size());
    int wrong = 0;
    for (int slot = 0; slot < 64; slot++) {
        const int l = slot % 32, seen = slot < 32 ? (l + 5) % 32 : 32 + (l + 7) % 32, by = seen % 32;
        for (int i = 0; i < kChunkBytes; i++) {
            const uint8_t want = i < chunk_bytes(by) ? src[seen * kChunkBytes + i] : 0;
            wrong += out[slot * kChunkBytes + i] != want;
        }
    }
    return wrong;
}

static void test_cp_async() {
    const int wrong = run_cp_async(true);
    CHECK(wrong == 0, "cp_async_16: the copied bytes (16, 8 and 0 of 16, zero-filled) seen by the block after each "
          "wait and __syncthreads (%d bytes wrong)", wrong);
}

static void gpu_checks() {
    CUDA_CHECK(cudaSetDevice(0));
    test_mma_global();
    test_ldmatrix<1, false>();
    test_ldmatrix<2, false>();
    test_ldmatrix<4, false>();
    test_ldmatrix<1, true>();
    test_ldmatrix<2, true>();
    test_ldmatrix<4, true>();
    test_products();
    test_cp_async();
}

int main(int argc, char** argv) {
    const std::string flag = argc == 2 ? argv[1] : "";
    const std::string label = "test_mma " + flag;
    if (flag == "--cpu") {
        cpu_checks();
    } else if (flag == "--gpu") {
        require_gpu_or_skip(label.c_str());
        gpu_checks();
    } else if (flag == "--gpu-wrong-layout") {  // negative control: must fail
        require_gpu_or_skip(label.c_str());
        CUDA_CHECK(cudaSetDevice(0));
        const double e = run_mma_global(false, true);
        CHECK(e < 2e-6, "mma_bf16_16816 with A's registers 1 and 2 swapped == C + A·B: worst error %g", e);
    } else if (flag == "--gpu-cp-async-without-wait") {  // negative control: must fail
        require_gpu_or_skip(label.c_str());
        CUDA_CHECK(cudaSetDevice(0));
        const int wrong = run_cp_async(false);
        CHECK(wrong == 0, "cp_async_16 read before cp_async_wait: %d bytes not (yet) the copied ones", wrong);
    } else {
        fprintf(stderr, "usage: %s --cpu | --gpu | --gpu-wrong-layout | --gpu-cp-async-without-wait\n", argv[0]);
        return 2;
    }
    return test_finish(label.c_str());
}
