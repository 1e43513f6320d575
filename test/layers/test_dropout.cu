// test_dropout.cu — bias + dropout + residual and the dropout backward (layers/dropout.cu): the fast CPU path
// (--cpu, label unit) and the CUDA kernels against it (--gpu, label gpu).
//
// A mask bit is a pure function of (seed, stream, the element's *global* coordinates) (layers/philox.h), so
// a tensor- or sequence-parallel rank that computes a block of the activation with offsets gets exactly the
// bits of that block of the single-rank mask: the property behind the parallel-vs-single-rank equivalence
// tests, and behind recomputation regenerating the same masks.
// The plain math both paths are held to: layers/reference/dropout.h.
// CPU checks: keep fraction ≈ 1 - p; values and mask bits against the reference (dropout_keep at the
// documented global index); a sub-block with offsets equals the slice of the full result and the reference
// at its offsets, SP shards' masks concatenate to the full mask (bitwise); another seed or stream gives
// another mask; p = 0 writes an all-ones mask; no bias / no residual; output aliasing the input; the
// backward's values against the reference, in place, and against finite differences; bf16 storage.
// GPU checks, f32 and bf16: masks bit for bit equal to the CPU's and the reference's (at global offsets),
// only 0/1 bytes written, values against the CPU and the reference (outputs poisoned first); small odd
// blocks, a GPT-sized block, p = 0, no bias / no residual, and more rows than gridDim.y can hold.
#include <cstdint>
#include "layers/dropout.h"
#include "layers/philox.h"
#include "layers/reference/dropout.h"
#include "test/layers/reference_check.h"
#include "test/test_util.h"

typedef std::vector<float> vf;
static Ctx g_cpu, g_gpu;

// =========================================================================================================
// CPU checks (--cpu): the fast CPU path against the plain math of layers/reference/dropout.h
// =========================================================================================================

struct DropOut { vf out, mask; };
static DropOut bdr_forward(DType dt, const vf& x, const vf* bias, const vf* resid, float p, uint64_t seed,
                           uint32_t stream, int S, int B, int C, DropoutCoords where, bool out_aliases_x = false) {
    const int64_t n = (int64_t)S * B * C;
    Tensor tx = cpu_tensor(dt, x), tb, tr;
    if (bias) tb = cpu_tensor(dt, *bias);
    if (resid) tr = cpu_tensor(dt, *resid);
    Tensor to = out_aliases_x ? tx : tensor_alloc(Device::CPU, dt, n);
    Tensor tm = tensor_alloc(Device::CPU, DType::U8, n);
    tensor_fill_f32(tm, 7.0f);  // neither 0 nor 1: every byte must be written
    bias_dropout_residual_forward(g_cpu, to, tm, tx, tb, tr, p, seed, stream, S, B, C, where);
    DropOut r{to_host(to), to_host(tm)};
    if (!out_aliases_x) tensor_free(to);
    free_all({&tx, &tb, &tr, &tm});
    return r;
}
static vf drop_backward(DType dt, const vf& dout, const vf& mask, float p, bool in_place) {
    Tensor tdo = cpu_tensor(dt, dout), tm = cpu_tensor(DType::U8, mask);
    Tensor tdx = in_place ? tdo : tensor_alloc(Device::CPU, dt, (int64_t)dout.size());
    dropout_backward(g_cpu, tdx, tdo, tm, p, (int64_t)dout.size());
    vf r = to_host(tdx);
    if (!in_place) tensor_free(tdx);
    free_all({&tdo, &tm});
    return r;
}

static void test_dropout(std::mt19937& rng) {
    const uint64_t seed = 0x1234abcd5678ull;
    const uint32_t stream = dropout_stream(3, kSiteMlpOut);
    // keep fraction ≈ 1 - p within 5 standard deviations
    for (float p : {0.1f, 0.5f}) {
        const int S = 64, B = 4, C = 256;
        const double n = (double)S * B * C;
        vf x((size_t)n, 1.0f);
        DropoutCoords where;
        where.B_total = B;
        DropOut d = bdr_forward(DType::F32, x, nullptr, nullptr, p, seed, stream, S, B, C, where);
        double kept = 0;
        for (float m : d.mask) kept += m;
        double frac = kept / n, sigma = std::sqrt(p * (1.0 - p) / n);
        CHECK(std::fabs(frac - (1.0 - p)) < 5 * sigma, "p=%.2f: keep fraction %.5f, expected %.5f ± %.5f", p, frac,
              1.0 - p, 5 * sigma);
    }
    // values, mask bits from the documented global index, p = 0, empty bias/resid, aliasing
    {
        const int S = 16, B = 6, C = 37;
        const size_t n = (size_t)S * B * C;
        vf x = random_vec(n, rng), bias = random_vec(C, rng), resid = random_vec(n, rng);
        DropoutCoords full;
        full.B_total = B;
        const float p = 0.1f;
        DropOut d = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream, S, B, C, full);
        // The reference (layers/reference/dropout.h): each element's keep bit from dropout_keep at its global
        // index (the full block: offsets 0, so the local index is the global one) and its value in fp32.
        vf ref_out(n);
        std::vector<uint8_t> ref_mask(n);
        ref_bias_dropout_residual_forward(ref_out.data(), ref_mask.data(), x.data(), bias.data(), resid.data(), p, seed,
                                          stream, S, B, C, 0, 0, B);
        int bad_mask = 0, bad_val = 0;
        for (size_t i = 0; i < n; i++) {
            if (d.mask[i] != (float)ref_mask[i]) bad_mask++;
            if (std::fabs(d.out[i] - ref_out[i]) > 1e-6f * (1 + std::fabs(ref_out[i]))) bad_val++;
        }
        CHECK(bad_mask == 0, "dropout mask != dropout_keep(global index): %d elements", bad_mask);
        CHECK(bad_val == 0, "dropout output values: %d wrong", bad_val);

        // sub-block with offsets == slice of the full tensor (mask bits and values, bitwise)
        DropoutCoords sub;
        sub.s_offset = 5, sub.b_offset = 2, sub.B_total = B;
        const int Sl = 7, Bl = 3;
        vf xs, rs, mask_slice, out_slice;
        for (int s = 0; s < Sl; s++)
            for (int b = 0; b < Bl; b++)
                for (int c = 0; c < C; c++) {
                    size_t g = ((size_t)(sub.s_offset + s) * B + (sub.b_offset + b)) * C + c;
                    xs.push_back(x[g]), rs.push_back(resid[g]);
                    mask_slice.push_back(d.mask[g]), out_slice.push_back(d.out[g]);
                }
        DropOut ds = bdr_forward(DType::F32, xs, &bias, &rs, p, seed, stream, Sl, Bl, C, sub);
        CHECK(bitwise_equal(ds.mask, mask_slice), "sub-block mask differs from the full mask's slice");
        CHECK(bitwise_equal(ds.out, out_slice), "sub-block output differs from the full output's slice");
        {  // and the reference drawn at the sub-block's offsets gives its mask bits
            vf ro(xs.size());
            std::vector<uint8_t> rmask(xs.size());
            ref_bias_dropout_residual_forward(ro.data(), rmask.data(), xs.data(), bias.data(), rs.data(), p, seed, stream,
                                              Sl, Bl, C, sub.s_offset, sub.b_offset, sub.B_total);
            CHECK(ds.mask == vf(rmask.begin(), rmask.end()), "sub-block mask differs from the reference's at its offsets");
        }
        // sequence-parallel shards (all batches, S/4 positions each) concatenate to the full mask
        vf cat;
        for (int k = 0; k < 4; k++) {
            DropoutCoords sh;
            sh.s_offset = k * (S / 4), sh.B_total = B;
            vf xk(x.begin() + (size_t)k * (S / 4) * B * C, x.begin() + (size_t)(k + 1) * (S / 4) * B * C);
            DropOut dk = bdr_forward(DType::F32, xk, &bias, nullptr, p, seed, stream, S / 4, B, C, sh);
            cat.insert(cat.end(), dk.mask.begin(), dk.mask.end());
        }
        CHECK(bitwise_equal(cat, d.mask), "SP shards' masks do not concatenate to the full mask");

        // another stream or seed gives another mask
        DropOut other = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream + 1, S, B, C, full);
        DropOut other2 = bdr_forward(DType::F32, x, &bias, &resid, p, seed + 1, stream, S, B, C, full);
        CHECK(!bitwise_equal(other.mask, d.mask), "different stream, same mask");
        CHECK(!bitwise_equal(other2.mask, d.mask), "different seed, same mask");

        // p = 0: all-ones mask, out = resid + x + bias
        DropOut d0 = bdr_forward(DType::F32, x, &bias, &resid, 0.0f, seed, stream, S, B, C, full);
        vf ref0(n);
        std::vector<uint8_t> mask0(n);
        ref_bias_dropout_residual_forward(ref0.data(), mask0.data(), x.data(), bias.data(), resid.data(), 0.0f, seed,
                                          stream, S, B, C, 0, 0, B);
        int bad0 = 0;
        for (size_t i = 0; i < n; i++)
            if (d0.mask[i] != 1.0f || mask0[i] != 1 || d0.out[i] != ref0[i]) bad0++;
        CHECK(bad0 == 0, "p = 0: %d elements not (mask 1, out = resid + x + bias)", bad0);

        // no bias, no residual: out = mask · x · scale; and out aliasing x gives the same
        DropOut dn = bdr_forward(DType::F32, x, nullptr, nullptr, p, seed, stream, S, B, C, full);
        vf refn(n);
        std::vector<uint8_t> maskn(n);
        ref_bias_dropout_residual_forward(refn.data(), maskn.data(), x.data(), nullptr, nullptr, p, seed, stream, S, B, C,
                                          0, 0, B);
        int badn = 0;
        for (size_t i = 0; i < n; i++)
            if (dn.mask[i] != d.mask[i] || dn.out[i] != refn[i]) badn++;
        CHECK(badn == 0, "no bias / no residual: %d wrong", badn);
        DropOut da = bdr_forward(DType::F32, x, &bias, &resid, p, seed, stream, S, B, C, full, true);
        CHECK(bitwise_equal(da.out, d.out) && bitwise_equal(da.mask, d.mask), "out aliasing x differs");

        // backward: dx = dout ⊙ mask / (1-p), and it is the derivative of L = Σ w · out along a direction
        vf w = random_vec(n, rng), dir = random_vec(n, rng);
        vf dx = drop_backward(DType::F32, w, d.mask, p, false), ref_dx(n);
        ref_dropout_backward(ref_dx.data(), w.data(), ref_mask.data(), p, (int64_t)n);
        int badb = 0;
        for (size_t i = 0; i < n; i++)
            if (dx[i] != ref_dx[i]) badb++;
        CHECK(badb == 0, "dropout_backward values: %d wrong", badb);
        CHECK(bitwise_equal(drop_backward(DType::F32, w, d.mask, p, true), dx), "dropout_backward in place differs");
        const double h = 1e-2;
        double lp = dot(bdr_forward(DType::F32, axpy(x, h, dir), &bias, &resid, p, seed, stream, S, B, C, full).out, w);
        double lm = dot(bdr_forward(DType::F32, axpy(x, -h, dir), &bias, &resid, p, seed, stream, S, B, C, full).out, w);
        double num = (lp - lm) / (2 * h), ana = dot(dx, dir);
        CHECK(std::fabs(num - ana) <= kFdTol * std::fabs(ana), "dropout dL/dx·d: numeric %.6f analytic %.6f", num, ana);

        // bf16 storage: same mask bits, values within bf16 tolerance
        vf xb = round_bf16(x), bb = round_bf16(bias), rb = round_bf16(resid);
        DropOut f32 = bdr_forward(DType::F32, xb, &bb, &rb, p, seed, stream, S, B, C, full);
        DropOut b16 = bdr_forward(DType::BF16, xb, &bb, &rb, p, seed, stream, S, B, C, full);
        CHECK(bitwise_equal(f32.mask, b16.mask), "bf16 mask differs from f32 mask");
        CHECK(max_rel_err(b16.out, f32.out, 1e-2) < 1e-2, "bf16 dropout out: %.3g", max_rel_err(b16.out, f32.out, 1e-2));
        vf wb = round_bf16(w);
        CHECK(max_rel_err(drop_backward(DType::BF16, wb, d.mask, p, false), drop_backward(DType::F32, wb, d.mask, p, false),
                          1e-2) < 1e-2, "bf16 dropout_backward");
    }
}

static void cpu_checks() {
    std::mt19937 rng(1234);
    test_dropout(rng);
}

// =========================================================================================================
// GPU checks (--gpu): the CUDA kernels against the fast CPU path and the reference
// =========================================================================================================

// Bias + dropout + residual on a block [S, B, C] placed at (s_offset, b_offset) of a global batch B_total.
static void test_dropout_gpu(DType dt, int S, int B, int C, float p, bool with_bias, bool with_resid,
                         std::mt19937& rng) {
    const ElementwiseTol tol = elementwise_tol(dt);
    const char* dn = dtype_name(dt);
    const int64_t n = (int64_t)S * B * C;
    DropoutCoords where;
    where.s_offset = 11, where.b_offset = 1, where.B_total = B + 3;
    const uint64_t seed = 0x5eed0000beefull + (uint64_t)n;
    const uint32_t stream = dropout_stream(5, kSiteAttnOut);
    const vf xv = random_vec(n, rng), bv = random_vec(C, rng);
    const vf rv = random_vec(n, rng);
    TensorPair x = on_both(dt, xv), bias = on_both(dt, bv);
    TensorPair resid = on_both(dt, rv);
    TensorPair out = poisoned_pair(dt, n), mask = poisoned_pair(DType::U8, n);
    Tensor no;
    bias_dropout_residual_forward(g_cpu, out.c, mask.c, x.c, with_bias ? bias.c : no, with_resid ? resid.c : no, p,
                                  seed, stream, S, B, C, where);
    bias_dropout_residual_forward(g_gpu, out.g, mask.g, x.g, with_bias ? bias.g : no, with_resid ? resid.g : no, p,
                                  seed, stream, S, B, C, where);
    vf mc = to_host(mask.c), mg = to_host(mask.g);
    int64_t kept = 0;
    bool only01 = true;
    for (float m : mg) {
        if (m == 1.0f) kept++;
        if (m != 0.0f && m != 1.0f) only01 = false;
    }
    CHECK(bitwise_equal(mg, mc), "dropout masks differ between GPU and CPU [%s S=%d B=%d C=%d p=%.2f]", dn, S, B, C, p);
    CHECK(only01, "GPU mask holds bytes other than 0/1 (unwritten?) [%s S=%d B=%d C=%d]", dn, S, B, C);
    if (p == 0.0f) CHECK(kept == n, "p = 0: GPU mask not all ones (%lld of %lld)", (long long)kept, (long long)n);
    check_close(to_host(out.g), to_host(out.c), tol.rtol, tol.atol, "bias_dropout_residual_forward", dn, S * B, C);
    // The reference (layers/reference/dropout.h) on the same rounded inputs, at the block's global offsets.
    const vf xr = round_to(dt, xv), br = round_to(dt, bv), rr = round_to(dt, rv);
    vf r_out(n);
    std::vector<uint8_t> r_mask(n);
    ref_bias_dropout_residual_forward(r_out.data(), r_mask.data(), xr.data(), with_bias ? br.data() : nullptr,
                                      with_resid ? rr.data() : nullptr, p, seed, stream, S, B, C, where.s_offset,
                                      where.b_offset, where.B_total);
    CHECK(bitwise_equal(mg, vf(r_mask.begin(), r_mask.end())),
          "GPU dropout mask differs from the reference's [%s S=%d B=%d C=%d p=%.2f]", dn, S, B, C, p);
    check_close_vs_reference("bias_dropout_residual_forward", dt, to_host(out.g), to_host(out.c), r_out, tol.rtol,
                             tol.atol, S * B, C);

    // dropout_backward with the mask just made
    const vf dv = random_vec(n, rng);
    TensorPair dout = on_both(dt, dv), dx = poisoned_pair(dt, n);
    dropout_backward(g_cpu, dx.c, dout.c, mask.c, p, n);
    dropout_backward(g_gpu, dx.g, dout.g, mask.g, p, n);
    check_close(to_host(dx.g), to_host(dx.c), tol.rtol, tol.atol, "dropout_backward", dn, S * B, C);
    const vf dr = round_to(dt, dv);
    vf r_dx(n);
    ref_dropout_backward(r_dx.data(), dr.data(), r_mask.data(), p, n);
    check_close_vs_reference("dropout_backward", dt, to_host(dx.g), to_host(dx.c), r_dx, tol.rtol, tol.atol, S * B, C);
    free_all({&x, &bias, &resid, &out, &mask, &dout, &dx});
}

static void gpu_checks() {
    std::mt19937 rng(4321);
    for (DType dt : {DType::F32, DType::BF16}) {
        // small odd block; GPT-sized block; p = 0; no bias / no residual; more rows than gridDim.y can hold
        // (70001 rows), so the kernel's row loop is exercised
        test_dropout_gpu(dt, 37, 3, 129, 0.1f, true, true, rng);
        test_dropout_gpu(dt, 250, 4, 768, 0.1f, true, true, rng);
        test_dropout_gpu(dt, 37, 3, 129, 0.0f, true, true, rng);
        test_dropout_gpu(dt, 37, 3, 129, 0.3f, false, false, rng);
        test_dropout_gpu(dt, 70001, 1, 3, 0.5f, true, false, rng);
        // rows of several blocks along x (769 packs: 4 blocks of 256 threads, the last one partial)
        test_dropout_gpu(dt, 9, 2, 6152, 0.1f, true, true, rng);
    }
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_dropout", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
