// test_runtime.cu — the runtime's buffers (layers/runtime.cu): the CPU reference (--cpu, label unit) and the
// GPU path against it (--gpu, label gpu).
//
// CPU checks: tensor_convert's choice of kernel for each dtype pair; f32 -> bf16 rounds to nearest even
// (values between two bf16 numbers, ties, and ±inf and NaN kept) and bf16 -> f32 is exact; the stream-ordered
// host round trips (tensor_to_host_f32 / tensor_from_host_f32 with a context) give what the plain ones give.
// GPU checks: tensor_convert on the GPU against the CPU's, bit for bit, for the cases of
// test/layers/gpu_shapes.h (test_kernel_coverage reads them too); the stream-ordered round trips of a GPU
// tensor against the plain ones, right after a kernel on the context's stream wrote it.
#include <cmath>
#include "test/layers/gpu_shapes.h"
#include "test/test_util.h"

static std::mt19937 g_rng;
static Ctx g_cpu, g_gpu;

static void test_convert_choice() {
    CHECK(tensor_convert_kernel(DType::BF16, DType::F32) == ConvertKernel::F32ToBF16, "f32 -> bf16 kernel");
    CHECK(tensor_convert_kernel(DType::F32, DType::BF16) == ConvertKernel::BF16ToF32, "bf16 -> f32 kernel");
    CHECK(tensor_convert_kernel(DType::F32, DType::F32) == ConvertKernel::Copy, "f32 -> f32 copies");
    CHECK(tensor_convert_kernel(DType::I32, DType::F32) == ConvertKernel::Unsupported, "i32 <- f32 refused");
}

static void test_convert_cpu() {
    // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: the tie goes to the even one (1); 1 + 3·2^-8 is halfway
    // between 1 + 2^-7 and 1 + 2^-6 and goes to 1 + 2^-6 (even); 1 + 2^-8 + 2^-12 is above the tie.
    const std::vector<float> in = {1.f + 1.f / 256, 1.f + 3.f / 256, 1.f + 1.f / 256 + 1.f / 4096, -2.5f, INFINITY,
                                   -INFINITY, 0.f};
    const std::vector<float> want = {1.f, 1.f + 1.f / 64, 1.f + 1.f / 128, -2.5f, INFINITY, -INFINITY, 0.f};
    Tensor src = cpu_tensor(DType::F32, in), dst = tensor_alloc(Device::CPU, DType::BF16, (int64_t)in.size());
    tensor_convert(g_cpu, dst, src);
    CHECK(bitwise_equal(to_host(dst), want), "f32 -> bf16 rounds to nearest even");
    Tensor back = tensor_alloc(Device::CPU, DType::F32, (int64_t)in.size());
    tensor_convert(g_cpu, back, dst);
    CHECK(bitwise_equal(to_host(back), want), "bf16 -> f32 is exact");
    std::vector<float> nan_in = {NAN};
    Tensor ns = cpu_tensor(DType::F32, nan_in), nd = tensor_alloc(Device::CPU, DType::BF16, 1);
    tensor_convert(g_cpu, nd, ns);
    CHECK(std::isnan(to_host(nd)[0]), "NaN stays NaN in bf16");
    free_all({&src, &dst, &back, &ns, &nd});
}

// The stream-ordered round trips (a step's read-backs) against the plain ones, on `ctx`'s device.
static void check_round_trips(Ctx& ctx, DType dt) {
    const std::vector<float> v = round_to(dt, random_vec(5000, g_rng));
    Tensor t = tensor_alloc(ctx.device, dt, (int64_t)v.size());
    tensor_from_host_f32(ctx, t, v.data());
    CHECK(bitwise_equal(tensor_to_host_f32(ctx, t), v), "stream-ordered round trip [%s, %s]",
          device_name(ctx.device), dtype_name(dt));
    CHECK(bitwise_equal(tensor_to_host_f32(t), v), "stream-ordered upload, plain read-back [%s, %s]",
          device_name(ctx.device), dtype_name(dt));
    // Written by a kernel on ctx's stream, read back at once: the read-back must wait for that kernel.
    tensor_zero(ctx, t);
    CHECK(bitwise_equal(tensor_to_host_f32(ctx, t), std::vector<float>(v.size(), 0.f)),
          "read-back after a write on the stream [%s, %s]", device_name(ctx.device), dtype_name(dt));
    tensor_fill_f32(ctx, t, 3.f);
    CHECK(bitwise_equal(tensor_to_host_f32(ctx, t), std::vector<float>(v.size(), 3.f)), "fill on the stream [%s, %s]",
          device_name(ctx.device), dtype_name(dt));
    tensor_free(t);
}

static void cpu_checks() {
    g_rng.seed(1234);
    test_convert_choice();
    test_convert_cpu();
    for (DType dt : {DType::F32, DType::BF16}) check_round_trips(g_cpu, dt);
}

static void gpu_checks() {
    g_rng.seed(4321);
    for (const ConvertGpuCase& c : kConvertGpuCases) {
        // Values over many binades, so that the rounding is exercised at every exponent.
        std::vector<float> v = random_vec((size_t)c.n, g_rng, -3.f, 3.f);
        for (size_t i = 0; i < v.size(); i++) v[i] = std::ldexp(v[i], (int)(i % 61) - 30);
        std::vector<float> res[2];
        for (Device dev : {Device::CPU, Device::CUDA}) {
            Ctx& ctx = dev == Device::CUDA ? g_gpu : g_cpu;
            Tensor src = make_tensor(dev, c.src, v), dst = poisoned_tensor(dev, c.dst, c.n);
            tensor_convert(ctx, dst, src);
            res[dev == Device::CUDA] = tensor_to_host_f32(ctx, dst);
            free_all({&src, &dst});
        }
        CHECK(bitwise_equal(res[1], res[0]), "tensor_convert %s -> %s, n=%lld: GPU bits differ from the CPU's",
              dtype_name(c.src), dtype_name(c.dst), (long long)c.n);
    }
    for (DType dt : {DType::F32, DType::BF16}) check_round_trips(g_gpu, dt);
}

int main(int argc, char** argv) {
    return run_op_test(argc, argv, "test_runtime", g_cpu, g_gpu, cpu_checks, gpu_checks);
}
