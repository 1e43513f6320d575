// fuzz_train_state.cu — libFuzzer target: the resume-state parser (model/train_state.cu) on arbitrary
// bytes: the state file from memory and from a file (the two readers must agree), the comparison with a
// run about to continue it, and the `latest` pointer parser.
#include "fuzz_common.h"
#include "model/train_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    TrainState s;
    std::string err;
    bool ok = train_state_parse(data, size, "fuzz", s, err);
    if (!ok && err.empty()) abort();
    TrainState f;
    std::string err2;
    if (train_state_read(fuzz_input_file(data, size), f, err2) != ok) abort();
    if (ok) {
        if ((int64_t)s.adam_m.size() != param_count(s.cfg) || s.adam_v.size() != s.adam_m.size()) abort();
        if (f.step != s.step || f.adam_m != s.adam_m) abort();
        TrainState now = s;  // the same run continues: no mismatch; another batch: a message
        if (!train_state_mismatch(s, now, "fuzz").empty() && s.step <= s.steps) abort();
        now.batch = s.batch + 1;
        if (train_state_mismatch(s, now, "fuzz").empty()) abort();
        train_state_layout_note(s, now);
    }
    std::string name;
    parse_latest(std::string((const char*)data, size < 64 ? size : 64), "latest", name, err);
    return 0;
}
