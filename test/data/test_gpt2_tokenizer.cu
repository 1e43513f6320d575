// test_gpt2_tokenizer.cu — data/gpt2_tokenizer.{h,cu}: GPT-2's byte-level BPE on a small tokenizer that the
// test learns itself (merges counted on a sample text, written in llm.c's tokenizer format and read back).
//
//   test_gpt2_tokenizer                 the checks below
//   test_gpt2_tokenizer --prepare-cli EXE   build/prepare_data --tokenizer: GPT-2 shards of two files
//   test_gpt2_tokenizer --dump DIR      write DIR/tokenizer.bin, DIR/text_K.txt and DIR/ids_K.txt (our
//                                       encoding) for test/data/tiktoken_agrees.py, which encodes the same
//                                       texts with tiktoken built offline from the same ranks; and the same
//                                       tokenizer as Hugging Face's DIR/vocab.json + DIR/merges.txt with
//                                       DIR/ids_hf_K.txt (our encoding after reading those, data/hf_tokenizer.h)
//                                       for test/data/hf_tokenizer_agrees.py (GPT2TokenizerFast)
#include <filesystem>
#include <fstream>
#include <map>
#include "../test_util.h"
#include "../../data/gpt2_tokenizer.h"
#include "../../data/hf_tokenizer.h"
#include "../../data/shard.h"

namespace fs = std::filesystem;

// ---- a tokenizer learned on a sample text ---------------------------------------------------------------
// Ids 0..255 are the bytes, then one token per merge in the order learned (so id = merge rank, as GPT-2's
// file has it), then the end-of-text token. Training: pre-tokenize with GPT-2's pattern, count adjacent
// pairs inside pieces, merge the most frequent (ties: the smaller byte string), repeat.
static const char* kSample =
    "The quick brown fox jumps over the lazy dog. I'll say it's fine; we've seen they're right, don't worry.\n"
    "Numbers: 123 4567 89, 2024-05-20 and 3.14159.   Spaces   and\ttabs\n\n"
    "Naïve café déjà vu — über straße. Привет, мир! Καλημέρα κόσμε. 日本語のテキスト。 ¿Qué tal? «Bien».\n";

// `pairs`: the two parts of each new token, in the order learned (what Hugging Face's merges.txt lists).
static std::vector<std::string> learn_tokens(int merges, int* eot, std::vector<std::pair<std::string, std::string>>* pairs) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; b++) tokens.emplace_back(1, (char)b);
    Gpt2Tokenizer bytes_only;
    std::string err;
    std::vector<std::string> base = tokens;
    base.push_back("<|endoftext|>");
    if (!gpt2_tokenizer_build(base, 256, bytes_only, err)) mm_fatal("%s", err.c_str());
    std::string text;
    for (int i = 0; i < 8; i++) text += kSample;
    std::vector<std::vector<std::string>> words;  // each piece as its current parts
    for (const std::string& p : gpt2_pretokenize(bytes_only, text)) {
        std::vector<std::string> w;
        for (char c : p) w.emplace_back(1, c);
        words.push_back(w);
    }
    for (int m = 0; m < merges; m++) {
        std::map<std::pair<std::string, std::string>, int> count;
        for (auto& w : words)
            for (size_t i = 0; i + 1 < w.size(); i++) count[{w[i], w[i + 1]}]++;
        std::pair<std::string, std::string> best;
        int best_n = 1;  // a pair seen once is not worth a token
        for (auto& [pair, n] : count)
            if (n > best_n || (n == best_n && best_n > 1 && pair.first + pair.second < best.first + best.second))
                best = pair, best_n = n;
        if (best_n <= 1) break;
        const std::string merged = best.first + best.second;
        bool known = false;
        for (const std::string& t : tokens) known |= t == merged;
        if (!known) tokens.push_back(merged), pairs->push_back(best);
        for (auto& w : words)
            for (size_t i = 0; i + 1 < w.size(); i++)
                if (w[i] == best.first && w[i + 1] == best.second) {
                    w[i] = merged;
                    w.erase(w.begin() + (long)i + 1);
                }
    }
    *eot = (int)tokens.size();
    tokens.push_back("<|endoftext|>");
    return tokens;
}

// The texts every check runs on: ASCII, contractions, digits, runs of spaces and newlines, non-ASCII
// letters and punctuation, and text the sample never showed.
static std::vector<std::string> test_texts() {
    return {"Hello world",
            "The quick brown fox jumps over the lazy dog.",
            "I'll say it's fine; we've seen they're right, don't worry. I'd've? 'S 'LL",
            "Numbers: 123 4567 89, 2024-05-20 and 3.14159 and 00012345678901234567890",
            "Spaces   between  words,\ttabs\t\tand\n\nnewlines\n\n\n  indented\n    more   ",
            "   leading spaces and trailing   ",
            "\n",
            " ",
            "",
            "Naïve café déjà vu — über straße, ÀÉÎÕÜ.",
            "Привет, мир! Καλημέρα κόσμε.",
            "日本語のテキスト。中文，标点！",
            "¿Qué tal? «Bien» — “quoted” ‘single’ … ١٢٣ ४५६",
            "emoji 😀👍🏽 and symbols ∑∫√ ≠ ≤ € £ ¥ ©",
            "mixed123abc ABC-def_ghi+jkl=mno/pqr\\stu|vwx~yz!!!???...",
            "<|endoftext|> is ordinary text here",
            "\u3000ideographic space\u00a0no-break space\u2028line separator"};
}

// ---- checks ---------------------------------------------------------------------------------------------
static void test_file_round_trip(const Gpt2Tokenizer& tok, const std::vector<std::string>& tokens, int eot) {
    CHECK(tok.vocab() == (int)tokens.size() && tok.eot == eot, "vocab %d eot %d", tok.vocab(), tok.eot);
    bool same = tok.tokens == tokens;
    CHECK(same, "tokens read back differ from tokens written");
    CHECK((int)tokens.size() > 256 + 50, "the sample should teach more than 50 merges (got %d tokens)", (int)tokens.size());
}

static void test_pretokenize(const Gpt2Tokenizer& tok) {
    struct Case { std::string text; std::vector<std::string> pieces; };
    const Case cases[] = {
        {"Hello world", {"Hello", " world"}},
        {"I'll don't  we've", {"I", "'ll", " don", "'t", " ", " we", "'ve"}},
        {" 123 abc4", {" 123", " abc", "4"}},
        {"a   ", {"a", "   "}},
        {"x\n\n y", {"x", "\n\n", " y"}},
        {"Привет, мир!", {"Привет", ",", " мир", "!"}},
        {"日本語のテキスト。", {"日本語のテキスト", "。"}},
        {"¿Qué?", {"¿", "Qué", "?"}},
        {"...!!", {"...!!"}},
        {"a\u3000b", {"a", "\u3000", "b"}},  // U+3000 is white space in Unicode (PCRE2_UCP)
    };
    for (const Case& c : cases) {
        std::vector<std::string> got = gpt2_pretokenize(tok, c.text);
        std::string shown;
        for (auto& p : got) shown += "[" + p + "]";
        CHECK(got == c.pieces, "pretokenize \"%s\" gave %s", c.text.c_str(), shown.c_str());
    }
}

static void test_encode_decode(const Gpt2Tokenizer& tok) {
    for (const std::string& text : test_texts()) {
        std::vector<int> ids = gpt2_encode(tok, text);
        bool in_range = true;
        for (int id : ids) in_range &= id >= 0 && id < tok.vocab() && id != tok.eot;
        CHECK(in_range, "encode \"%s\": an id outside the vocabulary or the end-of-text id", text.c_str());
        CHECK(gpt2_decode(tok, ids) == text, "decode(encode(\"%s\")) differs", text.c_str());
        CHECK(ids.size() <= text.size(), "\"%s\": %zu ids for %zu bytes", text.c_str(), ids.size(), text.size());
    }
    // Merges do their work: a text the sample taught needs far fewer ids than bytes, and a word seen often
    // is one token.
    std::string seen = "The quick brown fox jumps over the lazy dog.";
    CHECK(gpt2_encode(tok, seen).size() * 2 < seen.size(), "merges did not shorten a sample sentence (%zu ids)",
          gpt2_encode(tok, seen).size());
    CHECK(gpt2_encode(tok, " quick").size() == 1, "\" quick\" (8 times in the sample) is not one token");
    // Byte fallback: a piece never seen is its bytes, merged where it can be: never more ids than bytes.
    std::vector<int> z = gpt2_encode(tok, "zzzq");
    CHECK(!z.empty() && gpt2_decode(tok, z) == "zzzq", "unseen letters");
    // The end-of-text id decodes to its bytes; an id outside the vocabulary is shown, not dropped.
    CHECK(gpt2_decode(tok, {tok.eot}) == "<|endoftext|>", "end-of-text decodes to %s", gpt2_decode(tok, {tok.eot}).c_str());
    CHECK(gpt2_decode(tok, {72, 100000}) == "H<?100000>", "out-of-range id: %s", gpt2_decode(tok, {72, 100000}).c_str());
}

// A random UTF-8 text: code points from ASCII, Latin-1, Cyrillic, CJK, emoji (1 to 4 bytes each).
static std::string random_utf8(std::mt19937& rng, int n) {
    static const std::pair<uint32_t, uint32_t> ranges[] = {{0x20, 0x7e}, {0x09, 0x0d}, {0xa0, 0xff}, {0x400, 0x4ff},
                                                           {0x3000, 0x303f}, {0x4e00, 0x4fff}, {0x1f600, 0x1f64f}};
    std::string s;
    for (int i = 0; i < n; i++) {
        auto [lo, hi] = ranges[rng() % 7];
        uint32_t cp = lo + rng() % (hi - lo + 1);
        if (cp < 0x80) s += (char)cp;
        else if (cp < 0x800) s += (char)(0xc0 | cp >> 6), s += (char)(0x80 | (cp & 63));
        else if (cp < 0x10000) s += (char)(0xe0 | cp >> 12), s += (char)(0x80 | (cp >> 6 & 63)), s += (char)(0x80 | (cp & 63));
        else
            s += (char)(0xf0 | cp >> 18), s += (char)(0x80 | (cp >> 12 & 63)), s += (char)(0x80 | (cp >> 6 & 63)),
                s += (char)(0x80 | (cp & 63));
    }
    return s;
}

static void test_round_trip_random(const Gpt2Tokenizer& tok, std::mt19937& rng) {
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        std::string text = random_utf8(rng, 1 + (int)(rng() % 60));
        if (gpt2_decode(tok, gpt2_encode(tok, text)) != text) bad++;
    }
    CHECK(bad == 0, "%d of 300 random UTF-8 texts did not round-trip", bad);
    // Not UTF-8 at all (any byte string a file may hold): still exact.
    bad = 0;
    for (int i = 0; i < 300; i++) {
        std::string bytes(1 + rng() % 40, '\0');
        for (char& c : bytes) c = (char)(rng() & 0xff);
        std::string text = random_utf8(rng, 3) + bytes + " ok";
        if (gpt2_decode(tok, gpt2_encode(tok, text)) != text) bad++;
    }
    CHECK(bad == 0, "%d of 300 texts with invalid UTF-8 did not round-trip", bad);
}

// Bad files: each refused with a message that names the file and what is wrong.
static void test_bad_files(const std::vector<std::string>& tokens, int eot) {
    const std::string good = tmp_dir() + "/tokenizer.bin";
    const std::string bytes = read_bytes(good);
    auto variant = [&](const std::string& name, std::string content) {
        std::string path = tmp_dir() + "/" + name;
        std::ofstream(path, std::ios::binary) << content;
        return path;
    };
    auto header_int = [&](std::string content, int index, int32_t value) {
        memcpy(&content[index * 4], &value, 4);
        return content;
    };
    struct Bad { std::string path, expect; };
    const Bad cases[] = {
        {tmp_dir() + "/missing.bin", "cannot open tokenizer file"},
        {variant("short_header.bin", bytes.substr(0, 100)), "shorter than the 1024-byte header"},
        {variant("magic.bin", header_int(bytes, 0, 20240520)), "not a tokenizer file (magic 20240520, expected 20240328)"},
        {variant("version.bin", header_int(bytes, 1, 3)), "tokenizer version 3 is not supported"},
        {variant("cut.bin", bytes.substr(0, bytes.size() - 5)), "cut short"},
        {variant("trailing.bin", bytes + "xx"), "has bytes after its"},
        {variant("eot.bin", header_int(bytes, 3, (int32_t)tokens.size())), "end-of-text id"},
        {variant("vocab.bin", header_int(bytes, 2, 100)), "vocabulary size 100 is outside"},
    };
    for (const Bad& b : cases) {
        Gpt2Tokenizer t;
        std::string err;
        bool ok = gpt2_tokenizer_load(b.path, t, err);
        CHECK(!ok && err.find(b.expect) != std::string::npos && err.find(b.path) != std::string::npos,
              "%s: expected an error with \"%s\", got %s \"%s\"", b.path.c_str(), b.expect.c_str(), ok ? "success" : "",
              err.c_str());
    }
    // A token of length 0 (the first token's length byte set to 0).
    std::string zero = bytes;
    zero[1024] = 0;
    Gpt2Tokenizer t;
    std::string err;
    CHECK(!gpt2_tokenizer_load(variant("zero.bin", zero), t, err) && err.find("has length 0") != std::string::npos,
          "zero-length token: \"%s\"", err.c_str());
    // A vocabulary without all 256 bytes cannot be byte-level BPE.
    std::vector<std::string> missing(tokens.begin() + 1, tokens.end());
    CHECK(!gpt2_tokenizer_build(missing, eot - 1, t, err) && err.find("byte 0 has no token") != std::string::npos,
          "missing byte: \"%s\"", err.c_str());
}

// ---- --prepare-cli: prepare_data --tokenizer writes [EOT] doc1 [EOT] doc2, as llm.c's scripts do -------------
// The same shard from llm.c's file and from Hugging Face's vocab.json + merges.txt (--tokenizer DIR).
static void test_prepare_data_cli(const std::string& exe, const Gpt2Tokenizer& tok, const std::vector<std::string>& tokens,
                                  const std::vector<std::pair<std::string, std::string>>& pairs) {
    const std::string a = tmp_dir() + "/a.txt", b = tmp_dir() + "/b.txt", out = tmp_dir() + "/shards";
    const std::string ta = "I'll say it's fine; the quick brown fox.\n", tb = "Привет, мир! 123 numbers";
    std::ofstream(a, std::ios::binary) << ta;
    std::ofstream(b, std::ios::binary) << tb;
    fs::create_directories(tmp_dir() + "/hf_cli");
    hf_tokenizer_write(tmp_dir() + "/hf_cli", tokens, pairs);
    std::string cmd;
    int rc = 0;
    for (const std::string& tokenizer : {tmp_dir() + "/tokenizer.bin", tmp_dir() + "/hf_cli"}) {
        cmd = "'" + exe + "' --tokenizer '" + tokenizer + "' --val-fraction 0 --out-dir '" + out +
              "' '" + a + "' '" + b + "' > '" + tmp_dir() + "/log.txt' 2>&1";
        rc = system(cmd.c_str());
        CHECK(rc == 0, "prepare_data --tokenizer exited %d: %s", rc, read_bytes(tmp_dir() + "/log.txt").c_str());
        std::vector<uint16_t> got;
        std::string err;
        CHECK(read_token_shard(out + "/train.bin", got, err), "%s", err.c_str());
        std::vector<uint16_t> want = {(uint16_t)tok.eot};
        for (int id : gpt2_encode(tok, ta)) want.push_back((uint16_t)id);
        want.push_back((uint16_t)tok.eot);
        for (int id : gpt2_encode(tok, tb)) want.push_back((uint16_t)id);
        CHECK(got == want, "--tokenizer %s: train.bin holds %zu tokens, expected %zu ([EOT] a [EOT] b)", tokenizer.c_str(), got.size(),
              want.size());
        CHECK(read_bytes(tmp_dir() + "/log.txt").find("BPE from") != std::string::npos, "log: %s", read_bytes(tmp_dir() + "/log.txt").c_str());
    }
    // A bad tokenizer file stops it with a message naming the file.
    std::ofstream(tmp_dir() + "/bad_tok.bin", std::ios::binary) << std::string(2000, 'x');
    cmd = "'" + exe + "' --tokenizer '" + tmp_dir() + "/bad_tok.bin' --out-dir '" + out + "' '" + a + "' > '" + tmp_dir() +
          "/log2.txt' 2>&1";
    rc = system(cmd.c_str());
    std::string log = read_bytes(tmp_dir() + "/log2.txt");
    CHECK(rc != 0 && log.find("bad_tok.bin: not a tokenizer file") != std::string::npos, "bad tokenizer: rc %d, %s", rc,
          log.c_str());
}

// ---- the same tokenizer from Hugging Face's vocab.json + merges.txt (data/hf_tokenizer.h) -------------------
// Written from the learned tokens and merges, read back through a --tokenizer DIR path: every text encodes to
// the ids of llm.c's file; then malformed files are refused with the file and the problem.
static void test_hf_files(const Gpt2Tokenizer& tok, const std::vector<std::string>& tokens,
                          const std::vector<std::pair<std::string, std::string>>& pairs, std::mt19937& rng) {
    const std::string dir = tmp_dir() + "/hf";
    fs::create_directories(dir);
    hf_tokenizer_write(dir, tokens, pairs);
    Gpt2Tokenizer hf;
    std::string err;
    CHECK(tokenizer_load_any(dir, hf, err), "the written vocab.json + merges.txt do not load: %s", err.c_str());
    if (!err.empty()) return;
    CHECK(hf.eot == tok.eot && hf.tokens == tok.tokens && hf.merges.size() == pairs.size(), "vocab.json + merges.txt: %d tokens, eot %d, %zu merges",
          hf.vocab(), hf.eot, hf.merges.size());
    std::vector<std::string> texts = test_texts();
    for (int i = 0; i < 200; i++) texts.push_back(random_utf8(rng, 1 + (int)(rng() % 60)));
    int same = 0;
    for (const std::string& t : texts) same += gpt2_encode(hf, t) == gpt2_encode(tok, t);
    CHECK(same == (int)texts.size(), "vocab.json + merges.txt encode %d of %zu texts as llm.c's file does", same, texts.size());
    const std::string vocab = read_bytes(dir + "/vocab.json"), merges = read_bytes(dir + "/merges.txt");
    struct Bad { std::string vocab, merges, expect; };
    std::string no_eot = vocab;
    no_eot.replace(no_eot.find("<|endoftext|>"), 13, "<|endoftexx|>");
    const Bad cases[] = {
        {"[1, 2]", merges, "vocab.json: not a JSON object"},
        {"{\"a\": ", merges, "vocab.json: not valid JSON"},
        {vocab.substr(0, vocab.size() - 1) + ", \"zz\": 99999}", merges, "is 99999, expected an integer in 0.."},
        {no_eot, merges, "has no \"<|endoftext|>\" token"},
        {"{\"a b\": 0}", merges, "1 tokens, outside 256..65536"},
        {vocab, merges + "\xc4\xa0 q r\n", "is not two tokens in GPT-2's byte alphabet separated by one space"},
        {vocab, merges + "zzz zzz\n", "but its left token is not in"},
    };
    for (const Bad& b : cases) {
        Gpt2Tokenizer t;
        std::string e;
        bool ok = hf_tokenizer_parse(b.vocab, b.merges, "vocab.json", "merges.txt", t, e);
        CHECK(!ok && e.find(b.expect) != std::string::npos, "expected an error with \"%s\", got %s \"%s\"", b.expect.c_str(),
              ok ? "success" : "", e.c_str());
    }
    Gpt2Tokenizer t;
    CHECK(!tokenizer_load_any(tmp_dir(), t, err) && err.find("vocab.json") != std::string::npos,
          "a directory without vocab.json: \"%s\"", err.c_str());
}

// ---- --dump: the inputs of the tiktoken and transformers comparisons ---------------------------------------
static int dump(const std::string& dir, const Gpt2Tokenizer& tok, const std::vector<std::string>& tokens, int eot,
                const std::vector<std::pair<std::string, std::string>>& pairs) {
    fs::create_directories(dir);
    gpt2_tokenizer_write(dir + "/tokenizer.bin", tokens, eot);
    hf_tokenizer_write(dir, tokens, pairs);
    Gpt2Tokenizer hf;
    std::string err;
    if (!tokenizer_load_any(dir, hf, err)) mm_fatal("%s", err.c_str());
    std::vector<std::string> texts = test_texts();
    std::mt19937 rng(7);
    for (int i = 0; i < 50; i++) texts.push_back(random_utf8(rng, 1 + (int)(rng() % 80)));
    for (size_t k = 0; k < texts.size(); k++) {
        std::ofstream(dir + "/text_" + std::to_string(k) + ".txt", std::ios::binary) << texts[k];
        std::ofstream ids(dir + "/ids_" + std::to_string(k) + ".txt");
        for (int id : gpt2_encode(tok, texts[k])) ids << id << "\n";
        std::ofstream ids_hf(dir + "/ids_hf_" + std::to_string(k) + ".txt");
        for (int id : gpt2_encode(hf, texts[k])) ids_hf << id << "\n";
    }
    printf("wrote %zu texts and our encodings to %s\n", texts.size(), dir.c_str());
    return 0;
}

int main(int argc, char** argv) {
    tmp_dir_create("test_gpt2_tokenizer");
    int eot = 0;
    std::vector<std::pair<std::string, std::string>> pairs;
    std::vector<std::string> tokens = learn_tokens(400, &eot, &pairs);
    gpt2_tokenizer_write(tmp_dir() + "/tokenizer.bin", tokens, eot);
    Gpt2Tokenizer tok;
    std::string err;
    if (!gpt2_tokenizer_load(tmp_dir() + "/tokenizer.bin", tok, err)) {
        fprintf(stderr, "FAIL: the learned tokenizer does not load: %s\n", err.c_str());
        return 1;
    }
    if (argc == 3 && std::string(argv[1]) == "--dump") {
        int rc = dump(argv[2], tok, tokens, eot, pairs);
        fs::remove_all(tmp_dir());
        return rc;
    }
    if (argc == 3 && std::string(argv[1]) == "--prepare-cli") {
        test_prepare_data_cli(argv[2], tok, tokens, pairs);
        tmp_dir_finish();
        return test_finish("test_gpt2_tokenizer --prepare-cli");
    }
    std::mt19937 rng(20240328);
    test_file_round_trip(tok, tokens, eot);
    test_pretokenize(tok);
    test_encode_decode(tok);
    test_round_trip_random(tok, rng);
    test_bad_files(tokens, eot);
    test_hf_files(tok, tokens, pairs, rng);
    tmp_dir_finish();
    return test_finish("test_gpt2_tokenizer");
}
