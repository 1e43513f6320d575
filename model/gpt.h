// gpt.h — the GPT-2 model on one rank: its slice of the weights (tensor parallel), gradients, AdamW state,
// and the forward / backward passes of a training step.
//
// Parameters live in one flat fp32 buffer (the master weights) in llm.c's tensor order, each tensor holding
// this rank's slice (parallel/tensor_parallel.h) of what its pipeline stage holds (parallel/pipeline_stage.h:
// its layers; the embeddings on the first stage, the final layer norm and the tied LM head on the last). With --dtype bf16 the forward and backward read a bf16
// copy of the weights, refreshed after every optimizer step; gradients and optimizer state stay fp32.
#pragma once
#include <string>
#include <vector>
#include "../layers/model_shape.h"
#include "pipeline_timeline.h"
#include "transformer_layer.h"
#include "../layers/embedding.h"
#include "../layers/weight_grad_queue.h"
#include "../parallel/pipeline_schedule.h"
#include "../parallel/pipeline_stage.h"
#include "../parallel/distributed_optimizer.h"
#include "../parallel/zero_sharding.h"
#include "../parallel/context_parallel.h"
#include "../parallel/process_grid.h"
#include "../recompute/model_state_memory.h"
#include "../recompute/activation_offload.h"

// The shapes of the step in flight, computed once per forward pass (gpt_step_shape in gpt.cu) and read by
// the forward, the backward and every layer's context.
struct StepShape {
    int S = 0, B = 0;      // full sequence length, local batch (this DP rank's sequences)
    int S_cp = 0;          // positions this CP rank holds: S/c (S without context parallelism)
    SeqRuns cp_positions;  // which ones, as global positions (zigzag: parallel/context_parallel.h)
    int S_loc = 0;         // positions this rank holds outside the TP regions: S_cp/t under SP, else S_cp
    SeqRuns positions;     // which ones: the SP shard (sp_shard) of cp_positions
    int N_shard = 0;       // rows outside the TP regions: S_loc·B (a sequence shard under SP)
    int N_full = 0;        // rows inside them: S_cp·B (every TP rank sees its CP rank's positions there)
    int V_local = 0;       // this rank's rows of the padded vocabulary: Vp/t
    int64_t v_begin = 0;   // its first vocabulary row
    int64_t b_first = 0;   // global index of this forward's first sequence: (dp_rank·M + micro index)·B
    int64_t B_global = 0;  // sequences of the global batch: dp·M·B
};

// What one micro-batch keeps on this stage between its forward and its backward: the saved tensors of this
// stage's layers (all its model chunks) and of the parts outside the layers. A pipeline holds several
// micro-batches in flight at once (model/pipeline_step.cu), each in its own MicroBatchState; every tensor
// comes from the tagged allocator, so the memory report counts them all.
struct MicroBatchState {
    StepShape shape;                // of this micro-batch: its place in the global batch
    int count = 1;                  // micro-batches in the step (the loss gradient's 1/M)
    std::vector<SavedLayer> saved;  // by local layer (PipelineStage::local_layer)
    Tensor tokens, targets;         // i32 [S·B] (sequence-major), on the device
    EmbeddingIndex emb_index;       // first stage: the vocab-parallel embedding's backward
    Tensor embed_drop_mask;         // first stage
    Tensor lnf_in, lnf_mean, lnf_rstd, lmhead_in, logits, ce_rowmax, ce_sumexp;  // last stage
};

struct GPT {
    GPTConfig cfg;
    ProcessGrid* grid = nullptr;
    Ctx* ctx = nullptr;
    ActivationAllocator* alloc = nullptr;
    DType dtype = DType::F32;  // activation and compute-weight storage
    Recompute recompute = Recompute::None;
    Attention attention = Attention::Unfused;  // core attention's form: set after gpt_create (recompute/formulas.h)
    float dropout = 0.f;
    uint64_t seed = 1337;
    int64_t step = 0;  // the optimizer step in flight: dropout masks are keyed by (seed, step) (layers/philox.h)
    PipelineStage stage;                    // the layers and tensors this rank holds (pp = 1: all)
    PipeSchedule schedule = PipeSchedule::OneFOneB;  // the order of forwards and backwards (pipeline_step.cu)
    PipelineRunState pipe;  // the executor's: --pipeline-op-times, its op timeline (model/pipeline_timeline.h)
    // Under a zero-bubble schedule: the layers' weight gradients put off from each B to its W
    // (layers/weight_grad_queue.h).
    WeightGradQueue weight_grads;

    int64_t sizes[NUM_PARAM_TENSORS] = {};    // local element counts
    int64_t offsets[NUM_PARAM_TENSORS] = {};  // local offsets in the flat buffers
    int64_t n_params = 0;                     // local
    int64_t tp_sizes[NUM_PARAM_TENSORS] = {}; // this TP rank's slice of the whole model (every layer, every tensor)
    Tensor master, weights, grads, adam_m, adam_v;  // flat; weights == master when dtype is f32
    // Per model chunk: its layers' gradients still hold the previous step's values (gpt_zero_grad sets it,
    // the chunk's first backward overwrites them and clears it).
    std::vector<bool> layer_grads_stale;
    // The distributed optimizer (parallel/distributed_optimizer.h): with it, adam_m / adam_v (and master in
    // bf16) hold this DP rank's shard only, and weights / grads are padded to a multiple of dp.
    OptimizerShard zero;
    // ZeRO-2 / ZeRO-3 (parallel/zero_sharding.h; the loops' scopes parallel/zero_scopes.h, the step's
    // model/zero_model.h): with it, grads, adam_m, adam_v (and master in bf16) are this rank's shard of every
    // unit, and so are the weights under ZeRO-3; gpt_param / gpt_grad then view the gathered units and the
    // open gradient buckets.
    ZeroSharding sharded;
    // Activation offloading (recompute/activation_offload.h; the loops' calls model/offload_layers.h, the
    // step's model/offload_model.h): off unless configured.
    OffloadState offload;
    ModelStateMemory state_memory;  // the model states' tagged account (recompute/model_state_memory.h)

    // ---- activations of the step in flight -----------------------------------------------------------
    // Every micro-batch's own state, by index: the pipeline names the micro-batch each op runs (j below), and
    // its StepShape places its sequences in the GLOBAL batch (dropout masks are keyed by global coordinates,
    // so any split draws the single-rank masks). gpt_forward / gpt_backward run micro-batch 0 of 1.
    std::vector<MicroBatchState> flight;
    StepShape shape;  // of the micro-batch begun last (gpt_layer_context without a shape; benchmarks set it)
};

// Build the model for `cfg` on this rank (allocates weights, gradients, optimizer state).
// chunks: model chunks per pipeline rank (the interleaved schedule's m; 1 otherwise). zero_stage: shard over the
// ranks that hold the same weights the optimizer states (1, the distributed optimizer), the gradients too (2)
// or the weights too (3); 0: nothing sharded. Nothing changes when there is one such rank.
void gpt_create(GPT& m, const GPTConfig& cfg, ProcessGrid& grid, Ctx& ctx, ActivationAllocator& alloc, DType dtype,
                Recompute recompute, float dropout, uint64_t seed, int chunks = 1, int zero_stage = 0);
void gpt_destroy(GPT& m);
// Deterministic GPT-2 initialization of the FULL model from `seed` (counter-based, so identical for every
// parallel layout), then this rank's slice is kept. N(0, 0.02) weights, residual projections
// N(0, 0.02/sqrt(2L)), zero biases, unit LayerNorm gains.
void gpt_init_random(GPT& m, uint64_t seed);
// Fill the full llm.c-layout parameter buffer (host, fp32) with the same initialization.
void gpt_init_full(const GPTConfig& cfg, uint64_t seed, std::vector<float>& full);
// Load this rank's slice from a full llm.c-layout parameter buffer (host, fp32).
void gpt_load_full(GPT& m, const float* full);
// Gather the full model (llm.c layout) from the TP group and the pipeline's stages; every rank gets it.
void gpt_gather_full(GPT& m, std::vector<float>& full);
// AdamW's moments, gathered like the weights (full model, llm.c order; exact resume, model/train_state.h),
// and loaded back into this rank's slice.
void gpt_gather_full_optimizer(GPT& m, std::vector<float>& adam_m, std::vector<float>& adam_v);
void gpt_load_full_optimizer(GPT& m, const float* adam_m, const float* adam_v);

// Views of this stage's tensors (activation dtype weights / f32 gradients); layer: the GLOBAL layer index,
// -1 for the whole tensor (all of this stage's layers).
Tensor gpt_param(GPT& m, int id, int layer = -1);
Tensor gpt_grad(GPT& m, int id, int layer = -1);

// Forward pass of this rank's part of the batch through its whole model (pp 1). inputs/targets: host int32
// [B_local, S] (as the loader gives them; under CP the model keeps its CP rank's positions of them). Returns
// the mean loss over the B_local·S targets (under CP: the mean over the CP group of each rank's mean, equal
// counts). With keep == false, the activations are released at once (validation). token_losses (optional)
// receives each position's loss −log p(target), [B_local, S] like the inputs (evaluations that score parts
// of a sequence: HellaSwag). At pp > 1 a rank holds one stage: forward_through_stages (model/pipeline_ops.h).
float gpt_forward(GPT& m, const int32_t* inputs, const int32_t* targets, int B_local, int S, bool keep,
                  std::vector<float>* token_losses = nullptr);
// Backward pass of the last forward: accumulates into m.grads (zero them first) and releases activations.
void gpt_backward(GPT& m);

// ---- one micro-batch through one model chunk (a training step's loop, a pipeline schedule's op) -----------
// Micro-batch j of M: its tokens and shapes, kept in m.flight[j] until its backward.
void gpt_begin_microbatch(GPT& m, int j, int M, const int32_t* inputs, const int32_t* targets, int B, int S, bool keep);
// The forward of micro-batch j through model chunk `chunk` of this stage (paper §2; at pp 1 the one chunk
// is the whole model): the first virtual stage embeds the tokens first (x is then ignored), else x is the
// previous chunk's output; the last virtual stage ends in the final norm, the head and the loss, which it
// writes to *loss (and returns an empty tensor); elsewhere it returns the chunk's output.
Tensor gpt_forward_chunk(GPT& m, int j, int chunk, Tensor x, float* loss, std::vector<float>* token_losses);
// Its backward: dout is the gradient of the chunk's output (ignored on the last virtual stage, which starts
// from the loss); returns the gradient of its input, or an empty tensor on the first virtual stage (which
// ends in the embeddings' gradients).
Tensor gpt_backward_chunk(GPT& m, int j, int chunk, Tensor dout);
// Under a zero-bubble schedule (parallel/zero_bubble_schedule.h) gpt_backward_chunk is the B pass: the layers'
// weight gradients wait in m.weight_grads. This is the W pass that computes them, for micro-batch j, chunk c.
void gpt_weight_gradients(GPT& m, int j, int chunk);

// ---- helpers ----------------------------------------------------------------------------------------------
// Start a step's gradients at zero: the embeddings', the final LayerNorm's and the padding are zeroed; the
// layers' are overwritten by each chunk's first backward instead (GradWrite::Overwrite: no memset of most of
// the buffer, and the weight-gradient GEMMs run with beta = 0).
void gpt_zero_grad(GPT& m);
// The shapes of a step of B_local sequences of S tokens on this rank (gpt_forward sets m.shape to it; a
// benchmark that runs one layer alone sets it itself).
// j, M: micro-batch j of M (its place in the global batch).
StepShape gpt_step_shape(const GPT& m, int B_local, int S, int j = 0, int M = 1);
// The description of layer l for the step in flight (shapes, weight views, global dropout coordinates).
LayerContext gpt_layer_context(GPT& m, int l, const StepShape& shape);
LayerContext gpt_layer_context(GPT& m, int l);  // at m.shape
// Rewrite the compute copy of the weights from the fp32 master weights (bf16 only; a no-op in fp32, where
// the two are one buffer): after loading weights and after every optimizer step.
void gpt_refresh_compute_weights(GPT& m);
// Release the activations of every micro-batch in flight without a backward (validation, sampling).
void gpt_release_activations(GPT& m);

// The model's states as the distributed optimizer takes them (parallel/distributed_optimizer.h works on the
// buffers, the shard layout and the DP communicator, not on the model), and its two reports for this model.
inline ModelStates gpt_model_states(const GPT& m) { return {m.master, m.weights, m.grads, m.adam_m, m.adam_v}; }
// ZeRO-2/3's units from the model's SHAPE (model/zero_model.cu): h, Vp, the positions, t, the stage's layers and
// which edge tensors its pipeline placement holds, each unit rounded up to a multiple of d = dp·cp. Computed
// apart from the unit layout that is measured (parallel/zero_sharding.h's z.units), so that a layout that pads
// too much or puts a tensor in the wrong unit shows as measured != formula instead of growing both sides.
struct ZeroShapeUnits {
    int layers = 0;                              // the stage's layers, one unit each
    int64_t layer = 0, edges = 0;                // parameters of a layer's unit and of the edges' (this TP rank's)
    int64_t layer_padded = 0, edges_padded = 0;  // rounded up to a multiple of d
    int64_t n() const { return layers * layer + edges; }
    int64_t padded() const { return layers * layer_padded + edges_padded; }
};
ZeroShapeUnits zero_units_from_shape(const GPT& m);

// The formula of this rank's model states at its ZeRO stage (recompute/model_state_memory.h); ZeRO-2/3's
// sizes from the shape (zero_units_from_shape), never from the layout under test.
inline ModelStateFormula gpt_model_state_formula(const GPT& m) {
    const bool bf16 = m.weights.dtype != DType::F32;
    if (m.sharded.on()) {
        const ZeroShapeUnits u = zero_units_from_shape(m);
        return model_state_formula_zero(m.sharded.stage, u.n(), u.padded(), weight_ranks(*m.grid), bf16);
    }
    return model_state_formula(m.n_params, weight_ranks(*m.grid), m.zero.on, bf16);
}
inline std::string model_states_by_rank(const GPT& m, MPI_Comm world) {
    return model_states_by_rank(m.state_memory, gpt_model_state_formula(m), world);
}
inline std::string distributed_optimizer_comm_line(const GPT& m) {
    return distributed_optimizer_comm_line(m.zero, m.weights.dtype);
}

// ---- tests only ----------------------------------------------------------------------------------------
// gpt_gather_full for the gradients: the parallel-vs-single-rank tests compare them (test/model/).
void gpt_gather_full_grads(GPT& m, std::vector<float>& full);
