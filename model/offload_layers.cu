// offload_layers.cu — activation offloading in a pipeline stage's layer loops (see the header).
#include "offload_layers.h"

bool offload_chooses(const OffloadPolicy& p, const std::vector<std::vector<bool>>& plan, const PipelineStage& st,
                     int j, int chunk, int layer) {
    if (p.kind == OffloadPolicy::Layers) {
        const int n = p.layers < 0 ? st.layers_per_chunk - 1 : p.layers;
        return layer - st.chunk_begin(chunk) < n;
    }
    if (p.kind == OffloadPolicy::InFlight) return j < (int)plan.size() && plan[(size_t)j][(size_t)chunk];
    return false;
}

void offload_after_forward(OffloadState& o, const PipelineStage& st, int j, int chunk, int layer, SavedLayer& s) {
    if (!o.in_step) return;
    // One layer later: the copies queued after the previous layer's forward ran beside this one's; their device
    // blocks go back now (ctx.stream waits for those copies), so the device holds at most the layer being
    // copied and the layer being computed, not the whole chunk (test_gpu_activation_offload_forward_peak).
    o.mover->flush();
    if (offload_chooses(o.policy, o.plan, st, j, chunk, layer)) o.mover->offload(j, layer, s);
    if (layer + 1 == st.chunk_end(chunk)) o.mover->flush();  // the forward ends with them off the device
}

void reload_before_backward(OffloadState& o, const PipelineStage& st, int j, int chunk, int layer,
                            std::vector<SavedLayer>& saved) {
    if (!o.in_step) return;
    ActivationOffload& mover = *o.mover;
    mover.wait(j, layer, saved[(size_t)st.local_layer(layer)]);  // issued one layer ahead, or now (the chunk's last)
    if (layer - 1 >= st.chunk_begin(chunk)) mover.reload(j, layer - 1, saved[(size_t)st.local_layer(layer - 1)]);
}
