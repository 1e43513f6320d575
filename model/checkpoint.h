// checkpoint.h — llm.c model checkpoints: read, write, and validate the model configuration.
//
// Layout (little-endian, as llm.c writes it):
//   256 x int32 header: [0] = magic 20240326, [1] = version (3: fp32 parameters, 5: bf16 parameters),
//                       [2] = maxT, [3] = V, [4] = L, [5] = NH, [6] = C, [7] = Vp, rest zero;
//   then the 16 parameter tensors of the full model in llm.c order (layers/model_shape.h: wte, wpe, ln1w, ...,
//   lnfb), each row-major with weights in (out, in) layout, all fp32 (version 3) or all bf16 (version 5).
// The file holds the whole (unsharded) model; under tensor parallelism each rank reads the full file and
// keeps its shard, and saving gathers one consolidated file first.
#pragma once
#include <string>
#include <vector>

#include "../layers/model_shape.h"

constexpr int kCheckpointHeaderInts = 256;
constexpr int kCheckpointMagic = 20240326;
constexpr int kCheckpointVersionF32 = 3;
constexpr int kCheckpointVersionBF16 = 5;

// "" if `cfg` describes a model we can build; otherwise what is wrong, e.g.
// "hidden 100 is not divisible by 3 heads". Checks: all sizes positive, Vp >= V, C % NH == 0.
std::string validate_config(const GPTConfig& cfg);

// Read and validate only the header: magic, version (3 or 5), the configuration (validate_config), and
// that the file's length is exactly header + parameter bytes. `is_bf16` says how the parameters are stored.
bool checkpoint_read_header(const std::string& path, GPTConfig& cfg, bool& is_bf16, std::string& err);

// Read a whole checkpoint: the configuration and all parameters of the full model as fp32, in llm.c order
// (param_count(cfg) floats; bf16 files are widened, which is exact). False with `err` naming the file and
// the problem (wrong magic/version, bad configuration, truncated or oversized file, read error).
bool checkpoint_read(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err);

// Write `params` (param_count(cfg) fp32 values, llm.c order) as version 3 (fp32) or, with as_bf16, version 5
// (each value rounded to nearest even bf16). Atomic: temporary file in the same directory, fsync, rename.
// An invalid configuration or any I/O error is fatal (mm_fatal) and names the file.
void checkpoint_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16);
// The same, returning false with `err` (naming the file and the problem) instead of stopping the job.
bool checkpoint_try_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16,
                          std::string& err);

