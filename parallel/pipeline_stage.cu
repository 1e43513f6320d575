// pipeline_stage.cu — the layers and tensors of one pipeline stage, and the copies to and from the whole
// model's layout (see the header).
#include "pipeline_stage.h"

#include <cstring>
#include "../layers/tensor.h"  // mm_fatal

PipelineStage pipeline_stage(const GPTConfig& cfg, int pp, int rank, int chunks, bool v_shape) {
    PipelineStage st;
    st.pp = pp;
    st.rank = rank;
    st.chunks = chunks;
    st.v_shape = v_shape && chunks == 2 && pp > 1;
    st.layers_per_chunk = cfg.layers / (pp * chunks);  // divisibility: grid_validate
    for (int c = 0; c < chunks; c++)
        for (int l = st.chunk_begin(c); l < st.chunk_end(c); l++) st.layers.push_back(l);
    return st;
}

int PipelineStage::local_layer(int l) const {
    if (!holds_layer(l)) mm_fatal("pipeline stage %d does not hold layer %d", rank, l);
    const int v = l / layers_per_chunk;  // its virtual stage; chunk v / p of this rank (as well under ZB-V's V)
    return (v / pp) * layers_per_chunk + l % layers_per_chunk;
}

bool PipelineStage::holds(int id) const {
    if (is_layer_param(id)) return true;
    if (id == P_WTE) return first() || last();  // the embedding, and the LM head tied to it
    if (id == P_WPE) return first();
    return last();  // the final layer norm
}

void stage_param_sizes(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                       int64_t out[NUM_PARAM_TENSORS]) {
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        if (is_layer_param(id)) out[id] = cfg.layers > 0 ? tp_sizes[id] / cfg.layers * (int64_t)st.layers.size() : 0;
        else out[id] = st.holds(id) ? tp_sizes[id] : 0;
    }
}

// Visit every run of a tensor the stage holds: (offset in the whole layout, offset in the stage layout, length).
template <class F>
static void for_each_stage_run(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                               bool owned_only, F&& f) {
    int64_t whole_off = 0, stage_off = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const int64_t n = tp_sizes[id];
        if (is_layer_param(id)) {
            const int64_t per = cfg.layers > 0 ? n / cfg.layers : 0;
            for (int l : st.layers) f(whole_off + per * l, stage_off, per), stage_off += per;
        } else if (st.holds(id)) {
            if (!owned_only || st.owns(id)) f(whole_off, stage_off, n);
            stage_off += n;
        }
        whole_off += n;
    }
}

void stage_extract(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                   const float* whole, float* stage) {
    for_each_stage_run(st, cfg, tp_sizes, false, [&](int64_t w, int64_t s, int64_t n) {
        memcpy(stage + s, whole + w, (size_t)n * sizeof(float));
    });
}

void stage_insert(const PipelineStage& st, const GPTConfig& cfg, const int64_t tp_sizes[NUM_PARAM_TENSORS],
                  const float* stage, float* whole, bool owned_only) {
    for_each_stage_run(st, cfg, tp_sizes, owned_only, [&](int64_t w, int64_t s, int64_t n) {
        memcpy(whole + w, stage + s, (size_t)n * sizeof(float));
    });
}

int64_t stage_owned_count(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS]) {
    int64_t total = 0;
    for_each_stage_run(st, cfg, sizes, true, [&](int64_t, int64_t, int64_t n) { total += n; });
    return total;
}

void stage_pack_owned(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS],
                      const float* whole, float* pack) {
    int64_t k = 0;
    for_each_stage_run(st, cfg, sizes, true, [&](int64_t w, int64_t, int64_t n) {
        memcpy(pack + k, whole + w, (size_t)n * sizeof(float));
        k += n;
    });
}

void stage_unpack_owned(const PipelineStage& st, const GPTConfig& cfg, const int64_t sizes[NUM_PARAM_TENSORS],
                        const float* pack, float* whole) {
    int64_t k = 0;
    for_each_stage_run(st, cfg, sizes, true, [&](int64_t w, int64_t, int64_t n) {
        memcpy(whole + w, pack + k, (size_t)n * sizeof(float));
        k += n;
    });
}
