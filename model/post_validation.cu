// post_validation.cu — the optimizer step without a synchronization at its end, validated one step later (see
// the header).
#include "post_validation.h"

#include <cmath>
#include "pipeline_step.h"
#include "zero_model.h"  // the NaN hook in ZeRO-2/3's owned pieces
#include "../layers/test_hooks.h"
#include "../layers/trace.h"
#include "../parallel/data_parallel.h"

// The states an optimizer step changes, and the gradients it read: into the snapshot (save) or back from it.
// Each buffer that is one of its own (the compute weights only when they are not the master weights).
static void snapshot(GPT& m, PostValidation& pv, bool save) {
    auto one = [&](Tensor& snap, Tensor live) {
        if (live.empty() || live.n == 0) return;
        if (snap.empty()) snap = counted_alloc(live.device, live.dtype, live.n, MemoryKind::Snapshot, "the post-validation snapshot");
        if (save) tensor_copy(*m.ctx, snap, live);
        else tensor_copy(*m.ctx, live, snap);
    };
    one(pv.master, m.master);
    if (m.weights.data != m.master.data) one(pv.weights, m.weights);
    one(pv.adam_m, m.adam_m);
    one(pv.adam_v, m.adam_v);
    one(pv.grads, m.grads);
}

void post_validation_free(PostValidation& pv) {
    for (Tensor* t : {&pv.master, &pv.weights, &pv.adam_m, &pv.adam_v, &pv.grads}) counted_free(*t, MemoryKind::Snapshot), *t = Tensor();
}

// The pending step's checks, now that its reduction has arrived: the same loss, norm, verdict and clip as the
// synchronous step's (model/train_step.cu), from the same sums in the same order. A failed check undoes the
// update, and redoes it with the clip's scale when the norm is finite.
static StepStats validate(GPT& m, PostValidation& pv) {
    if (m.grid->pp > 1)
        host_sum_wait(side_comm(m.grid->pp_comm), &pv.sum, pv.reduced, m.grid->pp_comm.rules.timeout_s,
                      "the post-validation of step " + std::to_string(pv.pending));
    StepStats st;
    st.step = pv.pending;
    st.loss = (float)average_scalar(m.grid->dp_comm, (float)pv.reduced[1]);
    const double norm = std::sqrt(pv.reduced[0]);
    st.grad_norm = (float)norm;
    // (The loss and the norm are the same on every rank after their reductions: so is the verdict.)
    st.applied = std::isfinite(st.loss) && std::isfinite(norm);
    const float scale = st.applied ? clip_scale(pv.opt, norm) : 1.0f;
    if (!st.applied || scale != 1.0f) {
        // --trace: the rollback on the timeline (tools/draw_pipeline marks it R)
        TraceScope span(TraceThread::Compute, "optimizer", "rollback of step " + std::to_string(st.step),
                        trace_recording() ? std::string("\"step\":") + std::to_string(st.step) : "");
        pipeline_embedding_sum_finish(m);  // the step after's early sum writes the gradients: let it land first
        snapshot(m, pv, false);
        if (st.applied) optimizer_update(m, pv.opt, pv.pending, pv.lr, scale);
        else st.first_nonfinite = first_nonfinite_gradient(m);  // (collective: the verdict is every rank's)
        st.rolled_back = true;
        pv.rollbacks++;
    }
    pv.pending = 0;
    return st;
}

StepStats post_validated_step(GPT& m, PostValidation& pv, const int32_t* inputs, const int32_t* targets, int B_local,
                              int S, const OptimConfig& opt, int step, float lr, int micro_batches) {
    m.step = step;
    m.pipe.post_validation = true;  // no loss broadcast at the pipeline's end; the embedding's sum starts early
    side_comm(m.grid->pp_comm), side_comm(m.grid->emb_comm);  // (made once, here, where every rank is together)
    if (pv.master.empty()) snapshot(m, pv, true);  // allocated before the first step's peak, which then holds it
    float local = forward_backward(m, inputs, targets, B_local, S, micro_batches);
    if (pv.pending) {
        const StepStats before = validate(m, pv);
        if (before.rolled_back) {  // with the weights now right (the first run's time: idle for the timeline)
            m.pipe.timeline.drop_last_step();
            local = forward_backward(m, inputs, targets, B_local, S, micro_batches);
        }
        pv.validated.push_back(before);
    }
    sync_gradients(m);
    if (step == g_test_hooks.inject_nan_at_step && m.cfg.layers > 0 && m.stage.holds_layer(m.cfg.layers - 1)) {  // as train_step does
        Tensor g = zero_sharded(m) ? zero_owned_gradient(m, P_ATTPROJW, m.cfg.layers - 1) : gpt_grad(m, P_ATTPROJW, m.cfg.layers - 1);
        if (g.n > 0) tensor_fill_f32(*m.ctx, g.slice(0, 1), NAN);  // (ZeRO-2/3: in the owners' pieces)
    }
    // The checks' inputs leave at once: this stage's part of the squared norm (reduced over TP and DP as the
    // synchronous path reduces it) and the head stage's loss, summed over the pipeline without waiting.
    pv.reduced[0] = gradient_norm_stage(m);
    pv.reduced[1] = m.stage.last() ? local : 0.0;
    if (m.grid->pp > 1) host_sum_post(side_comm(m.grid->pp_comm), pv.reduced, 2, &pv.sum);
    snapshot(m, pv, true);
    pv.opt = opt, pv.lr = lr, pv.pending = step;
    optimizer_update(m, opt, step, lr, 1.0f);
    if (pv.validated.empty()) return StepStats{};
    const StepStats first = pv.validated.front();
    pv.validated.erase(pv.validated.begin());
    return first;
}

std::vector<StepStats> post_validation_settle(GPT& m, PostValidation& pv) {
    if (pv.pending) pv.validated.push_back(validate(m, pv));
    pipeline_embedding_send_wait(m);
    std::vector<StepStats> out;
    out.swap(pv.validated);
    return out;
}
