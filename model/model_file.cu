// model_file.cu — llm.c or Hugging Face, by the path (see model_file.h).
#include "model_file.h"

#include <sys/stat.h>

#include "../data/atomic_file.h"  // dir_of
#include "../data/paths.h"
#include "checkpoint.h"
#include "hf_gpt2.h"

static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
static bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool hf_init_path(const std::string& path) { return ends_with(path, ".safetensors") || is_dir(path); }
bool hf_save_path(const std::string& path) { return ends_with(path, ".safetensors") || ends_with(path, "/"); }

std::string model_input_problem(const std::string& flag, const std::string& path) {
    if (!hf_init_path(path)) return input_file_problem(flag, path);
    std::string weights, config;
    hf_gpt2_files(path, weights, config);
    if (is_dir(path) && input_file_problem(flag, weights) != "" && input_file_problem(flag, config) != "")
        return flag + " " + path + " is a directory, expected a file (an llm.c checkpoint) or a Hugging Face model "
               "directory (it has neither model.safetensors nor config.json)";
    std::string problem = input_file_problem(flag, weights);
    if (problem.empty()) problem = input_file_problem(flag, config);
    return problem.empty() ? "" : problem + " (a Hugging Face model needs model.safetensors and config.json)";
}

std::string model_output_problem(const std::string& flag, const std::string& path) {
    if (!hf_save_path(path)) {
        std::string p = output_file_problem(flag, path);
        // An existing directory as a file name: say how to ask for the other format.
        if (!p.empty() && is_dir(path)) p += " (or " + path + "/ with a trailing slash: a Hugging Face model directory)";
        return p;
    }
    std::string weights, config;
    hf_gpt2_files(path, weights, config);
    if (ends_with(path, ".safetensors")) return output_file_problem(flag, path);
    return output_dir_problem(flag, dir_of(weights));
}

bool model_read(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err) {
    return hf_init_path(path) ? hf_gpt2_load(path, cfg, params, err) : checkpoint_read(path, cfg, params, err);
}

bool model_try_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16, std::string& err) {
    return hf_save_path(path) ? hf_gpt2_save(path, cfg, params, as_bf16, err) : checkpoint_try_write(path, cfg, params, false, err);
}

std::string model_format_name(const std::string& path, bool as_bf16) {
    if (!hf_save_path(path)) return "llm.c format, fp32";
    std::string weights, config;
    hf_gpt2_files(path, weights, config);
    return std::string("Hugging Face format, ") + (as_bf16 ? "bf16" : "fp32") + ": " + weights + " + " + config;
}
