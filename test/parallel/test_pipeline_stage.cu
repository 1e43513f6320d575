// test_pipeline_stage.cu — what one pipeline stage holds and owns, and the copies between the whole model's
// layout and a stage's (parallel/pipeline_stage.cu), for p = 1, 2, 4 stages and m = 1, 2 model chunks, on
// the CPU without MPI (label unit).
//
//  * the layers: every layer on exactly one stage, L/p per stage, chunk c of rank r = virtual stage c·p + r
//    (layers [(c·p + r)·L/(p·m), ... + L/(p·m))), local_layer = the position in the stage's list;
//  * the tensors: every stage holds its layers' tensors; the word embedding on the first and the last stage
//    (owned by the first), the position embedding on the first, the final layer norm on the last; each
//    tensor element owned by exactly one stage;
//  * stage_param_sizes: the stages' per-layer tensors add up to the whole model's;
//  * stage_extract then stage_insert into a poisoned whole writes back exactly what the stage holds (the
//    values where they came from, the poison elsewhere); with owned_only the tied copy on the last stage is
//    left alone;
//  * stage_pack_owned / stage_unpack_owned: every stage's pack unpacked into one poisoned whole rebuilds the
//    whole bit for bit, and no element is written by two stages.
#include <cmath>
#include <vector>
#include "layers/model_shape.h"
#include "parallel/pipeline_stage.h"
#include "test/test_util.h"

// A model with enough layers for 4 stages of 2 chunks, and tensors small enough to check element by element.
static GPTConfig small_config() {
    GPTConfig c;
    c.max_seq = 8;
    c.vocab = 50;
    c.padded_vocab = padded_vocab_for(c.vocab);
    c.layers = 8;
    c.heads = 2;
    c.channels = 8;
    return c;
}

static void test_layers(const GPTConfig& cfg, int pp, int chunks) {
    const int per_chunk = cfg.layers / (pp * chunks);
    std::vector<int> holders(cfg.layers, 0);
    for (int r = 0; r < pp; r++) {
        const PipelineStage st = pipeline_stage(cfg, pp, r, chunks);
        CHECK(st.first() == (r == 0) && st.last() == (r == pp - 1), "p %d m %d rank %d: first/last", pp, chunks, r);
        CHECK((int)st.layers.size() == cfg.layers / pp, "p %d m %d rank %d: %zu layers, expected %d", pp, chunks, r,
              st.layers.size(), cfg.layers / pp);
        for (int c = 0; c < chunks; c++) {
            const int begin = (c * pp + r) * per_chunk;
            CHECK(st.chunk_begin(c) == begin && st.chunk_end(c) == begin + per_chunk,
                  "p %d m %d rank %d chunk %d: layers [%d, %d), expected [%d, %d)", pp, chunks, r, c, st.chunk_begin(c),
                  st.chunk_end(c), begin, begin + per_chunk);
        }
        for (size_t i = 0; i < st.layers.size(); i++) {
            const int l = st.layers[i];
            holders[l]++;
            CHECK(st.holds_layer(l) && st.local_layer(l) == (int)i, "p %d m %d rank %d: layer %d at local %zu", pp, chunks,
                  r, l, i);
        }
        for (int l = 0; l < cfg.layers; l++) {
            bool listed = false;
            for (int x : st.layers) listed = listed || x == l;
            CHECK(st.holds_layer(l) == listed, "p %d m %d rank %d: holds_layer(%d) disagrees with the list", pp, chunks, r, l);
        }
    }
    for (int l = 0; l < cfg.layers; l++)
        CHECK(holders[l] == 1, "p %d m %d: layer %d is on %d stages, expected 1", pp, chunks, l, holders[l]);
}

static void test_tensors(const GPTConfig& cfg, int pp, int chunks) {
    int64_t whole[NUM_PARAM_TENSORS];
    param_sizes(cfg, whole);
    int64_t layer_sum[NUM_PARAM_TENSORS] = {};
    for (int r = 0; r < pp; r++) {
        const PipelineStage st = pipeline_stage(cfg, pp, r, chunks);
        int64_t sizes[NUM_PARAM_TENSORS];
        stage_param_sizes(st, cfg, whole, sizes);
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            bool want_holds = true, want_owns = true;
            if (id == P_WTE) want_holds = st.first() || st.last(), want_owns = st.first();
            else if (id == P_WPE) want_holds = want_owns = st.first();
            else if (!is_layer_param(id)) want_holds = want_owns = st.last();  // the final layer norm
            CHECK(st.holds(id) == want_holds && st.owns(id) == want_owns, "p %d m %d rank %d: %s holds %d owns %d", pp,
                  chunks, r, param_name(id), st.holds(id), st.owns(id));
            if (is_layer_param(id)) {
                CHECK(sizes[id] == whole[id] / cfg.layers * (int64_t)st.layers.size(), "p %d m %d rank %d: %s size %lld",
                      pp, chunks, r, param_name(id), (long long)sizes[id]);
                layer_sum[id] += sizes[id];
            } else {
                CHECK(sizes[id] == (want_holds ? whole[id] : 0), "p %d m %d rank %d: %s size %lld", pp, chunks, r,
                      param_name(id), (long long)sizes[id]);
            }
        }
    }
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        if (is_layer_param(id))
            CHECK(layer_sum[id] == whole[id], "p %d m %d: the stages' %s add up to %lld, expected %lld", pp, chunks,
                  param_name(id), (long long)layer_sum[id], (long long)whole[id]);
}

// The whole layout with element i = i (exact in float for these sizes).
static std::vector<float> numbered(int64_t n) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++) v[(size_t)i] = (float)i;
    return v;
}

static void test_copies(const GPTConfig& cfg, int pp, int chunks) {
    int64_t whole_sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, whole_sizes);
    const int64_t n = param_count_of(whole_sizes);
    const std::vector<float> whole = numbered(n);
    std::vector<float> rebuilt((size_t)n, NAN);
    std::vector<int> writers((size_t)n, 0);
    int64_t owned_total = 0;
    for (int r = 0; r < pp; r++) {
        const PipelineStage st = pipeline_stage(cfg, pp, r, chunks);
        int64_t sizes[NUM_PARAM_TENSORS];
        stage_param_sizes(st, cfg, whole_sizes, sizes);
        // Extract, then insert into a poisoned whole: what the stage holds comes back where it was.
        std::vector<float> stage((size_t)param_count_of(sizes), NAN);
        stage_extract(st, cfg, whole_sizes, whole.data(), stage.data());
        int nan_in_stage = 0;
        for (float x : stage) nan_in_stage += std::isnan(x) ? 1 : 0;
        CHECK(nan_in_stage == 0, "p %d m %d rank %d: extract left %d stage elements unwritten", pp, chunks, r, nan_in_stage);
        for (int owned_only = 0; owned_only < 2; owned_only++) {
            std::vector<float> back((size_t)n, NAN);
            stage_insert(st, cfg, whole_sizes, stage.data(), back.data(), owned_only != 0);
            int64_t off = 0, wrong = 0;
            for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
                const int64_t per = is_layer_param(id) ? whole_sizes[id] / cfg.layers : whole_sizes[id];
                for (int64_t i = 0; i < whole_sizes[id]; i++) {
                    const bool here = is_layer_param(id) ? st.holds_layer((int)(i / per))
                                                         : (owned_only ? st.owns(id) : st.holds(id));
                    const float got = back[(size_t)(off + i)];
                    if (here ? got != whole[(size_t)(off + i)] : !std::isnan(got)) wrong++;
                }
                off += whole_sizes[id];
            }
            CHECK(wrong == 0, "p %d m %d rank %d: insert%s after extract: %lld elements wrong", pp, chunks, r,
                  owned_only ? " (owned only)" : "", (long long)wrong);
        }
        // Pack what the stage owns; unpack every stage's pack into one poisoned whole.
        const int64_t k = stage_owned_count(st, cfg, whole_sizes);
        owned_total += k;
        std::vector<float> pack((size_t)k, NAN), alone((size_t)n, NAN);
        stage_pack_owned(st, cfg, whole_sizes, whole.data(), pack.data());
        stage_unpack_owned(st, cfg, whole_sizes, pack.data(), alone.data());
        for (int64_t i = 0; i < n; i++)
            if (!std::isnan(alone[(size_t)i])) writers[(size_t)i]++;
        stage_unpack_owned(st, cfg, whole_sizes, pack.data(), rebuilt.data());
    }
    int64_t twice = 0, never = 0;
    for (int w : writers) twice += w > 1 ? 1 : 0, never += w == 0 ? 1 : 0;
    CHECK(owned_total == n, "p %d m %d: the stages own %lld elements, the model has %lld", pp, chunks, (long long)owned_total,
          (long long)n);
    CHECK(twice == 0 && never == 0, "p %d m %d: %lld elements owned by two stages, %lld by none", pp, chunks,
          (long long)twice, (long long)never);
    CHECK(memcmp(rebuilt.data(), whole.data(), (size_t)n * sizeof(float)) == 0,
          "p %d m %d: the unpacked stages do not rebuild the whole model bit for bit", pp, chunks);
}

int main() {
    const GPTConfig cfg = small_config();
    for (int pp : {1, 2, 4})
        for (int chunks : {1, 2}) {
            test_layers(cfg, pp, chunks);
            test_tensors(cfg, pp, chunks);
            test_copies(cfg, pp, chunks);
        }
    return test_finish("test_pipeline_stage");
}
