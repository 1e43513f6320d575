// model_state_memory.h — the model states measured: the weights, the gradients, the fp32 master weights and
// the two AdamW moments go through one tagged account (as activations go through the activation allocator),
// so the memory report shows what a rank really holds next to the formula, bytes per parameter × local
// parameters.
//
// The formula, per parameter of this rank (mixed precision as in Megatron-LM; d = data-parallel size):
//                      weights     gradients   master      moments m, v     total
//   bf16               2 (bf16)    4 (fp32)    4 (fp32)    4 + 4            18
//   bf16, distributed  2           4           4/d         (4 + 4)/d        6 + 12/d
//   fp32               -           4           4           4 + 4            16   (the master IS the weights)
//   fp32, distributed  -           4           4           (4 + 4)/d        8 + 8/d
// With the distributed optimizer (parallel/distributed_optimizer.h) the flat buffers are padded to a
// multiple of d, so the per-parameter bytes apply to n + padding elements, padding < d. Why fp32 is 8 + 8/d
// and not 4 + 12/d: this project keeps one fp32 copy of the weights that is both the compute copy and the
// master, so only the moments can be sharded; the gradients stay whole (ZeRO-1, not ZeRO-2).
// ZeRO-2 and ZeRO-3 (parallel/zero_sharding.h) shard by unit (a layer's tensors; the embeddings and the final
// norm), each unit padded to a multiple of d; P below is then the sum of the padded units and P/d the shard:
//   bf16, ZeRO-2       2 (whole)   4/d         4/d         8/d              2 + 16/d   (the ZeRO paper: 2 + 14/d,
//   bf16, ZeRO-3       2/d         4/d         4/d         8/d              18/d        16/d: its gradients are
//   fp32, ZeRO-2       -           4/d         4 (whole)   8/d              4 + 12/d    2-byte, ours fp32)
//   fp32, ZeRO-3       -           4/d         4/d         8/d              16/d
// The whole weights of ZeRO-2 are the n elements of the llm.c-layout buffer (not padded).
// "Optimizer state" is what the optimizer alone needs: the moments, plus the fp32 master in bf16 training
// (Megatron's 12 bytes per parameter); in fp32 training the master weights are the model itself.
#pragma once
#include <cstdint>
#include "../layers/rank_memory.h"  // the rank's whole account, which this one feeds
#include "../layers/runtime.h"

enum ModelStateKind { kStateWeights = 0, kStateGrads, kStateMaster, kStateMomentM, kStateMomentV, kNumStateKinds };
const char* model_state_name(int kind);  // "weights", "gradients", "master", "adam_m", "adam_v"

// The tagged account: every model-state buffer is allocated and freed through it (and counted in the rank's
// whole account, rank_memory(), as MemoryKind::ModelStates).
struct ModelStateMemory {
    int64_t bytes[kNumStateKinds] = {};
    int64_t elements[kNumStateKinds] = {};
    Device device = Device::CPU;  // where the states live (the last alloc's)
    Tensor alloc(Device device, DType dtype, int64_t n, int kind);  // zero-filled, counted under `kind`
    void release(Tensor& t, int kind);                              // no-op on an empty tensor
    int64_t total() const;
    int64_t optimizer(bool bf16) const;  // moments, + master in bf16 training (see above)
};

// A buffer outside the model states' own account that the rank's whole account still counts, under `kind`:
// post-validation's snapshot (a second copy of the states, model/post_validation.h). Zero-filled.
Tensor counted_alloc(Device device, DType dtype, int64_t n, MemoryKind kind, const char* what);
void counted_free(Tensor& t, MemoryKind kind);  // no-op on an empty tensor

// The formula for n local parameters on a data-parallel group of d ranks.
struct ModelStateFormula {
    int64_t n = 0;        // local parameters
    int64_t padded = 0;   // n rounded up to a multiple of d with the distributed optimizer (ZeRO-2/3: the
                          // padded units), else n
    int d = 1;
    bool distributed = false, bf16 = false;  // distributed: any ZeRO stage with d > 1
    int stage = 0;                      // the ZeRO stage in effect (0 when d = 1)
    bool sharded[kNumStateKinds] = {};  // which kinds this rank holds as its shard only
    const char* per_param_text = "";    // "18", "6 + 12/d", "2 + 16/d", ... (the table above)
    double per_param = 0;               // 18, 6 + 12/d, 16, 8 + 8/d, ...
    int64_t bytes[kNumStateKinds] = {};  // per kind, exact
    int64_t total = 0, optimizer = 0;
};
// distributed: the optimizer states sharded over d ranks (d = 1 or false: the replicated layout).
ModelStateFormula model_state_formula(int64_t n, int d, bool distributed, bool bf16);
// Any ZeRO stage (0..3): padded is what the stage pads to (ZeRO-1: n to a multiple of d; ZeRO-2/3: the sum of
// the padded units; stage 0 or d = 1: n).
ModelStateFormula model_state_formula_zero(int stage, int64_t n, int64_t padded, int d, bool bf16);
