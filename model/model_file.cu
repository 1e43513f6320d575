// model_file.cu — llm.c or Hugging Face, by the path (see model_file.h).
#include "model_file.h"

#include <sys/stat.h>
#include <cstdio>
#include <cstdlib>

#include "../data/atomic_file.h"  // dir_of
#include "../data/paths.h"
#include "checkpoint.h"
#include "hf_gpt2.h"
#include "train_state.h"  // parse_latest

static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
static bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
static std::string base_name(const std::string& p) {
    std::string s = p;
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    const size_t slash = s.rfind('/');
    return slash == std::string::npos ? s : s.substr(slash + 1);
}
static std::string without_slash(std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
}

// A checkpoint directory (model/train_state.h) rather than a Hugging Face one: it holds `latest` or model.bin.
static bool checkpoint_dir_path(const std::string& path) {
    const std::string d = without_slash(path);
    return is_dir(d) && (is_file(d + "/latest") || is_file(d + "/model.bin"));
}

bool hf_init_path(const std::string& path) {
    return ends_with(path, ".safetensors") || (is_dir(path) && !checkpoint_dir_path(path));
}

bool checkpoint_model_path(const std::string& path, std::string& file, long long& step, std::string& err) {
    file = path;
    step = -1;
    const std::string p = without_slash(path);
    std::string pointer, dir;  // DIR/latest, and DIR
    if (is_dir(p) && is_file(p + "/latest")) pointer = p + "/latest", dir = p;
    else if (base_name(p) == "latest" && is_file(p)) pointer = p, dir = dir_of(p);
    if (!pointer.empty()) {
        FILE* f = fopen(pointer.c_str(), "rb");
        if (!f) return err = "cannot open checkpoint pointer " + pointer, false;
        char buf[64] = {0};
        const size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        std::string name;
        if (!parse_latest(std::string(buf, k), pointer, name, err)) return false;
        file = dir + "/" + name + "/model.bin";
        step = atoll(name.c_str() + 5);
        if (!is_file(file)) return err = pointer + " names " + name + ", but " + file + " is not there", false;
        return true;
    }
    if (is_dir(p) && is_file(p + "/model.bin")) {  // a step directory, DIR/step_N
        file = p + "/model.bin";
        const std::string name = base_name(p);
        step = name.rfind("step_", 0) == 0 ? atoll(name.c_str() + 5) : 0;
    }
    return true;
}
bool hf_save_path(const std::string& path) { return ends_with(path, ".safetensors") || ends_with(path, "/"); }

std::string model_input_problem(const std::string& flag, const std::string& path) {
    std::string file, err;
    long long step = -1;
    if (!checkpoint_model_path(path, file, step, err)) return flag + " " + path + ": " + err;
    if (step >= 0) return input_file_problem(flag, file);
    if (!hf_init_path(path)) return input_file_problem(flag, path);
    std::string weights, config;
    hf_gpt2_files(path, weights, config);
    if (is_dir(path) && input_file_problem(flag, weights) != "" && input_file_problem(flag, config) != "")
        return flag + " " + path + " is a directory, expected a file (an llm.c checkpoint), a checkpoint directory (it has "
               "no latest and no model.bin) or a Hugging Face model directory (it has neither model.safetensors nor config.json)";
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

bool model_read(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err, std::string* read_from) {
    std::string file;
    long long step = -1;
    if (!checkpoint_model_path(path, file, step, err)) return false;
    if (read_from) *read_from = step < 0 ? "" : file + ", step " + std::to_string(step);
    if (step >= 0) return checkpoint_read(file, cfg, params, err);
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
