// test_gpt_gradcheck.cu — whole-model gradient check on a tiny GPT (CPU, fp32, single rank): the analytic
// gradient from gpt_backward against central finite differences of the loss, along random directions
// restricted to each parameter tensor (a directional derivative: dL/dε of L(θ + ε·u) = g·u).
// Dropout is on: its masks are deterministic, so the loss is a smooth function of the weights.
#include "model_fixture.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int failed = 0;
    {
    ModelSpec s;
    s.cfg = tiny_config(2, 2, 16, 29, 32, 16);
    s.dropout = 0.1f;
    ModelHarness h(s, MPI_COMM_SELF);
    GPT& m = h.model;
    const int B = 2, S = 8;
    Batch b = make_batch(s.cfg, B, S, 3, 1, 0);
    gpt_zero_grad(m);
    gpt_forward(m, b.inputs.data(), b.targets.data(), B, S, true);
    gpt_backward(m);
    std::vector<float> g = tensor_to_host_f32(m.grads), p0 = tensor_to_host_f32(m.master);
    std::mt19937 rng(5);
    auto loss_at = [&](const std::vector<float>& p) {
        tensor_from_host_f32(m.master, p.data());
        return (double)gpt_forward(m, b.inputs.data(), b.targets.data(), B, S, false);
    };
    int64_t sizes[NUM_PARAM_TENSORS];
    local_param_sizes(s.cfg, 1, sizes);
    int64_t off = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        std::vector<float> u = random_vec((size_t)sizes[id], rng);
        if (id == P_WTE)  // padded vocabulary rows carry no gradient; leave them out of the direction
            for (int64_t i = (int64_t)s.cfg.vocab * s.cfg.channels; i < sizes[id]; i++) u[i] = 0;
        double unorm = 0, analytic = 0;
        for (int64_t i = 0; i < sizes[id]; i++) unorm += (double)u[i] * u[i];
        unorm = std::sqrt(unorm);
        for (int64_t i = 0; i < sizes[id]; i++) analytic += (double)g[off + i] * u[i] / unorm;
        const double eps = 1e-2;
        std::vector<float> pp = p0, pm = p0;
        for (int64_t i = 0; i < sizes[id]; i++) {
            pp[off + i] += (float)(eps * u[i] / unorm);
            pm[off + i] -= (float)(eps * u[i] / unorm);
        }
        double numeric = (loss_at(pp) - loss_at(pm)) / (2 * eps);
        double err = std::fabs(numeric - analytic) / (std::fabs(numeric) + 1e-3);
        printf("  %-9s analytic %+.6f numeric %+.6f rel err %.2e\n", param_name(id), analytic, numeric, err);
        CHECK(err < 2e-2, "%s: directional derivative %.6f vs finite difference %.6f", param_name(id), analytic, numeric);
        off += sizes[id];
    }
    tensor_from_host_f32(m.master, p0.data());
    failed = test_finish("test_gpt_gradcheck");
    }  // the model is destroyed before MPI_Finalize
    MPI_Finalize();
    return failed;
}
