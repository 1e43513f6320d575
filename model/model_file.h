// model_file.h — a model path on the command line (--init, --save): an llm.c checkpoint or a Hugging Face
// GPT-2 (model/hf_gpt2.h), told apart by the path alone, so that every rank decides the same before any work.
//
//   --init PATH  Hugging Face when PATH ends in ".safetensors" or is a directory that is no checkpoint
//                directory; else an llm.c file. A checkpoint directory (model/train_state.h) is read as the
//                llm.c file it holds: DIR (the step DIR/latest names), DIR/latest itself, or DIR/step_N.
//   --save PATH  Hugging Face when PATH ends in "/" or in ".safetensors"; else an llm.c file. The trailing
//                slash is what asks for a directory: `--save out/model` stays the llm.c file it always was,
//                and an existing directory given without the slash is still refused as a file name.
#pragma once
#include <string>
#include <vector>

#include "../layers/model_shape.h"

bool hf_init_path(const std::string& path);
// The llm.c file a checkpoint directory names, where a model file is expected: DIR or DIR/latest gives
// DIR/step_N/model.bin of the step `latest` names, DIR/step_N gives its model.bin; `step` says which step
// (-1: `path` is no checkpoint directory, and it is returned as it is). False with `err` when `path` is a
// checkpoint directory whose pointer or model file is missing or broken.
bool checkpoint_model_path(const std::string& path, std::string& file, long long& step, std::string& err);
bool hf_save_path(const std::string& path);

// "" when `path` can be read as --init (an existing llm.c file, or a Hugging Face directory with
// config.json and model.safetensors, or a .safetensors file with config.json beside it); else what is wrong,
// starting with `flag` and the path.
std::string model_input_problem(const std::string& flag, const std::string& path);
// "" when `path` can be written as --save: the llm.c file's directory, or the Hugging Face directory, made
// when missing and writable (data/paths.h).
std::string model_output_problem(const std::string& flag, const std::string& path);

// Read the model a --init path names, in either format: its shape and every parameter in llm.c order, fp32.
// `read_from`, when given: "" for a model file, else what a checkpoint directory gave, for the caller to say
// ("DIR/step_00000010/model.bin, step 10").
bool model_read(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err,
                std::string* read_from = nullptr);
// Write a --save path in its format (as_bf16: BF16 weights; an llm.c file is always written fp32, as before).
bool model_try_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16, std::string& err);
// What model_try_write writes, for the log line: "llm.c format, fp32" or "Hugging Face format, bf16: DIR/model.safetensors
// + DIR/config.json".
std::string model_format_name(const std::string& path, bool as_bf16);
