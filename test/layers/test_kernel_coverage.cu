// test_kernel_coverage.cu — every GPU kernel instantiation the trainer can pick is reached by some GPU test
// shape (label unit: it needs no GPU).
//
// Each launch site chooses its kernel (template arguments, vector width, fallback) in host code, and exposes
// that choice as a plain function (attention_softmax_slots, layernorm_forward_slots, linear_forward_path,
// tensor_convert_kernel, flash_attention_hd_bound). This test
//  1. enumerates each choice over every shape the trainer can give it (S and C from 1 to past the widest
//     kernel, HD from 1 to past the largest flash bound, both dtypes), and compares the set of instantiations found with the list below: a new kernel
//     instantiation (or a changed dispatch) must be added to the list, so it cannot go unnoticed;
//  2. runs the same choice over the shapes the GPU tests iterate over (test/layers/gpu_shapes.h) and fails,
//     naming the instantiation, when one is not reached.
// Negative control: remove a shape from gpu_shapes.h (e.g. the attention case S = 300) and this test fails
// with "not reached by any gpu test shape: softmax_vec<f32,2>"; remove the flash case HD = 128 and it fails
// with "... flash<f32,128>" (bf16's flash_tc<bf16,128> is reached by the tensor-core cases too).
#include <algorithm>
#include <set>
#include <string>
#include "layers/attention.h"
#include "layers/flash_attention.h"
#include "layers/flash_attention_tc.h"
#include "layers/layernorm.h"
#include "test/layers/gpu_shapes.h"
#include "test/test_util.h"

using Names = std::set<std::string>;

static const char* dn(DType dt) { return dt == DType::BF16 ? "bf16" : "f32"; }

// ---- the names of the instantiations, from each site's host choice ------------------------------------------

// Softmax forward and backward pick the same slots (attention.cu, launch_by_slots): one name covers both.
static std::string softmax_name(int S, DType dt) {
    const int slots = attention_softmax_slots(S, dt);
    return slots ? "softmax_vec<" + std::string(dn(dt)) + "," + std::to_string(slots) + ">"
                 : "softmax_fallback<" + std::string(dn(dt)) + ">";
}
// A row-in-registers softmax over several causal blocks of the GPU with a partial last one (S % block != 0):
// the rows of the last block end before a block boundary (causal_row_end).
static bool ragged_blocks(int S) {
    Ctx gpu;  // only the device field is read: no context is created
    gpu.device = Device::CUDA;
    const int blk = attention_causal_block(gpu, S);
    return S > blk && S % blk != 0;
}
static std::string ragged_name(DType dt) { return "softmax_vec<" + std::string(dn(dt)) + "> over ragged causal blocks"; }

// Flash attention (flash_attention_cuda.cu): its forward, dK-dV and dQ kernels share one bound HDB on the head
// dimension, so one name covers the three; "" for an HD no kernel takes (refused: --attention unfused). bf16 runs
// the tensor-core kernels (flash_attention_tc.cu, flash_attention_uses_tensor_cores), fp32 the scalar ones. The
// D = rowsum(dO ⊙ O) kernel has only the dtype as template argument.
static std::string flash_kind(DType dt) { return flash_attention_uses_tensor_cores(dt) ? "flash_tc" : "flash"; }
static std::string flash_name(int HD, DType dt) {
    const int bound = flash_attention_hd_bound(HD);
    return bound ? flash_kind(dt) + "<" + std::string(dn(dt)) + "," + std::to_string(bound) + ">" : "";
}
static std::string flash_dot_name(DType dt) { return "flash_dot<" + std::string(dn(dt)) + ">"; }
// Ring attention's blocks (flash_block_forward, flash_block_backward): the forward with an f32 output and the
// two backward kernels adding into f32 accumulators, at the same bound (the D kernel is flash_dot's). In f32 the
// block forward is the whole-sequence one (output f32 either way), named here with the block kernels anyway.
static std::string flash_block_name(int HD, DType dt) {
    const int bound = flash_attention_hd_bound(HD);
    return bound ? flash_kind(dt) + "_block<" + std::string(dn(dt)) + "," + std::to_string(bound) + ">" : "";
}
constexpr int kFlashMaxHD = 128;  // the largest head dimension the kernels take

static std::string layernorm_name(int C, DType dt) {
    const int slots = layernorm_forward_slots(C, dt);
    return slots ? "layernorm_forward_vec<" + std::string(dn(dt)) + "," + std::to_string(slots) + ">"
                 : "layernorm_forward_fallback<" + std::string(dn(dt)) + ">";
}

static std::string linear_name(LinearForwardPath p, DType in, DType out) {
    if (p == LinearForwardPath::FusedBias) return "linear_fused_bias<" + std::string(dn(in)) + ">";
    return "linear_broadcast<" + std::string(dn(out)) + "," + dn(in) + ">";  // bias_broadcast_kernel<TO, TB>
}

static std::string convert_name(DType dst, DType src) {
    switch (tensor_convert_kernel(dst, src)) {
        case ConvertKernel::Copy: return "convert_copy<" + std::string(dn(dst)) + ">";
        case ConvertKernel::F32ToBF16: return "convert_kernel<bf16,f32>";
        case ConvertKernel::BF16ToF32: return "convert_kernel<f32,bf16>";
        case ConvertKernel::Unsupported: break;
    }
    return "unsupported";
}

// ---- 1. what the trainer can pick --------------------------------------------------------------------------

constexpr DType kDtypes[] = {DType::F32, DType::BF16};

static Names possible() {
    Names n;
    for (DType dt : kDtypes) {
        for (int S = 1; S <= 4096; S++) {
            n.insert(softmax_name(S, dt));
            if (attention_softmax_slots(S, dt) && ragged_blocks(S)) n.insert(ragged_name(dt));
        }
        for (int C = 1; C <= 8192; C++) n.insert(layernorm_name(C, dt));
        for (int HD = 1; HD <= 200; HD++)
            if (!flash_name(HD, dt).empty()) {
                n.insert(flash_name(HD, dt));
                n.insert(flash_dot_name(dt));
                n.insert(flash_block_name(HD, dt));
            }
        // A bias in the activation dtype; the output in that dtype or f32 (the LM head's logits).
        for (DType out : {dt, DType::F32}) {
            const LinearForwardPath p = linear_forward_path(dt, out, true);
            n.insert(linear_name(p, dt, out));
            // The fused path falls back to the broadcast kernel when cuBLASLt declines the shape.
            if (p == LinearForwardPath::FusedBias) n.insert(linear_name(LinearForwardPath::Broadcast, dt, out));
        }
        for (DType src : kDtypes) n.insert(convert_name(dt, src));
    }
    return n;
}

// The list, written out: a change in any dispatch shows here first.
static const Names kExpected = {
    "softmax_vec<f32,1>", "softmax_vec<f32,2>", "softmax_vec<f32,4>", "softmax_fallback<f32>",
    "softmax_vec<bf16,1>", "softmax_vec<bf16,2>", "softmax_vec<bf16,4>", "softmax_vec<bf16,8>",
    "softmax_fallback<bf16>", "softmax_vec<f32> over ragged causal blocks",
    "softmax_vec<bf16> over ragged causal blocks",
    "layernorm_forward_vec<f32,4>", "layernorm_forward_vec<f32,8>", "layernorm_forward_vec<f32,16>",
    "layernorm_forward_fallback<f32>", "layernorm_forward_vec<bf16,4>", "layernorm_forward_vec<bf16,8>",
    "layernorm_forward_vec<bf16,16>", "layernorm_forward_vec<bf16,24>", "layernorm_forward_fallback<bf16>",
    "linear_fused_bias<f32>", "linear_fused_bias<bf16>", "linear_broadcast<f32,f32>",
    "linear_broadcast<bf16,bf16>", "linear_broadcast<f32,bf16>",
    "convert_copy<f32>", "convert_copy<bf16>", "convert_kernel<bf16,f32>", "convert_kernel<f32,bf16>",
    "flash<f32,32>", "flash<f32,64>", "flash<f32,128>", "flash_dot<f32>",
    "flash_tc<bf16,32>", "flash_tc<bf16,64>", "flash_tc<bf16,128>", "flash_dot<bf16>",
    "flash_block<f32,32>", "flash_block<f32,64>", "flash_block<f32,128>",
    "flash_tc_block<bf16,32>", "flash_tc_block<bf16,64>", "flash_tc_block<bf16,128>",
};

// ---- 2. what the GPU tests reach ---------------------------------------------------------------------------

static Names reached() {
    Names n;
    for (DType dt : kDtypes) {
        for (const AttnGpuCase& c : kAttnGpuCases) {
            if (!runs_in(c.dtypes, dt)) continue;
            n.insert(softmax_name(c.S, dt));
            if (attention_softmax_slots(c.S, dt) && ragged_blocks(c.S)) n.insert(ragged_name(dt));
        }
        for (const LnGpuCase& c : kLayerNormGpuCases)
            if (runs_in(c.dtypes, dt)) n.insert(layernorm_name(c.C, dt));
        auto flash_cases = [&](const auto& cases) {
            for (const FlashGpuCase& c : cases)
                if (runs_in(c.dtypes, dt) && !flash_name(c.HD, dt).empty()) {
                    n.insert(flash_name(c.HD, dt));
                    n.insert(flash_dot_name(dt));
                }
        };
        flash_cases(kFlashGpuCases);
        flash_cases(kFlashTcGpuCases);
        for (const FlashBlockGpuCase& c : kFlashBlockGpuCases)
            if (runs_in(c.dtypes, dt) && !flash_block_name(c.HD, dt).empty()) {
                n.insert(flash_block_name(c.HD, dt));
                n.insert(flash_dot_name(dt));
            }
        for (const LinearGpuCase& c : kLinearGpuCases) {
            if (!runs_in(c.dtypes, dt)) continue;
            const DType out = c.out_f32 ? DType::F32 : dt;
            const LinearForwardPath chosen = linear_forward_path(dt, out, true);
            // An unpinned case reaches the fused path only if cuBLASLt takes its shape, which only a GPU knows:
            // it counts for a path only when the host choice alone decides it (the broadcast of mixed dtypes).
            if (c.pin != LinearForwardPath::NoBias) n.insert(linear_name(c.pin, dt, out));
            else if (chosen == LinearForwardPath::Broadcast) n.insert(linear_name(chosen, dt, out));
        }
    }
    for (const ConvertGpuCase& c : kConvertGpuCases) n.insert(convert_name(c.dst, c.src));
    return n;
}

static void cpu_checks() {
    const Names can = possible(), got = reached();
    for (const std::string& s : can)
        CHECK(kExpected.count(s), "the trainer can pick %s, which the list in this test lacks: add it", s.c_str());
    for (const std::string& s : kExpected)
        CHECK(can.count(s), "listed %s, which no dispatch picks any more: remove it", s.c_str());
    for (const std::string& s : can)
        CHECK(got.count(s), "not reached by any gpu test shape: %s (add a shape to test/layers/gpu_shapes.h)",
              s.c_str());
    printf("test_kernel_coverage: %zu instantiations, %zu reached by the gpu tests' shapes\n", can.size(),
           got.size());
    // The issue's shapes, named: a case removed from the tables fails here even if another shape happens to
    // reach the same instantiation.
    auto has_attn = [](int S) {
        for (const AttnGpuCase& c : kAttnGpuCases)
            if (c.S == S) return true;
        return false;
    };
    auto has_ln = [](int C) {
        for (const LnGpuCase& c : kLayerNormGpuCases)
            if (c.C == C) return true;
        return false;
    };
    for (int S : {300, 600, 2048}) CHECK(has_attn(S), "attention gpu shape S = %d missing", S);
    // Flash: every HD from 1 to 128 has a kernel whose bound holds it, none above (those are refused), and
    // every GPU case's HD is one the kernels take.
    for (int HD = 1; HD <= 200; HD++) {
        const int bound = flash_attention_hd_bound(HD);
        CHECK(HD <= kFlashMaxHD ? bound >= HD : bound == 0, "flash_attention_hd_bound(%d) = %d", HD, bound);
    }
    for (const FlashGpuCase& c : kFlashGpuCases)
        CHECK(flash_attention_hd_bound(c.HD) != 0, "flash gpu shape HD = %d: no kernel takes it", c.HD);
    // The tensor-core kernels' shapes (issue 42): S 1, 63, 64, 65, 1000, 1024, each at HD 64 and 128, in bf16;
    // heads from 1 to 25; one HD whose rows are not whole 16-byte chunks (tiles by plain loads, not cp.async).
    auto has_tc = [](int S, int HD) {
        for (const FlashGpuCase& c : kFlashTcGpuCases)
            if (c.S == S && c.HD == HD && runs_in(c.dtypes, DType::BF16)) return true;
        return false;
    };
    for (int S : {1, 63, 64, 65, 1000, 1024})
        for (int HD : {64, 128}) CHECK(has_tc(S, HD), "flash tensor-core gpu shape S = %d, HD = %d missing", S, HD);
    int min_heads = 1 << 30, max_heads = 0;
    bool plain_loads = false;
    for (const FlashGpuCase& c : kFlashTcGpuCases) {
        min_heads = std::min(min_heads, c.NH), max_heads = std::max(max_heads, c.NH);
        plain_loads |= c.HD % 8 != 0;
    }
    CHECK(min_heads == 1 && max_heads == 25 && plain_loads,
          "flash tensor-core gpu shapes: heads 1 to 25 (%d to %d), an HD not a multiple of 8", min_heads, max_heads);
    // Ring blocks: the cases the kernels' masks need (gpu_shapes.h) are all there.
    bool diag = false, full = false, no_key_rows = false, sq_ne_sk = false;
    for (const FlashBlockGpuCase& c : kFlashBlockGpuCases) {
        CHECK(flash_attention_hd_bound(c.HD) != 0, "flash block gpu shape HD = %d: no kernel takes it", c.HD);
        diag |= c.q_pos == c.k_pos;
        full |= c.k_pos + c.Sk <= c.q_pos;
        no_key_rows |= c.q_pos < c.k_pos;
        sq_ne_sk |= c.Sq != c.Sk;
    }
    CHECK(diag && full && no_key_rows && sq_ne_sk,
          "flash block gpu shapes: a diagonal block, a full one, one with rows that see no key, Sq != Sk");
    for (int C : {1600, 6144}) CHECK(has_ln(C), "layernorm gpu shape C = %d missing", C);
}

int main() {
    cpu_checks();
    return test_finish("test_kernel_coverage");
}
