// gpt2_tokenizer.cu — GPT-2 byte-level BPE: file format, pre-tokenization (PCRE2), merges (see the header).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "gpt2_tokenizer.h"

#include <pcre2.h>
#include <climits>
#include <cstdio>
#include <cstring>
#include "atomic_file.h"
#include "paths.h"
#include "../layers/runtime.h"

// What makes the right file, for a file of another format where a tokenizer file is expected (paths.h).
static const char* kTokenizerHint =
    "llm.c's train_gpt2.py writes gpt2_tokenizer.bin; --tokenizer also takes a directory with Hugging Face's vocab.json and merges.txt";

// ---- the compiled pattern -------------------------------------------------------------------------------
// PCRE2_UTF: the subject is UTF-8, classes see code points, not bytes. PCRE2_UCP: \s, \d, \w and the POSIX
// classes follow Unicode properties (as Python's and Rust's regex engines do for str patterns), so \s also
// matches e.g. U+3000. PCRE2_MATCH_INVALID_UTF: a subject with invalid UTF-8 is searched anyway; the invalid
// bytes simply match nothing (gpt2_pretokenize turns them into pieces of their own).
struct Gpt2Regex {
    pcre2_code* code = nullptr;
    ~Gpt2Regex() { pcre2_code_free(code); }
};

static std::shared_ptr<Gpt2Regex> compile_pattern(std::string& err) {
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    auto re = std::make_shared<Gpt2Regex>();
    re->code = pcre2_compile((PCRE2_SPTR)kGpt2Pattern, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, nullptr);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        err = "pcre2_compile of GPT-2's pattern failed at offset " + std::to_string(erroff) + ": " + (char*)msg;
        return nullptr;
    }
    // JIT makes matching several times faster; without it (a PCRE2 built without JIT) the interpreter runs.
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return re;
}

// ---- building and reading -------------------------------------------------------------------------------
bool gpt2_tokenizer_build(std::vector<std::string> tokens, int eot, Gpt2Tokenizer& tok, std::string& err) {
    if (tokens.empty()) return err = "no tokens", false;
    if (eot < 0 || eot >= (int)tokens.size())
        return err = "end-of-text id " + std::to_string(eot) + " is outside the vocabulary of " +
                     std::to_string(tokens.size()) + " tokens", false;
    Gpt2Tokenizer t;
    t.tokens = std::move(tokens);
    t.eot = eot;
    for (int id = 0; id < (int)t.tokens.size(); id++) {
        if (t.tokens[id].empty()) return err = "token " + std::to_string(id) + " has no bytes", false;
        if (id != eot) t.ranks.emplace(t.tokens[id], id);  // the end-of-text token is special, never merged into
    }
    // Byte-level BPE starts every piece from single bytes: each of the 256 must be a token.
    for (int b = 0; b < 256; b++)
        if (!t.ranks.count(std::string(1, (char)b)))
            return err = "byte " + std::to_string(b) + " has no token (a byte-level BPE vocabulary holds all 256)", false;
    t.regex = compile_pattern(err);
    if (!t.regex) return false;
    tok = std::move(t);
    return true;
}

bool gpt2_tokenizer_load(const std::string& path, Gpt2Tokenizer& tok, std::string& err) {
    err = not_a_file_problem("tokenizer file", path);
    if (!err.empty()) return false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return err = "cannot open tokenizer file " + path + ": " + strerror(errno), false;
    std::unique_ptr<FILE, int (*)(FILE*)> closer(f, fclose);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256)
        return err = path + ": shorter than the 1024-byte header of a tokenizer file" +
                     wrong_format_note(path, "an llm.c tokenizer file", kTokenizerHint), false;
    if (header[0] != kTokenizerMagic)
        return err = path + ": not a tokenizer file (magic " + std::to_string(header[0]) + ", expected " +
                     std::to_string(kTokenizerMagic) + ")" + wrong_format_note(path, "an llm.c tokenizer file", kTokenizerHint), false;
    if (header[1] != 1 && header[1] != 2)
        return err = path + ": tokenizer version " + std::to_string(header[1]) + " is not supported (1 or 2)", false;
    const int32_t V = header[2];
    if (V < 256 || V > 65536)
        return err = path + ": vocabulary size " + std::to_string(V) + " is outside 256..65536", false;
    // Version 1 is GPT-2's own file, written before the end-of-text id had a header slot: it is the last token.
    const int32_t eot = header[1] == 1 ? V - 1 : header[3];
    std::vector<std::string> tokens((size_t)V);
    for (int32_t id = 0; id < V; id++) {
        int n = fgetc(f);
        if (n == EOF) return err = path + ": cut short at token " + std::to_string(id) + " of " + std::to_string(V), false;
        if (n == 0) return err = path + ": token " + std::to_string(id) + " has length 0", false;
        tokens[id].resize((size_t)n);
        if (fread(&tokens[id][0], 1, (size_t)n, f) != (size_t)n)
            return err = path + ": cut short inside token " + std::to_string(id) + " of " + std::to_string(V), false;
    }
    if (fgetc(f) != EOF) return err = path + ": has bytes after its " + std::to_string(V) + " tokens", false;
    if (!gpt2_tokenizer_build(std::move(tokens), eot, tok, err)) return err = path + ": " + err, false;
    return true;
}

void gpt2_tokenizer_write(const std::string& path, const std::vector<std::string>& tokens, int eot) {
    int32_t header[256] = {};
    header[0] = kTokenizerMagic;
    header[1] = 2;
    header[2] = (int32_t)tokens.size();
    header[3] = eot;
    AtomicFile out;
    std::string err;
    if (!out.open(path, err)) mm_fatal("%s", err.c_str());
    out.write(header, sizeof header);
    for (const std::string& t : tokens) {
        if (t.empty() || t.size() > 255) mm_fatal("gpt2_tokenizer_write %s: a token must have 1..255 bytes", path.c_str());
        unsigned char n = (unsigned char)t.size();
        out.write(&n, 1);
        out.write(t.data(), t.size());
    }
    if (!out.commit(err)) mm_fatal("%s", err.c_str());
}

// ---- step 1: pre-tokenization ---------------------------------------------------------------------------
std::vector<std::string> gpt2_pretokenize(const Gpt2Tokenizer& tok, const std::string& text) {
    std::vector<std::string> pieces;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(tok.regex->code, nullptr);
    if (!md) mm_fatal("pcre2_match_data_create_from_pattern: out of memory");
    const PCRE2_SPTR subject = (PCRE2_SPTR)text.data();
    const size_t n = text.size();
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(tok.regex->code, subject, n, pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            mm_fatal("pcre2_match failed at byte %zu: %s", pos, (char*)msg);
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t begin = ov[0], end = ov[1];
        if (begin > pos) pieces.emplace_back(text, pos, begin - pos);  // bytes no alternative matched
        if (end == begin) end = begin + 1;  // (no alternative matches empty; guard against a loop anyway)
        pieces.emplace_back(text, begin, end - begin);
        pos = end;
    }
    if (pos < n) pieces.emplace_back(text, pos, n - pos);
    pcre2_match_data_free(md);
    return pieces;
}

// ---- step 2: merges inside one piece --------------------------------------------------------------------
// Parts start as single bytes; each round merges the adjacent pair whose concatenation has the smallest
// rank (the leftmost of equal ranks), until no adjacent pair is a token. Pieces are short (a word), so the
// quadratic scan is cheaper than a heap.
// With Hugging Face's merges: the same loop over ids, the pair of the lowest merge rank first. No shortcut
// for a piece that is itself a token: Hugging Face's BPE takes none, and a token the merges cannot build
// would come out otherwise.
static void encode_piece_by_merges(const Gpt2Tokenizer& tok, const std::string& piece, std::vector<int>& out) {
    std::vector<int> parts;
    for (char c : piece) parts.push_back(tok.ranks.at(std::string(1, c)));
    while (parts.size() > 1) {
        int best = INT_MAX, merged = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < parts.size(); i++) {
            auto m = tok.merges.find((uint64_t)(uint32_t)parts[i] << 32 | (uint32_t)parts[i + 1]);
            if (m != tok.merges.end() && m->second.first < best) best = m->second.first, merged = m->second.second, at = i;
        }
        if (merged < 0) break;
        parts[at] = merged;
        parts.erase(parts.begin() + (long)at + 1);
    }
    out.insert(out.end(), parts.begin(), parts.end());
}

static void encode_piece(const Gpt2Tokenizer& tok, const std::string& piece, std::vector<int>& out) {
    if (!tok.merges.empty()) return encode_piece_by_merges(tok, piece, out);
    auto whole = tok.ranks.find(piece);
    if (whole != tok.ranks.end()) {  // the common case: the piece is one token
        out.push_back(whole->second);
        return;
    }
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    while (parts.size() > 1) {
        int best = INT_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < parts.size(); i++) {
            auto r = tok.ranks.find(parts[i] + parts[i + 1]);
            if (r != tok.ranks.end() && r->second < best) best = r->second, at = i;
        }
        if (best == INT_MAX) break;
        parts[at] += parts[at + 1];
        parts.erase(parts.begin() + (long)at + 1);
    }
    for (const std::string& p : parts) out.push_back(tok.ranks.at(p));
}

std::vector<int> gpt2_encode(const Gpt2Tokenizer& tok, const std::string& text) {
    std::vector<int> ids;
    ids.reserve(text.size() / 3 + 1);
    for (const std::string& piece : gpt2_pretokenize(tok, text)) encode_piece(tok, piece, ids);
    return ids;
}

std::string gpt2_decode(const Gpt2Tokenizer& tok, const std::vector<int>& ids) {
    std::string text;
    for (int id : ids) {
        if (id >= 0 && id < tok.vocab()) text += tok.tokens[id];
        else text += "<?" + std::to_string(id) + ">";
    }
    return text;
}
