// fast_exp.h — e^x from + − × ÷ and integer bit operations only, for the element-wise ops (GeLU).
//
// Why not expf/tanhf: on the CPU the C library's versions are calls the compiler cannot vectorise, and they
// made GeLU, an element-wise op that only has to stream its bytes, slower than the GEMMs around it. Written
// with plain arithmetic, the same function runs in SIMD registers on the CPU (`#pragma omp simd` loops) and
// as ordinary instructions on the GPU, so the fast CPU path and the CUDA kernels share one definition.
// No branches and no table: every element takes the same instructions, so a value never depends on which
// thread, vector lane or loop tail computed it (results are bitwise independent of the thread count).
//
// Method (the textbook one): x = n·ln2 + r with n an integer and |r| <= ln2/2, e^x = 2^n · e^r.
//  - n = round(x / ln2) by the 1.5·2^23 shifter: adding it to a float of magnitude < 2^22 leaves the
//    rounded integer in the low mantissa bits (round to nearest, no floor instruction needed), and the
//    difference of the bit patterns is n itself.
//  - r = x − n·ln2 in two steps (ln2 split into a part with trailing zero bits, so that n·ln2_hi is exact,
//    and the rest): the classic Cody–Waite reduction; it keeps r accurate to a few ulp.
//  - e^r by its Taylor series to degree 7: the truncation error, r^8/8! < 6e-9 relative, is below float
//    rounding; Horner's scheme adds a few ulp of rounding.
//  - 2^n is built directly as a float's exponent field.
// The input is clamped to [-80, 80]: e^±80 (5.5e34, 1.8e-35) are normal floats, so 2^n never under- or
// overflows; GeLU only needs e^x far beyond the point where 1 + e^x stops changing. NaN passes through.
// Accuracy: within 2 ulp of e^x on the clamped range.
#pragma once
#include <cstdint>
#include <cstring>
#include "tensor.h"

__host__ __device__ inline int32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_int(f);
#else
    int32_t i;
    memcpy(&i, &f, 4);
    return i;
#endif
}
__host__ __device__ inline float bits_float(int32_t i) {
#ifdef __CUDA_ARCH__
    return __int_as_float(i);
#else
    float f;
    memcpy(&f, &i, 4);
    return f;
#endif
}

// c ? a : b as bit masks. Why not the ?: operator: GCC then duplicates the loop body for the clamped
// inputs, whose e^x it folds to a constant, and that branch stops the loop from being vectorised at all.
__host__ __device__ inline float select_f(bool c, float a, float b) {
    const int32_t m = -(int32_t)c;  // all ones when c
    return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
}

__host__ __device__ inline float fast_exp(float x) {
    x = select_f(x < -80.0f, -80.0f, x);  // NaN compares false and passes through
    x = select_f(x > 80.0f, 80.0f, x);
    const float shifter = 12582912.0f;  // 1.5 · 2^23
    const float t = x * 1.44269504088896341f + shifter;  // x / ln2 + shifter, rounded to an integer
    const float n = t - shifter;
    float r = x - n * 0.693145751953125f;  // ln2_hi: 16 significant bits, so n · ln2_hi is exact (|n| <= 116)
    r = r - n * 1.42860682030941723212e-6f;  // ln2_lo = ln2 − ln2_hi
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t ni = float_bits(t) - float_bits(shifter);  // n as an integer
    return p * bits_float((int32_t)((uint32_t)(ni + 127) << 23));  // · 2^n (unsigned: no shift of a negative)
}
