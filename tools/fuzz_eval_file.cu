// fuzz_eval_file.cu — libFuzzer target: llm.c's eval file (HellaSwag, data/eval_file.cu) on arbitrary bytes.
// The reader must accept (and then every example has 4 completions and a label among them, and its rows can
// be built or refused for a short window) or refuse with a message.
#include "fuzz_common.h"
#include "data/eval_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<EvalExample> examples;
    std::string err;
    const bool ok = read_eval_file(fuzz_input_file(data, size), examples, err);
    if (!ok && err.empty()) abort();
    if (ok) {
        for (const EvalExample& e : examples)
            if (e.label < 0 || e.label >= kEvalCompletions) abort();
        std::vector<int32_t> inputs, targets;
        std::vector<uint8_t> mask;
        const int n = examples.size() < 4 ? (int)examples.size() : 4;
        if (!eval_rows(examples, 0, n, 16, inputs, targets, mask, err) && err.empty()) abort();
    }
    return 0;
}
