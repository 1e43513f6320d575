// train_state.h — everything beyond the weights that exact resume needs, and the checkpoint directory.
//
// A training checkpoint is a pair of files in DIR/step_NNNNNNNN/:
//   model.bin   the fp32 master weights of the full model: an ordinary llm.c checkpoint (version 3), so any
//               llm.c tool (and --init) reads it;
//   state.bin   this file format (below): the configuration, the layout, the step, the data loader's
//               position, the seed, and AdamW's first and second moments of the full model.
// plus DIR/latest, a one-line text file naming the newest complete step directory. A save writes both
// files (each atomically, data/atomic_file.h), fsyncs the step directory, and only then replaces `latest`
// (atomically); older step directories are deleted after that. So `latest` always names a complete pair.
//
// CONSOLIDATED, not per rank: the moments are gathered from the tensor-parallel ranks into the llm.c order
// of the full model (exactly as the weights are for model.bin), and rank 0 writes one state.bin. Every rank
// reads both files on resume and keeps its slice. One state file therefore fits any layout: resuming at the
// same tp/dp/sp/dtype continues bit for bit; resuming at another layout is allowed and equivalent (the
// parallel layouts compute the same math, up to floating-point summation order), and the trainer says so.
// Data parallelism needs no per-rank state: DP ranks hold identical replicas, and the loader's position
// counts global batches. Dropout is counter-based (layers/philox.h) on (seed, global coordinates), so
// there is no RNG state to save.
//
// state.bin layout (little-endian):
//   128 x int64 header:
//     [0] magic 0x4554415453544d4d (the bytes "MMTSTATE"), [1] version 1, [2] header bytes (1024),
//     [3..8] maxT, V, L, NH, C, Vp (as in the llm.c header), [9] parameter count n of the full model,
//     [10] tp, [11] dp, [12] sp, [13] dtype (0 fp32, 1 bf16), [14] recompute (0 none, 1 selective, 2 full),
//     [15] step (optimizer steps done), [16] data epoch, [17] data position (next batch of the epoch),
//     [18] seed, [19] shuffle, [20] global batch, [21] sequence length, [22] total steps, [23] warmup,
//     [24] lr schedule (0 constant, 1 cosine), [25..32] lr, min_lr_frac, beta1, beta2, eps, weight decay,
//     grad clip, dropout (IEEE doubles, bit patterns), [33] training shard token count, [34] FNV-1a hash of
//     the training tokens, [35] FNV-1a hash of model.bin's parameter bytes (ties the pair together),
//     [36] FNV-1a hash of the payload, [37] steps skipped for non-finite gradients, [38] pp,
//     [39] micro-batches, [40] pipeline schedule (0 afab, 1 1f1b, 2 interleaved), [41] model chunks per
//     pipeline rank (38..41 are 0 in a file written before pipelines existed: read as 1, 1, 1f1b, 1),
//     [42] cp, [43] attention + 1 (0 before they were recorded: cp 1, unfused), [44] the steps the cosine
//     decays over (0 before it was recorded: [22]); the rest zero.
//   payload: AdamW m (n fp32) then v (n fp32), full model, llm.c tensor order.
// The reader checks every field's range, that the file length is exactly header + 8n bytes, the payload
// hash, and that m is finite and v finite and non-negative, and names the file and the field when not.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../layers/model_shape.h"

constexpr int kTrainStateHeaderInts = 128;
constexpr int64_t kTrainStateMagic = 0x4554415453544d4dLL;  // "MMTSTATE" on disk
constexpr int64_t kTrainStateVersion = 1;

struct TrainState {
    GPTConfig cfg;
    // layout of the run that wrote it (any layout can resume it; the same layout resumes bit for bit)
    int tp = 1, dp = 1, sp = 0, dtype = 0, recompute = 0;
    int pp = 1, microbatches = 1, schedule = 1, chunks = 1;  // schedule: (int)PipeSchedule (0 afab, 1 1f1b, 2 interleaved)
    // Context parallelism and the attention's form: they change the order of the sums, not the state itself
    // (the moments are the whole model's, in llm.c order, for any c).
    int cp = 1, attention = 0;  // attention: (int)Attention (0 unfused, 1 flash)
    // progress
    int64_t step = 0, data_epoch = 0, data_position = 0, skipped_steps = 0;
    // configuration that must match for an exact continuation
    uint64_t seed = 0;
    int shuffle = 1, batch = 0, seq = 0, steps = 0, warmup = 0, lr_schedule = 1;
    int lr_decay_steps = 0;  // the cosine decays over steps 1..this (the run's --steps, unless it was extended
                             // under --use-checkpoint-opt_param-scheduler)
    double lr = 0, min_lr_frac = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0, dropout = 0;
    int64_t train_tokens = 0;
    uint64_t train_hash = 0, model_hash = 0;
    // AdamW moments of the full model, llm.c order (param_count(cfg) each)
    std::vector<float> adam_m, adam_v;
};

// 64-bit FNV-1a, continuing from `h` (start with the default).
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull);

// Parse a state file held in memory (`name` labels messages). False with `err` on any problem.
bool train_state_parse(const uint8_t* data, size_t size, const std::string& name, TrainState& s, std::string& err);
bool train_state_read(const std::string& path, TrainState& s, std::string& err);
// Write atomically (temporary file, fsync, rename, fsync directory). s.adam_m/v must hold param_count each.
bool train_state_write(const std::string& path, const TrainState& s, std::string& err);

// Compare a saved state with the run about to continue it. Returns "" when the continuation is exact
// (up to layout, see above), else the first difference, naming the flag, values by name, e.g.
// "--batch 4 differs from the checkpoint's 8 (DIR/step_00000010/state.bin)". `now` holds the current
// run's configuration (progress fields and moments are ignored). The learning-rate schedule (--lr-schedule,
// --warmup, --lr, --final-lr-frac, --weight-decay, and for cosine --steps) must be the checkpoint's too, unless
// schedule_from_flags (--override-opt_param-scheduler); its refusal names the two flags that change the rule.
std::string train_state_mismatch(const TrainState& saved, const TrainState& now, const std::string& name,
                                 bool schedule_from_flags = false);
// "cosine from 0.0003 to 3e-05 over steps 1..100 after 0 warm-up steps, weight decay 0": for messages and notes.
std::string schedule_description(const TrainState& s);
// "" when the layouts are equal, else a note saying the continuation is equivalent but not bitwise.
std::string train_state_layout_note(const TrainState& saved, const TrainState& now);

// ---- the checkpoint directory ----------------------------------------------------------------------------
std::string checkpoint_step_name(int64_t step);  // "step_00000010"
// Save a complete pair for `s.step` into dir (created if missing): model.bin from `params` (full model,
// llm.c order, fp32), state.bin from `s` (model_hash is filled in here), then publish `latest` and delete
// older step directories. False with `err` on any I/O error (nothing older is deleted then).
bool checkpoint_dir_save(const std::string& dir, const GPTConfig& cfg, const float* params, TrainState& s,
                         std::string& err);
// Load the pair that dir/latest names: the model (like --init) and the state, and check that they belong
// together (same configuration, model hash). `step_dir` says which directory was read.
bool checkpoint_dir_load(const std::string& dir, GPTConfig& cfg, std::vector<float>& params, TrainState& s,
                         std::string& step_dir, std::string& err);
// Parse the contents of a `latest` file: one line "step_" followed by digits. False with `err` otherwise.
bool parse_latest(const std::string& text, const std::string& name, std::string& step_name, std::string& err);
