// hf_gpt2.h — GPT-2 in Hugging Face's format: config.json and the tensor names and layouts of
// model.safetensors (model/safetensors.h), mapped to and from the llm.c parameter layout (layers/model_shape.h).
//
// A Hugging Face GPT-2 directory (what `save_pretrained` or `huggingface-cli download gpt2` gives) holds
// config.json (n_layer, n_head, n_embd, n_positions, vocab_size) and model.safetensors, whose tensors are
// named transformer.wte.weight, transformer.h.N.attn.c_attn.weight, ... (older files leave out the
// "transformer." prefix; both are read). Where the layouts differ:
//   - HF's Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj) are stored [in, out]; llm.c's (out, in):
//     transposed both ways. c_attn's columns are [Q | K | V], so its transpose is llm.c's [Q; K; V] rows.
//   - The token table has vocab_size rows; the trainer pads it to Vp (a multiple of 128) with zero rows.
//     Reading adds them; writing leaves them out, so the file holds exactly the real vocabulary.
//   - lm_head.weight is the token table (GPT-2 ties them): ignored when equal to it, refused otherwise.
//     h.N.attn.bias and h.N.attn.masked_bias (older files' causal-mask buffers) are ignored.
// Weights may be stored in F32, F16 or BF16 (widened exactly to fp32); they are written in F32 or BF16.
// Anything else — a missing tensor, an unexpected one, a shape config.json does not make, a config that
// describes another computation (another activation, layer-norm epsilon, untied head) — is refused with the
// file's name and what is wrong.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../layers/model_shape.h"
#include "safetensors.h"

// The two files a Hugging Face model path names: a path ending in ".safetensors" is the weights, with
// config.json beside it; any other path is a directory holding model.safetensors and config.json.
void hf_gpt2_files(const std::string& path, std::string& weights, std::string& config);

// config.json's text -> the model's shape (padded vocabulary: padded_vocab_for(vocab_size)).
bool hf_gpt2_parse_config(const std::string& text, const std::string& path, GPTConfig& cfg, std::string& err);
// The tensors of a parsed safetensors file (held in memory) -> the full model in llm.c order, fp32
// (param_count(cfg) floats, padding rows zero).
bool hf_gpt2_convert(const uint8_t* file, const SafetensorsIndex& index, const std::string& path, const GPTConfig& cfg,
                     std::vector<float>& params, std::string& err);
// Read a model: hf_gpt2_files(path), config.json, then the weights.
bool hf_gpt2_load(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err);

// Write `params` (llm.c order, fp32) as the two files hf_gpt2_files(path) names, the weights in F32 or (as_bf16)
// BF16, each file atomically; the directory is made when missing. False with `err` naming the file.
bool hf_gpt2_save(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16, std::string& err);
