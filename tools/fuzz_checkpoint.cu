// fuzz_checkpoint.cu — libFuzzer target: the llm.c model checkpoint reader (model/checkpoint.cu) on
// arbitrary bytes. It must either accept the file (and then the parameters must be exactly what the header
// promises) or refuse it with a message; never crash, read out of bounds or allocate past the file's size.
#include "fuzz_common.h"
#include "model/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz_input_file(data, size), err;
    GPTConfig cfg;
    std::vector<float> params;
    bool ok = checkpoint_read(path, cfg, params, err);
    if (ok) {
        if ((int64_t)params.size() != param_count(cfg) || !validate_config(cfg).empty()) abort();
    } else if (err.empty()) {
        abort();  // a refusal must say why
    }
    bool bf16 = false;
    GPTConfig c2;
    std::string err2;
    if (checkpoint_read_header(path, c2, bf16, err2) != ok) abort();  // header check agrees with the full read
    return 0;
}
