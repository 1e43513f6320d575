// gpt.h — the GPT-2 model on one rank: its slice of the weights (tensor parallel), gradients, AdamW state,
// and the forward / backward passes of a training step.
//
// Parameters live in one flat fp32 buffer (the master weights) in llm.c's tensor order, each tensor holding
// this rank's slice (parallel/tensor_parallel.h). With --dtype bf16 the forward and backward read a bf16
// copy of the weights, refreshed after every optimizer step; gradients and optimizer state stay fp32.
#pragma once
#include <vector>
#include "config.h"
#include "transformer_layer.h"
#include "../layers/embedding.h"
#include "../parallel/distributed_optimizer.h"
#include "../parallel/process_grid.h"
#include "../recompute/model_state_memory.h"

// The shapes of the step in flight, computed once per forward pass (gpt_step_shape in gpt.cu) and read by
// the forward, the backward and every layer's context.
struct StepShape {
    int S = 0, B = 0;      // full sequence length, local batch (this DP rank's sequences)
    int S_loc = 0;         // positions this rank holds outside the TP regions: S/t under SP, else S
    int64_t s_offset = 0;  // first global position of those (sp_shard, parallel/sequence_parallel.h)
    int N_shard = 0;       // rows outside the TP regions: S_loc·B (a sequence shard under SP)
    int N_full = 0;        // rows inside them: S·B (every TP rank sees the whole sequence there)
    int V_local = 0;       // this rank's rows of the padded vocabulary: Vp/t
    int64_t v_begin = 0;   // its first vocabulary row
    int64_t b_first = 0;   // global index of this forward's first sequence: (dp_rank·M + micro index)·B
    int64_t B_global = 0;  // sequences of the global batch: dp·M·B
};

struct GPT {
    GPTConfig cfg;
    ProcessGrid* grid = nullptr;
    Ctx* ctx = nullptr;
    ActivationAllocator* alloc = nullptr;
    DType dtype = DType::F32;  // activation and compute-weight storage
    Recompute recompute = Recompute::None;
    float dropout = 0.f;
    uint64_t seed = 1337;
    int64_t step = 0;  // the optimizer step in flight: dropout masks are keyed by (seed, step) (layers/philox.h)
    // The micro-batch in flight (gradient accumulation, model/train_step.cu): micro-batch `index` of `count`
    // of this DP rank's sequences. It places the forward's sequences in the GLOBAL batch (dropout masks are
    // keyed by global coordinates, so any split draws the single-rank masks) and scales the loss gradient by
    // 1/count (the step's loss is the mean over all its tokens). {0, 1}: the whole batch at once.
    struct MicroBatch { int index = 0, count = 1; } micro;

    int64_t sizes[NUM_PARAM_TENSORS] = {};    // local element counts
    int64_t offsets[NUM_PARAM_TENSORS] = {};  // local offsets in the flat buffers
    int64_t n_params = 0;                     // local
    Tensor master, weights, grads, adam_m, adam_v;  // flat; weights == master when dtype is f32
    // The distributed optimizer (parallel/distributed_optimizer.h): with it, adam_m / adam_v (and master in
    // bf16) hold this DP rank's shard only, and weights / grads are padded to a multiple of dp.
    OptimizerShard zero;
    ModelStateMemory state_memory;  // the model states' tagged account (recompute/model_state_memory.h)

    // ---- activations of the step in flight -----------------------------------------------------------
    StepShape shape;
    std::vector<SavedLayer> saved;
    Tensor tokens, targets;  // i32 [S·B] (sequence-major), on the device
    EmbeddingIndex emb_index;
    Tensor embed_drop_mask, lnf_mean, lnf_rstd, lmhead_in, logits, ce_rowmax, ce_sumexp;
    Tensor lnf_in;  // = the last layer's output (tagged "lnf_in")
};

// Build the model for `cfg` on this rank (allocates weights, gradients, optimizer state). distributed_optimizer:
// shard the optimizer states over the DP group (ZeRO-1; nothing changes when dp is 1).
void gpt_create(GPT& m, const GPTConfig& cfg, ProcessGrid& grid, Ctx& ctx, ActivationAllocator& alloc, DType dtype,
                Recompute recompute, float dropout, uint64_t seed, bool distributed_optimizer = false);
void gpt_destroy(GPT& m);
// Deterministic GPT-2 initialization of the FULL model from `seed` (counter-based, so identical for every
// parallel layout), then this rank's slice is kept. N(0, 0.02) weights, residual projections
// N(0, 0.02/sqrt(2L)), zero biases, unit LayerNorm gains.
void gpt_init_random(GPT& m, uint64_t seed);
// Fill the full llm.c-layout parameter buffer (host, fp32) with the same initialization.
void gpt_init_full(const GPTConfig& cfg, uint64_t seed, std::vector<float>& full);
// Load this rank's slice from a full llm.c-layout parameter buffer (host, fp32).
void gpt_load_full(GPT& m, const float* full);
// Gather the full model (llm.c layout) from the TP group; every rank of the group gets it.
void gpt_gather_full(GPT& m, std::vector<float>& full);
// AdamW's moments, gathered like the weights (full model, llm.c order; exact resume, model/train_state.h),
// and loaded back into this rank's slice.
void gpt_gather_full_optimizer(GPT& m, std::vector<float>& adam_m, std::vector<float>& adam_v);
void gpt_load_full_optimizer(GPT& m, const float* adam_m, const float* adam_v);

Tensor gpt_param(GPT& m, int id, int layer = -1);  // view (activation dtype weights); layer -1: whole tensor
Tensor gpt_grad(GPT& m, int id, int layer = -1);   // view (f32)

// Forward pass on this rank's part of the batch. inputs/targets: host int32 [B_local, S] (as the loader
// gives them). Returns the mean loss over this rank's B_local·S targets. With keep == false, the
// activations are released at once (validation). token_losses (optional) receives each position's loss
// −log p(target), [B_local, S] like the inputs (evaluations that score parts of a sequence: HellaSwag).
float gpt_forward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                  std::vector<float>* token_losses = nullptr);
// Backward pass of the last forward: accumulates into m.grads (zero them first) and releases activations.
void gpt_backward(GPT& m);
void gpt_zero_grad(GPT& m);
// The shapes of a step of B_local sequences of S tokens on this rank (gpt_forward sets m.shape to it; a
// benchmark that runs one layer alone sets it itself).
StepShape gpt_step_shape(const GPT& m, int B_local, int S);
// The description of layer l for the step in flight (shapes, weight views, global dropout coordinates).
LayerContext gpt_layer_context(GPT& m, int l);
// Rewrite the compute copy of the weights from the fp32 master weights (bf16 only; a no-op in fp32, where
// the two are one buffer): after loading weights and after every optimizer step.
void gpt_refresh_compute_weights(GPT& m);
// Release the activations of the last forward without a backward (validation, sampling).
void gpt_release_activations(GPT& m);

// ---- tests only ----------------------------------------------------------------------------------------
// gpt_gather_full for the gradients: the parallel-vs-single-rank tests compare them (test/model/).
void gpt_gather_full_grads(GPT& m, std::vector<float>& full);
