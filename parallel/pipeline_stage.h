// pipeline_stage.h — what one pipeline stage holds (paper §2 "pipeline parallelism"; Narayanan et al. 2021).
//
// The L layers are cut into P = p·m equal parts, the virtual stages. Rank r of the pipeline holds the m
// parts v = c·p + r, c = 0..m−1 (its model chunks; m = 1 without interleaving: layers [r·L/p, (r+1)·L/p)).
// The first stage (r = 0) also holds the embeddings, the last (r = p−1) the final layer norm and the LM head,
// whose weight is the word embedding (GPT-2 ties them): the first and the last stage each keep a copy of
// the word embedding, and the sum of their two gradients is the gradient of the tied weight (sync_gradients
// in model/train_step.cu all-reduces it over the tied-embedding group).
//
// ZB-V (parallel/zero_bubble_schedule.h) places the 2p virtual stages in a V instead: rank r holds v = r and
// v = 2p − 1 − r, so rank 0 holds both the embeddings and the head (one copy of the word embedding, as at pp 1).
//
// A stage's flat parameter buffer keeps llm.c's tensor order with only what it holds: a per-layer tensor
// holds its layers in local order (chunk 0's, then chunk 1's, ...), a tensor it does not hold has size 0.
// With p = 1 this is exactly the whole model's (tensor-parallel slice) layout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>
#include "../layers/model_shape.h"

struct PipelineStage {
    int pp = 1, rank = 0;  // p and this rank's place in the pipeline
    int chunks = 1;        // m: model chunks per rank (interleaved schedule)
    bool v_shape = false;  // ZB-V's placement (chunks == 2)
    int layers_per_chunk = 0;
    std::vector<int> layers;  // the global indices of this stage's layers, in local order
    bool first() const { return rank == 0; }
    bool last() const { return rank == head_rank(); }  // holds the last virtual stage (the head and the loss)
    int head_rank() const { return v_shape ? 0 : pp - 1; }
    int virtual_stage(int chunk) const { return v_shape && chunk == 1 ? 2 * pp - 1 - rank : chunk * pp + rank; }
    int num_virtual() const { return pp * chunks; }
    // The global layers [begin, end) of a chunk.
    int chunk_begin(int chunk) const { return virtual_stage(chunk) * layers_per_chunk; }
    int chunk_end(int chunk) const { return chunk_begin(chunk) + layers_per_chunk; }
    int local_layer(int l) const;  // position of global layer l in `layers`; fatal if not held
    bool holds_layer(int l) const {
        const int v = l / std::max(layers_per_chunk, 1);
        return l >= 0 && !layers.empty() && (v_shape && v >= pp ? 2 * pp - 1 - v : v % pp) == rank;
    }
    // Whether this stage holds (a copy of) parameter tensor id (every stage holds its layers' tensors).
    bool holds(int id) const;
    // Whether this stage's copy is the one a consolidated checkpoint takes (the word embedding: the first
    // stage's; every other tensor has one holder).
    bool owns(int id) const { return holds(id) && (id != P_WTE || first()); }
};

PipelineStage pipeline_stage(const GPTConfig& cfg, int pp, int rank, int chunks, bool v_shape = false);

// Element counts of this stage's tensors, from the counts of the whole model's slice on this TP rank.
void stage_param_sizes(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                       int64_t out[NUM_PARAM_TENSORS]);
// Copy between the whole model's layout (this TP rank's slice of every tensor, `tp_sizes`) and the stage's
// layout. insert writes only what the stage holds (owned_only: only what it owns) and leaves the rest.
void stage_extract(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                   const float* whole, float* stage);
void stage_insert(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                  const float* stage, float* whole, bool owned_only);
// The same two copies between one stage's owned elements packed contiguously (in the whole layout's order)
// and the whole layout: a consolidated checkpoint gathers each stage's pack.
int64_t stage_owned_count(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS]);
void stage_pack_owned(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS],
                      const float* whole, float* pack);
void stage_unpack_owned(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS],
                        const float* pack, float* whole);
