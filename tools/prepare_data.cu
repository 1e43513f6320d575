// prepare_data.cu — turn text files into llm.c token shards (train.bin, val.bin) with the byte tokenizer,
// or with GPT-2's BPE tokenizer from a tokenizer file.
//
//   build/prepare_data --out-dir DIR [--val-fraction 0.1] [--tokenizer gpt2_tokenizer.bin | DIR] FILE...
//   build/prepare_data --default [--root DIR] [--out-dir DIR] [--val-fraction 0.1]
//
// Each file is one document. Byte-level (the default): one token per byte, EOT between documents.
// --tokenizer FILE (llm.c's tokenizer format, data/gpt2_tokenizer.h; or a directory, or a vocab.json, with
// Hugging Face's vocab.json + merges.txt, data/hf_tokenizer.h): GPT-2 byte-level BPE, each document
// preceded by the end-of-text token, as llm.c's data preparation scripts write GPT-2 shards. The last
// val-fraction of the tokens becomes val.bin, the rest train.bin.
//
// --default builds the project's default corpus from the project itself: README.md and the other *.md
// files, and the sources (*.cu, *.h, *.cmake, Makefile, CMakeLists.txt) found under --root (default: the
// current directory), in sorted path order. Why: training then needs nothing but this repository — no
// network, no download, and the same bytes (so the same shards) on every machine with the same checkout.
// It is also a fun corpus: the model learns to write text shaped like this project's own code and docs.
// Output goes to ROOT/data/generated/default unless --out-dir says otherwise.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "../data/gpt2_tokenizer.h"
#include "../data/hf_tokenizer.h"
#include "../data/shard.h"
#include "../data/tokenizer.h"

namespace fs = std::filesystem;

static void usage(FILE* out) {
    fprintf(out,
            "usage: prepare_data --out-dir DIR [--val-fraction F] [--tokenizer FILE] FILE...\n"
            "       prepare_data --default [--root DIR] [--out-dir DIR] [--val-fraction F]\n"
            "  Encodes text files with the byte-level tokenizer (EOT between files) into DIR/train.bin and\n"
            "  DIR/val.bin (llm.c token shards); the last fraction F (default 0.1) of tokens is validation.\n"
            "  --tokenizer FILE: GPT-2 byte-level BPE from llm.c's gpt2_tokenizer.bin instead, each file\n"
            "  preceded by the end-of-text token; or --tokenizer DIR (or DIR/vocab.json): the same from\n"
            "  Hugging Face's vocab.json + merges.txt.\n"
            "  --default: the corpus is this repository's *.md and source files under --root (default .),\n"
            "  written to ROOT/data/generated/default unless --out-dir is given.\n");
}

[[noreturn]] static void die(const std::string& msg) {
    fprintf(stderr, "prepare_data: error: %s\n", msg.c_str());
    exit(1);
}

// True for the files of the default corpus: documentation and sources, by name.
static bool in_default_corpus(const fs::path& p) {
    const std::string name = p.filename().string();
    const std::string ext = p.extension().string();
    return name == "Makefile" || name == "CMakeLists.txt" || ext == ".md" || ext == ".cu" || ext == ".h" ||
           ext == ".cmake";
}
// Directories that hold outputs or tooling rather than the project's own text: hidden ones (.git, .ci),
// build trees (build, build-*), generated data, run outputs.
static bool skip_dir(const fs::path& p) {
    const std::string name = p.filename().string();
    return (!name.empty() && name[0] == '.') || name.rfind("build", 0) == 0 || name == "generated" ||
           name == "out";
}

static std::vector<std::string> default_corpus(const std::string& root) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) die("--root " + root + " is not a directory");
    std::vector<std::string> rel;  // paths relative to root, so the order does not depend on where root is
    fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
    if (ec) die("cannot list " + root + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) die("cannot list " + root + ": " + ec.message());
        const fs::directory_entry& e = *it;
        if (e.is_directory(ec)) {
            if (skip_dir(e.path())) it.disable_recursion_pending();
            continue;
        }
        if (e.is_regular_file(ec) && in_default_corpus(e.path()))
            rel.push_back(fs::relative(e.path(), root).generic_string());
    }
    // Directory listing order is filesystem-dependent; sorting (byte-wise) makes the corpus deterministic.
    std::sort(rel.begin(), rel.end());
    std::vector<std::string> files;
    for (auto& r : rel) files.push_back((fs::path(root) / r).string());
    if (files.empty()) die("no *.md or source files found under --root " + root);
    return files;
}

static std::string read_file(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) die("input file " + path + " does not exist");
    if (fs::is_directory(path, ec)) die("input " + path + " is a directory, expected a text file");
    std::ifstream in(path, std::ios::binary);
    if (!in) die("cannot open input file " + path + ": " + strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) die("error reading input file " + path);
    return ss.str();
}

int main(int argc, char** argv) {
    std::string out_dir, root = ".", tokenizer_file;
    double val_fraction = 0.1;
    bool use_default = false;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&](const char* flag) -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "prepare_data: %s needs a value\n", flag);
                usage(stderr);
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--out-dir") out_dir = value("--out-dir");
        else if (a == "--root") root = value("--root");
        else if (a == "--tokenizer") tokenizer_file = value("--tokenizer");
        else if (a == "--default") use_default = true;
        else if (a == "--val-fraction") {
            std::string v = value("--val-fraction");
            char* endp = nullptr;
            val_fraction = strtod(v.c_str(), &endp);
            if (endp == v.c_str() || *endp != '\0' || !(val_fraction >= 0.0 && val_fraction < 1.0)) {
                fprintf(stderr, "prepare_data: --val-fraction must be a number in [0, 1), got '%s'\n", v.c_str());
                exit(2);
            }
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else if (a.size() > 1 && a[0] == '-') {
            fprintf(stderr, "prepare_data: unknown option %s\n", a.c_str());
            usage(stderr);
            return 2;
        } else files.push_back(a);
    }
    if (use_default && !files.empty()) {
        fprintf(stderr, "prepare_data: give input files or --default, not both\n");
        return 2;
    }
    if (use_default) {
        files = default_corpus(root);
        if (out_dir.empty()) out_dir = (fs::path(root) / "data" / "generated" / "default").string();
    }
    if (files.empty()) {
        fprintf(stderr, "prepare_data: no input files\n");
        usage(stderr);
        return 2;
    }
    if (out_dir.empty()) {
        fprintf(stderr, "prepare_data: --out-dir is required\n");
        usage(stderr);
        return 2;
    }

    Gpt2Tokenizer bpe;
    if (!tokenizer_file.empty()) {
        std::string err;
        if (!tokenizer_load_any(tokenizer_file, bpe, err)) die(err);
    }

    // One document per file: byte-level with EOT between documents, BPE with EOT before each.
    std::vector<uint16_t> tokens;
    size_t total_bytes = 0;
    for (size_t i = 0; i < files.size(); i++) {
        std::string text = read_file(files[i]);
        total_bytes += text.size();
        if (tokenizer_file.empty()) {
            if (i > 0) tokens.push_back((uint16_t)tokenizer::kEOT);
            std::vector<uint16_t> t = tokenizer::encode(text);
            tokens.insert(tokens.end(), t.begin(), t.end());
        } else {
            tokens.push_back((uint16_t)bpe.eot);  // ids fit: the loader refuses vocabularies above 65536
            for (int id : gpt2_encode(bpe, text)) tokens.push_back((uint16_t)id);
        }
        if (!tokenizer_file.empty() && files.size() > 20 && (i + 1) % 20 == 0)  // progress on long BPE inputs
            fprintf(stderr, "prepare_data: %zu of %zu files, %zu tokens\n", i + 1, files.size(), tokens.size());
    }
    if (total_bytes == 0) die("the input files are empty: there is no text to tokenize");

    // Validation is the tail: a contiguous held-out stretch, never seen in training.
    const size_t n = tokens.size();
    const size_t n_val = (size_t)((double)n * val_fraction);
    const size_t n_train = n - n_val;

    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) die("cannot create output directory " + out_dir + ": " + ec.message());
    const std::string train_path = (fs::path(out_dir) / "train.bin").string();
    const std::string val_path = (fs::path(out_dir) / "val.bin").string();
    write_token_shard(train_path, tokens.data(), n_train);
    write_token_shard(val_path, tokens.data() + n_train, n_val);

    if (tokenizer_file.empty())
        printf("prepare_data: %zu file%s, %zu bytes -> %zu tokens (byte-level, vocab %d, EOT between files)\n",
               files.size(), files.size() == 1 ? "" : "s", total_bytes, n, tokenizer::kVocab);
    else
        printf("prepare_data: %zu file%s, %zu bytes -> %zu tokens (BPE from %s, vocab %d, EOT %d before each file)\n",
               files.size(), files.size() == 1 ? "" : "s", total_bytes, n, tokenizer_file.c_str(), bpe.vocab(), bpe.eot);
    printf("  %s: %zu tokens\n", train_path.c_str(), n_train);
    printf("  %s: %zu tokens%s\n", val_path.c_str(), n_val, n_val == 0 ? " (--val-fraction 0: empty)" : "");
    return 0;
}
