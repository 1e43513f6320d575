// reference_check.h — how a gpu test holds a CUDA kernel to the op's plain math (layers/reference/*.h) on
// top of the fast CPU path it already compares the kernel with.
//
// The gpu tests keep their GPU-vs-CPU checks (the two paths of one op on the same inputs, at the tolerances
// of test_util.h). Each also computes the reference on the host from the same (dtype-rounded) inputs and
// checks both results against it: the CPU within tol, the GPU within 2.1 · tol. By the triangle
// inequality the GPU's bound holds whenever the CPU's and the GPU-vs-CPU check hold (2.1 leaves room for
// ‖cpu‖ != ‖ref‖), so a kernel that agrees with the CPU cannot fail here; what this adds is that a GPU
// result is judged against the math itself, not only against the other path.
#pragma once
#include <string>
#include "test/test_util.h"

// The GEMM-like ops (long sums added in another order): check_close_norm's norm-wise form.
inline void check_norm_vs_reference(const std::string& what, DType dt, const std::vector<float>& gpu,
                                    const std::vector<float>& cpu, const std::vector<float>& ref, double tol = -1) {
    if (tol < 0) tol = norm_tol(dt);
    check_close_norm((what + " (cpu vs reference)").c_str(), dt, cpu, ref, tol);
    check_close_norm((what + " (gpu vs reference)").c_str(), dt, gpu, ref, 2.1 * tol);
}

// The element-wise ops: check_close's per-element form.
inline void check_close_vs_reference(const std::string& what, DType dt, const std::vector<float>& gpu,
                                     const std::vector<float>& cpu, const std::vector<float>& ref, double rtol,
                                     double atol, int N, int C) {
    check_close(cpu, ref, rtol, atol, (what + " (cpu vs reference)").c_str(), dtype_name(dt), N, C);
    check_close(gpu, ref, 2.1 * rtol, 2.1 * atol, (what + " (gpu vs reference)").c_str(), dtype_name(dt), N, C);
}
