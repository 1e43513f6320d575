// test_eval_file.cu — data/eval_file.{h,cu}: llm.c's multiple-choice eval files (HellaSwag): a round trip,
// the bad files, the rows of a batch, scoring against a brute-force reading of the per-position losses, and
// the split over data-parallel ranks.
#include <fstream>
#include "../test_util.h"
#include "../../data/eval_file.h"


static std::vector<EvalExample> random_examples(int n, std::mt19937& rng) {
    std::vector<EvalExample> ex((size_t)n);
    for (int i = 0; i < n; i++) {
        ex[i].index = i;
        ex[i].label = (int)(rng() % 4);
        ex[i].context.resize(1 + rng() % 12);
        for (int& t : ex[i].context) t = (int)(rng() % 50257);
        for (auto& c : ex[i].completions) {
            c.resize(1 + rng() % 6);
            for (int& t : c) t = (int)(rng() % 50257);
        }
    }
    return ex;
}
static bool same(const EvalExample& a, const EvalExample& b) {
    bool s = a.index == b.index && a.label == b.label && a.context == b.context;
    for (int c = 0; c < 4; c++) s &= a.completions[c] == b.completions[c];
    return s;
}

static void test_round_trip_and_bad_files(std::mt19937& rng) {
    std::vector<EvalExample> ex = random_examples(25, rng), back;
    std::string path = tmp_dir() + "/eval.bin", err;
    write_eval_file(path, ex);
    CHECK(read_eval_file(path, back, err), "%s", err.c_str());
    bool all = back.size() == ex.size();
    for (size_t i = 0; all && i < ex.size(); i++) all &= same(ex[i], back[i]);
    CHECK(all, "examples read back differ");
    const std::string bytes = read_bytes(path);
    auto variant = [&](const std::string& name, std::string content) {
        std::string p = tmp_dir() + "/" + name;
        std::ofstream(p, std::ios::binary) << content;
        return p;
    };
    auto put16 = [](std::string s, size_t at, uint16_t v) { memcpy(&s[at], &v, 2); return s; };
    auto put32 = [](std::string s, int at, int32_t v) { memcpy(&s[at * 4], &v, 4); return s; };
    const size_t ex0 = 1024;  // example 0: start, size, index, label, count, ...
    struct Bad { std::string path, expect; };
    const Bad cases[] = {
        {tmp_dir() + "/none.bin", "cannot open eval file"},
        {variant("magic.bin", put32(bytes, 0, 20240520)), "not an eval file (magic 20240520, expected 20240522)"},
        {variant("version.bin", put32(bytes, 1, 2)), "eval file version 2 is not supported"},
        {variant("cut.bin", bytes.substr(0, bytes.size() - 3)), "is cut short"},
        {variant("header.bin", bytes.substr(0, 500)), "shorter than the 1024-byte header"},
        {variant("delim.bin", put16(bytes, ex0, 1234)), "no start delimiter 65535 (got 1234)"},
        {variant("index.bin", put16(bytes, ex0 + 4, 7)), "example 0 of 25: holds index 7"},
        {variant("label.bin", put16(bytes, ex0 + 6, 5)), "label 5 is not 0..3"},
        {variant("count.bin", put16(bytes, ex0 + 8, 3)), "3 completions (expected 4)"},
        {variant("trailing.bin", bytes + "zz"), "bytes after its 25 examples"},
        {variant("more.bin", put32(bytes, 2, 26)), "example 25 of 26 is cut short"},
    };
    for (const Bad& b : cases) {
        std::vector<EvalExample> e;
        bool ok = read_eval_file(b.path, e, err);
        CHECK(!ok && contains(err, b.expect) && contains(err, b.path), "%s: expected \"%s\", got %s\"%s\"", b.path.c_str(),
              b.expect.c_str(), ok ? "success " : "", err.c_str());
    }
}

static void test_rows_and_scoring(std::mt19937& rng) {
    const int T = 24, n = 9;
    std::vector<EvalExample> ex = random_examples(n, rng);
    std::vector<int32_t> in, tg;
    std::vector<uint8_t> mask;
    std::string err;
    CHECK(eval_rows(ex, 2, 5, T, in, tg, mask, err), "%s", err.c_str());
    CHECK(in.size() == (size_t)20 * T && mask.size() == in.size(), "rows: %zu values", in.size());
    bool layout = true;
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 4; c++) {
            const EvalExample& e = ex[(size_t)2 + i];
            const int* row = in.data() + ((size_t)i * 4 + c) * T;
            const int* trow = tg.data() + ((size_t)i * 4 + c) * T;
            const uint8_t* mrow = mask.data() + ((size_t)i * 4 + c) * T;
            size_t L = e.context.size(), K = e.completions[c].size();
            for (size_t t = 0; t < L; t++) layout &= row[t] == e.context[t];
            for (size_t t = 0; t < K; t++) layout &= row[L + t] == e.completions[c][t] && trow[L + t - 1] == e.completions[c][t];
            int counted = 0;
            for (int t = 0; t < T; t++) counted += mrow[t];
            layout &= counted == (int)K && mrow[L - 1] == 1 && (L + K - 1 >= (size_t)T || mrow[L + K - 1] == 0);
        }
    CHECK(layout, "rows: context in every row, completion after it, targets shifted, mask on completion targets");
    // Scoring against brute force: per example, the candidate with the lowest mean masked loss.
    int want = 0;
    std::vector<float> losses(in.size());
    for (auto& x : losses) x = std::uniform_real_distribution<float>(0.f, 8.f)(rng);
    for (int i = 0; i < 5; i++) {
        float best = 1e30f;
        int pick = -1;
        for (int c = 0; c < 4; c++) {
            float sum = 0;
            int k = 0;
            for (int t = 0; t < T; t++)
                if (mask[((size_t)i * 4 + c) * T + t]) sum += losses[((size_t)i * 4 + c) * T + t], k++;
            if (sum / k < best) best = sum / k, pick = c;
        }
        want += pick == ex[(size_t)2 + i].label;
    }
    CHECK(eval_correct(ex, 2, 5, T, losses, mask) == want, "eval_correct %d, brute force %d",
          eval_correct(ex, 2, 5, T, losses, mask), want);
    // Make example 3 (row block 1) answer its label for sure: its label's completion loss 0.
    const int lab = ex[3].label;
    for (int t = 0; t < T; t++)
        if (mask[((size_t)1 * 4 + lab) * T + t]) losses[((size_t)1 * 4 + lab) * T + t] = 0.f;
    for (int c = 0; c < 4; c++)
        if (c != lab)
            for (int t = 0; t < T; t++)
                if (mask[((size_t)1 * 4 + c) * T + t]) losses[((size_t)1 * 4 + c) * T + t] = 5.f;
    std::vector<float> one(losses.begin() + 4 * T, losses.begin() + 8 * T);
    std::vector<uint8_t> m1(mask.begin() + 4 * T, mask.begin() + 8 * T);
    CHECK(eval_correct(ex, 3, 1, T, one, m1) == 1, "the labelled completion with the lowest loss is not counted right");
    // Too long for T: refused, naming the example.
    EvalExample big = ex[0];
    big.context.assign((size_t)T, 1);
    std::vector<EvalExample> bad = {big};
    CHECK(!eval_rows(bad, 0, 1, T, in, tg, mask, err) && contains(err, "longer than the sequence length 24"), "%s", err.c_str());
}

static void test_share() {
    bool ok = true;
    for (int n : {1, 4, 10, 10042})
        for (int dp = 1; dp <= 5; dp++) {
            int next = 0;
            for (int r = 0; r < dp; r++) {
                int first, count;
                eval_share(n, dp, r, &first, &count);
                ok &= count >= 0 && (count == 0 || first == next);
                next += count;
            }
            ok &= next == n;
        }
    CHECK(ok, "eval_share: the DP ranks' blocks must cover every example once, in order");
}

int main() {
    tmp_dir_create("test_eval");
    std::mt19937 rng(20240522);
    test_round_trip_and_bad_files(rng);
    test_rows_and_scoring(rng);
    test_share();
    tmp_dir_finish();
    return test_finish("test_eval_file");
}
