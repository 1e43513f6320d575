// test_gpu_gpt2_layer.cu — one transformer layer at the GPT-2 small shape (C 768, 12 heads, S 1024) on the GPU
// against the same model on the CPU (label gpu; exits 77 without a GPU).
//
// The model-level GPU tests elsewhere use C = 32, S <= 32, so none of the wide kernels (softmax with 4 packs
// per lane over 4 causal blocks, LayerNorm's 768 channels, cuBLASLt's fused bias at real GEMM sizes) runs
// inside a whole step there. Here a 1-layer GPT (vocabulary 1024) runs on one rank, twice from the same
// initialization: on the CPU and on the GPU. Checked, dropout on: the loss and the full gradients of one
// forward + backward (norm-relative), then a 3-step loss curve with AdamW.
//   test_gpu_gpt2_layer [--dtype fp32|bf16]
#include <cstring>
#include "model_fixture.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    DType dt = DType::F32;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dt = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
    if (!cuda_available()) {
        printf("test_gpu_gpt2_layer: no CUDA GPU visible, skipping\n");
        MPI_Finalize();
        return 77;
    }
    const int B = 1, S = 1024;
    ModelSpec spec;
    spec.cfg = tiny_config(/*layers*/ 1, /*heads*/ 12, /*hidden*/ 768, /*vocab*/ 1000, /*padded*/ 1024, /*max_seq*/ S);
    spec.dtype = dt;
    ModelSpec gpu_spec = spec;
    gpu_spec.device = Device::CUDA;
    const char* dn = dtype_name(dt);
    std::vector<float> g_cpu, g_gpu;
    std::vector<float> curve_cpu, curve_gpu;
    float l_cpu = 0, l_gpu = 0;
    {
        ModelHarness cpu(spec, MPI_COMM_SELF);
        l_cpu = loss_and_grads(cpu, B, S, 1, g_cpu);
        curve_cpu = loss_curve(cpu, B, S, 3);
    }
    {
        ModelHarness gpu(gpu_spec, MPI_COMM_SELF);
        l_gpu = loss_and_grads(gpu, B, S, 1, g_gpu);
        curve_gpu = loss_curve(gpu, B, S, 3);
    }
    const double tol = dt == DType::BF16 ? 2e-2 : 1e-4;
    printf("GPT-2 small layer (C 768, 12 heads, S 1024, %s): loss cpu %.7f gpu %.7f\n", dn, l_cpu, l_gpu);
    CHECK(std::fabs(l_cpu - l_gpu) <= tol * std::fabs(l_cpu), "loss: cpu %.7f gpu %.7f [%s]", l_cpu, l_gpu, dn);
    check_close_norm("gradients, GPU against CPU", dt, g_gpu, g_cpu);
    for (size_t i = 0; i < curve_cpu.size(); i++) {
        printf("  step %zu: loss cpu %.7f gpu %.7f\n", i + 1, curve_cpu[i], curve_gpu[i]);
        CHECK(std::fabs(curve_cpu[i] - curve_gpu[i]) <= tol * std::fabs(curve_cpu[i]), "step %zu loss: cpu %.7f gpu %.7f [%s]",
              i + 1, curve_cpu[i], curve_gpu[i], dn);
    }
    const int rc = test_finish("test_gpu_gpt2_layer");
    MPI_Finalize();
    return rc;
}
