// weight_grad_queue.cu — weight gradients put off for a zero-bubble schedule's W (see the header).
#include "weight_grad_queue.h"

bool WeightGradQueue::defer(Ctx& ctx, Tensor dweight, Tensor dbias, Tensor dout, Tensor in, int N, int IC, int OC,
                            GradWrite grads) {
    if (layer_ == kNotDeferring) return false;
    Task t{dweight, dbias, Tensor(), Tensor(), N, IC, OC, grads};
    // Copies on the context's stream (tensor_convert between equal dtypes): the caller frees its buffers at once.
    t.dout = alloc_->alloc(dout.dtype, dout.n, layer_, "w:dout");
    tensor_convert(ctx, t.dout, dout);
    t.in = alloc_->alloc(in.dtype, in.n, layer_, "w:input");
    tensor_convert(ctx, t.in, in);
    pending_[key_].push_back(t);
    return true;
}

void WeightGradQueue::run(Ctx& ctx, int j, int chunk) {
    auto it = pending_.find({j, chunk});
    if (it == pending_.end())
        mm_fatal("W pass of micro-batch %d (chunk %d): nothing was put off for it (its B has not run, or its W ran already)",
                 j, chunk);
    for (Task& t : it->second) {  // the layer's own calls (linear_backward without din), in their order
        linear_backward(ctx, Tensor(), t.dweight, t.dbias, t.dout, t.in, Tensor(), t.N, t.IC, t.OC, false, t.grads);
        alloc_->release(t.dout);
        alloc_->release(t.in);
    }
    pending_.erase(it);
}

void WeightGradQueue::discard(int j, int chunk) {
    auto it = pending_.find({j, chunk});
    if (it == pending_.end()) return;
    for (Task& t : it->second) alloc_->release(t.dout), alloc_->release(t.in);
    pending_.erase(it);
}

WeightGradDeferral::WeightGradDeferral(WeightGradQueue* q, Ctx& ctx, ActivationAllocator& alloc, int j, int chunk,
                                       int layer)
    : q_(q), ctx_(ctx) {
    if (!q_) return;
    q_->alloc_ = &alloc;
    q_->layer_ = layer;
    q_->key_ = {j, chunk};
    ctx_.weight_grad_sink = q_;
}

WeightGradDeferral::~WeightGradDeferral() {
    if (!q_) return;
    q_->layer_ = WeightGradQueue::kNotDeferring;
    ctx_.weight_grad_sink = nullptr;
}
