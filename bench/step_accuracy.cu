// step_accuracy.cu — one training step's loss and gradient of the whole model in fp32, from given weights,
// written to a folder for bench/step_accuracy.py, which computes the same step in float64 (the reference) and
// in PyTorch fp32 from the same fp32 weights and compares every parameter tensor's gradient, layer by layer
// (issue 41).
//
//     step_accuracy --model model.bin --train SHARD --step K --out DIR [--batch 8 --seq 128]
//
// bench/loss_deviation.sh measures where a whole fp32 run ends up; this measures one step's error from one
// state, so that an op whose error is above PyTorch's shows in the tensor whose gradient it makes. The
// weights are those of a run after step K − 1 (model.bin of a --checkpoint-dir, or the llm.c file of --init);
// the batch is step K's of a --no-shuffle run (llm.c's batch k: tokens [k·B·S, k·B·S + B·S + 1)).
// Folder: loss.txt (the loss, %.9g) and grads.f32 (the full gradient, llm.c order, raw little-endian fp32).
#include "bench_common.h"

#include "../model/checkpoint.h"
#include "../model/gpt.h"
#include "../model/train_step.h"

static void write_f32(const std::string& path, const std::vector<float>& v) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(v.data(), 4, v.size(), f) != v.size() || fclose(f) != 0)
        mm_fatal("step_accuracy: cannot write %s", path.c_str());
}

// Step k's batch of a --no-shuffle run: B·S + 1 consecutive tokens of the shard (llm.c's format).
static void read_batch(const std::string& path, int step, int B, int S, std::vector<int32_t>& in,
                       std::vector<int32_t>& tgt) {
    FILE* f = fopen(path.c_str(), "rb");
    int32_t header[256];
    if (!f || fread(header, 4, 256, f) != 256 || header[0] != 20240520)
        mm_fatal("step_accuracy: %s is not an llm.c token shard", path.c_str());
    std::vector<uint16_t> tokens((size_t)header[2]);
    if (fread(tokens.data(), 2, tokens.size(), f) != tokens.size())
        mm_fatal("step_accuracy: %s is truncated", path.c_str());
    fclose(f);
    const int64_t BS = (int64_t)B * S, batches = ((int64_t)tokens.size() - 1) / BS;
    if (batches < 1)
        mm_fatal("step_accuracy: %s holds %zu tokens, fewer than a batch of %d x %d + 1", path.c_str(), tokens.size(),
                 B, S);
    const int64_t start = ((step - 1) % batches) * BS;
    for (int64_t i = 0; i < BS; i++) in.push_back(tokens[start + i]), tgt.push_back(tokens[start + i + 1]);
}

static const char* kUsage = "usage: step_accuracy --model FILE --train SHARD --step K --out DIR [--batch B --seq S]";

int main(int argc, char** argv) {
    std::string model, train, out;
    int step = 1, B = 8, S = 128;
    for (int i = 1; i < argc; i++) {
        std::string v;
        if (bench_flag(argc, argv, i, "--model", v)) model = v;
        else if (bench_flag(argc, argv, i, "--train", v)) train = v;
        else if (bench_flag(argc, argv, i, "--out", v)) out = v;
        else if (bench_flag(argc, argv, i, "--step", v)) step = bench_int(v, "--step", 1);
        else if (bench_flag(argc, argv, i, "--batch", v)) B = bench_int(v, "--batch", 1);
        else if (bench_flag(argc, argv, i, "--seq", v)) S = bench_int(v, "--seq", 1);
        else mm_fatal("%s (got %s)", kUsage, argv[i]);
    }
    if (model.empty() || train.empty() || out.empty()) mm_fatal("%s", kUsage);
    GPTConfig cfg;
    std::vector<float> params;
    std::string err;
    if (!checkpoint_read(model, cfg, params, err)) mm_fatal("step_accuracy: %s", err.c_str());
    std::vector<int32_t> inputs, targets;
    read_batch(train, step, B, S, inputs, targets);

    Ctx ctx = ctx_create(Device::CPU, 0);
    ProcessGrid grid = bench_single_rank_grid(false, ctx);
    ActivationAllocator alloc(Device::CPU);
    GPT m;
    gpt_create(m, cfg, grid, ctx, alloc, DType::F32, Recompute::None, 0.f, 1337);
    gpt_load_full(m, params.data());
    const float loss = forward_backward(m, inputs.data(), targets.data(), B, S, 1);
    std::vector<float> grads;
    gpt_gather_full_grads(m, grads);
    write_f32(out + "/grads.f32", grads);
    FILE* f = fopen((out + "/loss.txt").c_str(), "w");
    if (!f) mm_fatal("step_accuracy: cannot write %s/loss.txt", out.c_str());
    fprintf(f, "%.9g\n", loss);
    fclose(f);
    printf("step_accuracy: step %d, loss %.9g, written to %s\n", step, loss, out.c_str());
    gpt_destroy(m);
    ctx_destroy(ctx);
    return 0;
}
