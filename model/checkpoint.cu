// checkpoint.cu — llm.c checkpoint files (see checkpoint.h for the format).
#include "checkpoint.h"
#include "../data/atomic_file.h"
#include "../data/paths.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include "../layers/runtime.h"  // mm_fatal
#include "../layers/tensor.h"   // bf16, from_f32

std::string validate_config(const GPTConfig& c) {
    struct { const char* what; int value; } sizes[] = {
        {"max sequence length (maxT)", c.max_seq}, {"vocabulary size (V)", c.vocab},
        {"padded vocabulary size (Vp)", c.padded_vocab}, {"number of layers (L)", c.layers},
        {"number of heads (NH)", c.heads}, {"hidden size (C)", c.channels}};
    for (auto& s : sizes)
        if (s.value <= 0) return std::string(s.what) + " must be positive, got " + std::to_string(s.value);
    if (c.padded_vocab < c.vocab)
        return "padded vocabulary " + std::to_string(c.padded_vocab) + " is smaller than the vocabulary " +
               std::to_string(c.vocab);
    if (c.channels % c.heads != 0)
        return "hidden " + std::to_string(c.channels) + " is not divisible by " + std::to_string(c.heads) +
               " heads";
    // A corrupt header could hold sizes whose parameter count overflows int64; no real model (the paper's
    // largest has 1e12 parameters) comes near this bound, so refuse before computing byte counts.
    double L = c.layers, C = c.channels;
    double count = ((double)c.padded_vocab + c.max_seq) * C + L * 12.0 * C * C + L * 13.0 * C + 2 * C;
    if (count > 1e15) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.3g", count);
        return std::string("model too large: about ") + buf + " parameters";
    }
    return "";
}

// What makes the right file, for a file of another format where a checkpoint is expected (data/paths.h).
static const char* kCheckpointHint =
    "train_gpt --save FILE (or --checkpoint-dir DIR) writes one; --init also takes a checkpoint directory or a Hugging Face GPT-2";

static std::string sys_error() { return std::string(strerror(errno)); }

// Open `path`, read the header and check it against the file's length. On success `f` is positioned at
// the first parameter byte and the caller closes it.
static bool open_and_check(const std::string& path, FILE*& f, GPTConfig& cfg, bool& is_bf16, std::string& err) {
    f = nullptr;
    err = not_a_file_problem("checkpoint", path);
    if (!err.empty()) return false;
    f = fopen(path.c_str(), "rb");
    if (!f) {
        err = "cannot open checkpoint " + path + ": " + sys_error();
        return false;
    }
    auto fail = [&](const std::string& msg) {
        err = msg;
        fclose(f);
        f = nullptr;
        return false;
    };
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return fail("cannot stat checkpoint " + path + ": " + sys_error());
    const int64_t file_bytes = (int64_t)st.st_size;
    const int64_t header_bytes = kCheckpointHeaderInts * (int64_t)sizeof(int32_t);

    int32_t h[kCheckpointHeaderInts];
    if (file_bytes < header_bytes || fread(h, sizeof(int32_t), kCheckpointHeaderInts, f) != kCheckpointHeaderInts)
        return fail("checkpoint " + path + " is truncated: expected at least a header of " +
                    std::to_string(header_bytes) + " bytes, the file has " + std::to_string(file_bytes) + " bytes" +
                    wrong_format_note(path, "an llm.c model checkpoint", kCheckpointHint));
    if (h[0] != kCheckpointMagic)
        return fail("checkpoint " + path + " has magic " + std::to_string(h[0]) + ", expected " +
                    std::to_string(kCheckpointMagic) + wrong_format_note(path, "an llm.c model checkpoint", kCheckpointHint));
    if (h[1] != kCheckpointVersionF32 && h[1] != kCheckpointVersionBF16)
        return fail("checkpoint " + path + " has version " + std::to_string(h[1]) + ", expected " +
                    std::to_string(kCheckpointVersionF32) + " (fp32) or " +
                    std::to_string(kCheckpointVersionBF16) + " (bf16)");
    is_bf16 = h[1] == kCheckpointVersionBF16;
    cfg.max_seq = h[2];
    cfg.vocab = h[3];
    cfg.layers = h[4];
    cfg.heads = h[5];
    cfg.channels = h[6];
    cfg.padded_vocab = h[7];
    std::string bad = validate_config(cfg);
    if (!bad.empty()) return fail("checkpoint " + path + " has an invalid model configuration: " + bad);

    const int64_t expected = header_bytes + param_count(cfg) * (is_bf16 ? 2 : 4);
    if (file_bytes != expected)
        return fail("checkpoint " + path + " has " + std::to_string(file_bytes) + " bytes, expected " +
                    std::to_string(expected) + " (header + " + std::to_string(param_count(cfg)) + " " +
                    (is_bf16 ? "bf16" : "fp32") + " parameters for maxT=" + std::to_string(cfg.max_seq) +
                    " V=" + std::to_string(cfg.vocab) + " L=" + std::to_string(cfg.layers) +
                    " NH=" + std::to_string(cfg.heads) + " C=" + std::to_string(cfg.channels) +
                    " Vp=" + std::to_string(cfg.padded_vocab) + "): " +
                    (file_bytes < expected ? "truncated" : "oversized"));
    return true;
}

bool checkpoint_read_header(const std::string& path, GPTConfig& cfg, bool& is_bf16, std::string& err) {
    FILE* f = nullptr;
    if (!open_and_check(path, f, cfg, is_bf16, err)) return false;
    fclose(f);
    return true;
}

bool checkpoint_read(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err) {
    FILE* f = nullptr;
    bool is_bf16 = false;
    if (!open_and_check(path, f, cfg, is_bf16, err)) return false;
    const size_t n = (size_t)param_count(cfg);
    params.resize(n);
    bool ok = true;
    if (!is_bf16) {
        ok = fread(params.data(), sizeof(float), n, f) == n;
    } else {
        // Read bf16 in chunks and widen: a bf16 is the top 16 bits of an fp32, so widening is exact.
        std::vector<uint16_t> buf(1 << 20);
        for (size_t done = 0; ok && done < n;) {
            size_t k = std::min(buf.size(), n - done);
            ok = fread(buf.data(), sizeof(uint16_t), k, f) == k;
            for (size_t i = 0; ok && i < k; i++) {
                uint32_t bits = (uint32_t)buf[i] << 16;
                memcpy(&params[done + i], &bits, sizeof bits);
            }
            done += k;
        }
    }
    if (!ok) {
        err = "error reading the parameters of checkpoint " + path + ": " +
              (ferror(f) ? sys_error() : std::string("unexpected end of file"));
        params.clear();
        fclose(f);
        return false;
    }
    fclose(f);
    return true;
}

// The 256-int32 llm.c header in front of the parameters.
static void checkpoint_make_header(const GPTConfig& cfg, bool as_bf16, int32_t h[kCheckpointHeaderInts]) {
    memset(h, 0, sizeof(int32_t) * kCheckpointHeaderInts);
    h[0] = kCheckpointMagic;
    h[1] = as_bf16 ? kCheckpointVersionBF16 : kCheckpointVersionF32;
    h[2] = cfg.max_seq;
    h[3] = cfg.vocab;
    h[4] = cfg.layers;
    h[5] = cfg.heads;
    h[6] = cfg.channels;
    h[7] = cfg.padded_vocab;
}

bool checkpoint_try_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16,
                          std::string& err) {
    std::string bad = validate_config(cfg);
    if (!bad.empty()) {
        err = "cannot write checkpoint " + path + ": invalid model configuration: " + bad;
        return false;
    }
    int32_t h[kCheckpointHeaderInts];
    checkpoint_make_header(cfg, as_bf16, h);
    const size_t n = (size_t)param_count(cfg);

    // Written whole or not at all (data/atomic_file.h): a crash while saving leaves the previous checkpoint
    // intact instead of a truncated one.
    AtomicFile f;
    if (!f.open(path, err)) return false;
    bool ok = f.write(h, sizeof h);
    if (ok && !as_bf16) {
        ok = f.write(params, n * sizeof(float));
    } else if (ok) {
        // Round to bf16 with the project's one conversion (nearest even, tensor.h), in chunks.
        std::vector<bf16> buf(1 << 20);
        for (size_t done = 0; ok && done < n;) {
            size_t k = std::min(buf.size(), n - done);
            for (size_t i = 0; i < k; i++) buf[i] = from_f32<bf16>(params[done + i]);
            ok = f.write(buf.data(), k * sizeof(bf16));
            done += k;
        }
    }
    return f.commit(err);
}

void checkpoint_write(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16) {
    std::string err;
    if (!checkpoint_try_write(path, cfg, params, as_bf16, err)) mm_fatal("error writing checkpoint: %s", err.c_str());
}
