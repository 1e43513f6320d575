// generate.cu — sample text from a saved llm.c checkpoint or Hugging Face GPT-2 directory (model/model_file.h), in any
// tensor- and pipeline-parallel layout under mpirun.
//   build/generate --init build/model.bin --prompt "// " --n 300 --temperature 0.8 --top-k 40
//   build/generate --init out/tiny-hf --prompt-ids "3 14 15" --n 64 --temperature 0 --print-ids   (token ids in
//   and out, to compare with another implementation: test/model/test_hf_gpt2.sh's generate case)
#include <mpi.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "data/text_tokenizer.h"
#include "model/checkpoint.h"
#include "model/model_file.h"
#include "model/generate.h"
#include "train/did_you_mean.h"

static const char* kUsage =
           "usage: [mpirun -np T] build/generate --init FILE [--prompt TEXT | --prompt-ids \"ID ID ...\"] [--n N]\n"
           "                      [--temperature X] [--top-k K] [--window W] [--seed S] [--tp T] [--pp P]\n"
           "                      [--device cpu|cuda] [--tokenizer FILE] [--print-ids]\n"
           "--tp defaults to the ranks / --pp (default 1): every rank in one tensor-parallel group.\n"
           "Samples N tokens (default 200) from an llm.c checkpoint (or a Hugging Face GPT-2 directory or .safetensors\n"
           "file), decoded with the byte-level tokenizer, or with GPT-2's BPE (--tokenizer: llm.c's gpt2_tokenizer.bin,\n"
           "or a directory holding Hugging Face's vocab.json and merges.txt). --temperature 0: greedy decoding (the most\n"
           "likely token each time). --prompt-ids: the prompt as token ids (space-separated, each below the vocabulary)\n"
           "instead of text; --print-ids: after the text, a last line holding the generated ids, space-separated (with both\n"
           "and no --tokenizer, a model whose vocabulary no tokenizer here fits prints the ids alone).\n"
           "--init also takes a checkpoint directory (--checkpoint-dir DIR: DIR, DIR/latest or DIR/step_N) and says\n"
           "which step it read. Defaults: --n 200, --temperature 0.8, --top-k 40, --window min(maxT, 256), --seed 1,\n"
           "--prompt a newline, --device cuda when a GPU is visible, else cpu.\n";
static void usage() { fputs(kUsage, stdout); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::string init, tokenizer_file, prompt = "\n", prompt_ids, device = cuda_available() ? "cuda" : "cpu";
    bool print_ids = false;
    int n = 200, top_k = 40, window = 0, tp = 0, pp = 1;
    float temperature = 0.8f;
    uint64_t seed = 1;
    // Every value is checked before any work, and a bad one stops every rank with one message.
    std::string bad_flag;
    auto integer = [&](const std::string& flag, const char* v, long long lo, long long hi) {
        char* end = nullptr;
        errno = 0;
        const long long x = strtoll(v, &end, 10);
        if (bad_flag.empty() && (errno || end == v || *end || x < lo || x > hi))
            bad_flag = flag + " " + v + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return (int)std::min(std::max(x, lo), hi);
    };
    for (int i = 1; i < argc && bad_flag.empty(); i++) {
        std::string a = argv[i];
        if (a == "--help") { if (rank == 0) usage(); MPI_Finalize(); return 0; }
        if (a == "--print-ids") { print_ids = true; continue; }
        if (i + 1 >= argc) { bad_flag = a + " needs a value"; break; }
        const char* v = argv[++i];
        if (a == "--init") init = v;
        else if (a == "--prompt") prompt = v;
        else if (a == "--prompt-ids") prompt_ids = v;
        else if (a == "--n") n = integer(a, v, 1, 1 << 20);
        else if (a == "--temperature") {
            char* end = nullptr;
            temperature = strtof(v, &end);
            if (end == v || *end || !(temperature >= 0)) bad_flag = a + " " + v + ": expected a number >= 0 (0: greedy decoding)";
        }
        else if (a == "--top-k") top_k = integer(a, v, 0, 1 << 20);
        else if (a == "--window") window = integer(a, v, 0, 1 << 20);
        else if (a == "--seed") seed = (uint64_t)integer(a, v, 0, INT32_MAX);
        else if (a == "--tp") tp = integer(a, v, 1, 4096);
        else if (a == "--pp") pp = integer(a, v, 1, 4096);
        else if (a == "--device") {
            device = v;
            if (device != "cpu" && device != "cuda") bad_flag = "--device must be cpu or cuda, got '" + device + "'";
        }
        else if (a == "--tokenizer") tokenizer_file = v;
        else bad_flag = "unknown flag " + a + did_you_mean(a, kUsage);
    }
    if (!bad_flag.empty()) {
        if (rank == 0) fprintf(stderr, "error: %s (see --help)\n", bad_flag.c_str());
        MPI_Finalize();
        return 2;
    }
    if (tp == 0) tp = pp > 0 ? world / pp : 1;
    if (init.empty()) { if (rank == 0) fprintf(stderr, "error: --init FILE is required\n"); MPI_Finalize(); return 2; }
    GPTConfig cfg;
    std::vector<float> params;
    std::string err;
    std::string read_from;  // a checkpoint directory's model file (model/model_file.h)
    if (!model_read(init, cfg, params, err, &read_from)) { if (rank == 0) fprintf(stderr, "error: %s\n", err.c_str()); MPI_Finalize(); return 1; }
    if (rank == 0 && !read_from.empty()) fprintf(stderr, "generate: --init %s: %s\n", init.c_str(), read_from.c_str());
    // The text needs a tokenizer of the model's vocabulary; ids in and out (--prompt-ids, --print-ids) need none.
    TextTokenizer text;
    const bool ids_only = !prompt_ids.empty() && print_ids && tokenizer_file.empty();
    const bool have_text = text_tokenizer_open(tokenizer_file, cfg.vocab, text, err);
    if (!have_text && !ids_only) {
        if (rank == 0) fprintf(stderr, "error: %s (or give --prompt-ids with --print-ids: ids in and out)\n", err.c_str());
        MPI_Finalize();
        return 1;
    }
    // --prompt-ids: whole numbers below the vocabulary, separated by spaces (checked before any work).
    std::vector<int> ids;
    if (!prompt_ids.empty()) {
        const char* p = prompt_ids.c_str();
        while (*p) {
            char* end = nullptr;
            errno = 0;
            const long x = strtol(p, &end, 10);
            if (end == p || errno || x < 0 || x >= cfg.vocab || (*end && *end != ' ')) {
                if (rank == 0)
                    fprintf(stderr, "error: --prompt-ids \"%s\": expected token ids in [0, %d) separated by spaces\n",
                            prompt_ids.c_str(), cfg.vocab);
                MPI_Finalize();
                return 2;
            }
            ids.push_back((int)x);
            for (p = end; *p == ' '; p++) {}
        }
        if (ids.empty()) {
            if (rank == 0) fprintf(stderr, "error: --prompt-ids is empty: give at least one token id\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (window <= 0) window = cfg.max_seq < 256 ? cfg.max_seq : 256;
    window = window / tp * tp;
    std::string bad = grid_validate(world, tp, false, cfg, 1, window, pp);
    if (!bad.empty()) { if (rank == 0) fprintf(stderr, "error: %s\n", bad.c_str()); MPI_Finalize(); return 1; }
    Device dev = device == "cuda" ? Device::CUDA : Device::CPU;
    {
        Ctx ctx = ctx_create(dev, 0);
        ProcessGrid grid = grid_create(MPI_COMM_WORLD, tp, false, CommBackend::MPI, ctx, pp);
        ActivationAllocator alloc(dev);
        GPT model;
        gpt_create(model, cfg, grid, ctx, alloc, DType::F32, Recompute::None, 0.f, seed);
        gpt_load_full(model, params.data());
        std::vector<int> toks = ids.empty() ? text.encode(prompt) : ids;
        const size_t prompt_len = toks.size();
        // The text as it grows, token by token: a long sample shows its progress.
        if (rank == 0 && have_text) printf("%s", ids.empty() ? prompt.c_str() : text.decode(ids).c_str()), fflush(stdout);
        generate(model, toks, n, window, temperature, top_k, seed, [&](int token) {
            if (rank == 0 && have_text) printf("%s", text.decode(std::vector<int>{token}).c_str()), fflush(stdout);
        });
        if (rank == 0 && have_text) printf("\n");
        if (rank == 0 && print_ids) {  // the generated ids alone, the last line
            for (size_t i = prompt_len; i < toks.size(); i++) printf(i > prompt_len ? " %d" : "%d", toks[i]);
            printf("\n");
        }
        gpt_destroy(model);
        grid_destroy(grid);
        ctx_destroy(ctx);
    }
    MPI_Finalize();
    return 0;
}
