// eval_file.cu — llm.c's multiple-choice eval files: reading, the rows of a batch, scoring (see eval_file.h).
#include "eval_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include "atomic_file.h"
#include "paths.h"
#include "../layers/runtime.h"

// What makes the right file, for a file of another format where an eval file is expected (paths.h).
static const char* kEvalHint =
    "llm.c's dev/data/hellaswag.py writes hellaswag_val.bin";

bool read_eval_file(const std::string& path, std::vector<EvalExample>& examples, std::string& err) {
    examples.clear();
    err = not_a_file_problem("eval file", path);
    if (!err.empty()) return false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return err = "cannot open eval file " + path + ": " + strerror(errno), false;
    std::unique_ptr<FILE, int (*)(FILE*)> closer(f, fclose);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256)
        return err = path + ": shorter than the 1024-byte header of an eval file" +
                     wrong_format_note(path, "an llm.c eval file", kEvalHint), false;
    if (header[0] != kEvalMagic)
        return err = path + ": not an eval file (magic " + std::to_string(header[0]) + ", expected " +
                     std::to_string(kEvalMagic) + ")" + wrong_format_note(path, "an llm.c eval file", kEvalHint), false;
    if (header[1] != 1) return err = path + ": eval file version " + std::to_string(header[1]) + " is not supported (1)", false;
    const int n = header[2];
    if (n <= 0) return err = path + ": holds " + std::to_string(n) + " examples", false;
    auto where = [&](int i) { return path + ": example " + std::to_string(i) + " of " + std::to_string(n); };
    std::vector<uint16_t> body;
    for (int i = 0; i < n; i++) {
        uint16_t head[3];
        if (fread(head, sizeof(uint16_t), 3, f) != 3) return err = where(i) + " is cut short (the file ends)", false;
        if (head[0] != 65535) return err = where(i) + ": no start delimiter 65535 (got " + std::to_string(head[0]) + ")", false;
        if (head[2] != (uint16_t)i) return err = where(i) + ": holds index " + std::to_string(head[2]), false;
        if (head[1] < 6 * 2 || head[1] % 2) return err = where(i) + ": bad size " + std::to_string(head[1]) + " bytes", false;
        body.resize(head[1] / 2 - 3);
        if (fread(body.data(), sizeof(uint16_t), body.size(), f) != body.size())
            return err = where(i) + " is cut short (the file ends)", false;
        EvalExample e;
        e.index = i;
        e.label = body[0];
        if (e.label >= kEvalCompletions) return err = where(i) + ": label " + std::to_string(e.label) + " is not 0..3", false;
        if (body[1] != kEvalCompletions)
            return err = where(i) + ": " + std::to_string(body[1]) + " completions (expected 4)", false;
        // Then <len><tokens> for the context and each completion, exactly filling the example's size.
        size_t pos = 2;
        std::vector<int>* parts[1 + kEvalCompletions] = {&e.context};
        for (int c = 0; c < kEvalCompletions; c++) parts[1 + c] = &e.completions[c];
        for (std::vector<int>* part : parts) {
            if (pos >= body.size()) return err = where(i) + ": its size ends before its tokens do", false;
            size_t len = body[pos++];
            if (len == 0) return err = where(i) + ": an empty context or completion", false;
            if (pos + len > body.size()) return err = where(i) + ": its size ends before its tokens do", false;
            part->assign(body.begin() + (long)pos, body.begin() + (long)(pos + len));
            pos += len;
        }
        if (pos != body.size()) return err = where(i) + ": " + std::to_string(body.size() - pos) + " values after its tokens", false;
        examples.push_back(std::move(e));
    }
    if (fgetc(f) != EOF) return err = path + ": bytes after its " + std::to_string(n) + " examples", false;
    return true;
}

void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples) {
    std::vector<uint16_t> stream;
    int32_t header[256] = {};
    header[0] = kEvalMagic;
    header[1] = 1;
    header[2] = (int32_t)examples.size();
    for (size_t i = 0; i < examples.size(); i++) {
        const EvalExample& e = examples[i];
        std::vector<uint16_t> s = {65535, 0, (uint16_t)i, (uint16_t)e.label, (uint16_t)kEvalCompletions};
        auto part = [&](const std::vector<int>& t) {
            s.push_back((uint16_t)t.size());
            for (int x : t) s.push_back((uint16_t)x);
        };
        part(e.context);
        for (const auto& c : e.completions) part(c);
        s[1] = (uint16_t)(s.size() * 2);
        header[3] = std::max(header[3], (int32_t)s[1]);
        stream.insert(stream.end(), s.begin(), s.end());
    }
    AtomicFile out;
    std::string err;
    if (!out.open(path, err)) mm_fatal("%s", err.c_str());
    out.write(header, sizeof header);
    out.write(stream.data(), stream.size() * sizeof(uint16_t));
    if (!out.commit(err)) mm_fatal("%s", err.c_str());
}

bool eval_rows(const std::vector<EvalExample>& examples, int first, int count, int T, std::vector<int32_t>& inputs,
               std::vector<int32_t>& targets, std::vector<uint8_t>& mask, std::string& err) {
    const size_t rows = (size_t)kEvalCompletions * count;
    inputs.assign(rows * T, 0);
    targets.assign(rows * T, 0);
    mask.assign(rows * T, 0);
    for (int i = 0; i < count; i++) {
        const EvalExample& e = examples[(size_t)(first + i)];
        for (int c = 0; c < kEvalCompletions; c++) {
            const std::vector<int>& comp = e.completions[c];
            const size_t len = e.context.size() + comp.size();
            if (len > (size_t)T) {
                err = "eval example " + std::to_string(e.index) + ": context + completion " + std::to_string(c) + " are " +
                      std::to_string(len) + " tokens, longer than the sequence length " + std::to_string(T);
                return false;
            }
            const size_t row = ((size_t)i * kEvalCompletions + c) * T;
            for (size_t t = 0; t < e.context.size(); t++) inputs[row + t] = e.context[t];
            for (size_t t = 0; t < comp.size(); t++) {
                const size_t at = e.context.size() + t;
                inputs[row + at] = comp[t];
                targets[row + at - 1] = comp[t];  // position at−1 predicts completion token t
                mask[row + at - 1] = 1;
            }
        }
    }
    return true;
}

int eval_correct(const std::vector<EvalExample>& examples, int first, int count, int T, const std::vector<float>& losses,
                 const std::vector<uint8_t>& mask) {
    int correct = 0;
    for (int i = 0; i < count; i++) {
        int best = 0;
        float best_loss = 0;
        for (int c = 0; c < kEvalCompletions; c++) {
            const size_t row = ((size_t)i * kEvalCompletions + c) * T;
            float sum = 0;  // in float and in position order, as llm.c sums, so near-ties pick as it does
            int n = 0;
            for (int t = 0; t < T; t++)
                if (mask[row + t]) sum += losses[row + t], n++;
            const float mean = n ? sum / (float)n : 0.f;
            if (c == 0 || mean < best_loss) best = c, best_loss = mean;
        }
        correct += best == examples[(size_t)(first + i)].label;
    }
    return correct;
}

void eval_share(int n_examples, int dp, int dp_rank, int* first, int* count) {
    const int per = (n_examples + dp - 1) / dp;
    *first = std::min(n_examples, per * dp_rank);
    *count = std::min(n_examples, *first + per) - *first;
}
