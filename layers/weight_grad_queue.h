// weight_grad_queue.h — weight gradients put off until later: a zero-bubble pipeline schedule's W passes
// (parallel/zero_bubble_schedule.h). Beyond the paper; the layers do not know about it.
//
// A linear layer's backward computes dX = dY·W (what the stage before waits for) and dW = dYᵀ·X, db = Σ dY
// (what nobody waits for). While a WeightGradDeferral is in scope, linear_backward (layers/linear.cu) computes
// dX only and hands dW and db here, through the WeightGradSink interface (layers/linear.h: the layer never names
// this file, and this file calls linear_backward): the queue copies dY and X into tensors of its own, tagged "w:dout" and
// "w:input" on the layer (the memory report counts them, apart from the saved activations), so the layer's
// backward may release its buffers as usual. run() then computes every put-off gradient of one
// (micro-batch, chunk), with the very GEMM calls the layer would have made, in the same order: the bits are
// those of an undivided backward.
//
// Which gradients: the four linear layers' weights and biases in every transformer layer (the bias of the
// row-parallel ones has a bias_backward call of its own in the layer: it stays in B). The LayerNorm gains and the
// embeddings stay in B; so does the LM head, whose dW would keep the [s·b, V/t] logits gradient.
#pragma once
#include <map>
#include <utility>
#include <vector>
#include "activation_allocator.h"
#include "linear.h"

class WeightGradQueue final : public WeightGradSink {
public:
    // Inside linear_backward, while a WeightGradDeferral is in scope: copy dout and in, remember the GEMM
    // (linear_backward's arguments, runtime.h's GradWrite) and return true. Outside one: false.
    bool defer(Ctx& ctx, Tensor dweight, Tensor dbias, Tensor dout, Tensor in, int N, int IC, int OC, GradWrite grads) override;
    // The W pass of micro-batch j, chunk c: every gradient put off for it, in the order they came; frees the
    // copies. A (j, c) with nothing queued is an error (the schedule ran a W twice, or before its B).
    void run(Ctx& ctx, int j, int chunk);
    // Tests only (a negative control): free the copies of (j, c) without computing anything.
    void discard(int j, int chunk);
    bool empty() const { return pending_.empty(); }

private:
    friend class WeightGradDeferral;
    static constexpr int kNotDeferring = -1000;
    struct Task { Tensor dweight, dbias, dout, in; int N, IC, OC; GradWrite grads; };
    ActivationAllocator* alloc_ = nullptr;
    int layer_ = kNotDeferring;  // the layer whose backward runs (the copies' tag)
    std::pair<int, int> key_;    // its (micro-batch, chunk)
    std::map<std::pair<int, int>, std::vector<Task>> pending_;
};

// While in scope: the weight gradients of layer `layer`'s backward for (micro-batch j, chunk) go to `q`
// (ctx.weight_grad_sink points to it). A null q defers nothing (every schedule but the zero-bubble ones).
class WeightGradDeferral {
public:
    WeightGradDeferral(WeightGradQueue* q, Ctx& ctx, ActivationAllocator& alloc, int j, int chunk, int layer);
    ~WeightGradDeferral();
    WeightGradDeferral(const WeightGradDeferral&) = delete;
    WeightGradDeferral& operator=(const WeightGradDeferral&) = delete;

private:
    WeightGradQueue* q_;
    Ctx& ctx_;
};
