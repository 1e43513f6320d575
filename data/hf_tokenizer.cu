// hf_tokenizer.cu — vocab.json + merges.txt <-> Gpt2Tokenizer (see hf_tokenizer.h).
#include "hf_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>

#include "atomic_file.h"
#include "paths.h"
#include "../layers/runtime.h"  // mm_fatal

using json = nlohmann::json;

// ---- GPT-2's byte alphabet ------------------------------------------------------------------------------
// bytes_to_unicode: the bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' are the code points of the same value; the
// other 68 bytes, in increasing order, become U+0100, U+0101, ...
struct ByteAlphabet {
    int cp_of_byte[256];
    std::map<int, int> byte_of_cp;
    ByteAlphabet() {
        int next = 256;
        for (int b = 0; b < 256; b++) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            cp_of_byte[b] = printable ? b : next++;
            byte_of_cp[cp_of_byte[b]] = b;
        }
    }
};
static const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

// A token in the alphabet -> its bytes. False when the text is not UTF-8 or holds a character outside the
// alphabet (every alphabet character is at most U+0143: one or two UTF-8 bytes).
static bool alphabet_to_bytes(const std::string& s, std::string& out) {
    out.clear();
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        int cp;
        if (c < 0x80) cp = c, i += 1;
        else if ((c & 0xE0) == 0xC0 && i + 1 < s.size() && ((unsigned char)s[i + 1] & 0xC0) == 0x80 && c >= 0xC2)
            cp = (c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F), i += 2;
        else return false;
        auto it = alphabet().byte_of_cp.find(cp);
        if (it == alphabet().byte_of_cp.end()) return false;
        out.push_back((char)it->second);
    }
    return !out.empty();
}

static std::string bytes_to_alphabet(const std::string& bytes) {
    std::string s;
    for (unsigned char b : bytes) {
        const int cp = alphabet().cp_of_byte[b];
        if (cp < 0x80) s.push_back((char)cp);
        else s.push_back((char)(0xC0 | cp >> 6)), s.push_back((char)(0x80 | (cp & 0x3F)));
    }
    return s;
}

// A short, printable quote of a bad line or key for a message.
static std::string quote(const std::string& s) {
    std::string q;
    for (unsigned char c : s.substr(0, 40)) q += (c >= 32 && c < 127) ? std::string(1, (char)c) : "\\x" + std::to_string(c);
    return "'" + q + (s.size() > 40 ? "...'" : "'");
}

// ---- reading --------------------------------------------------------------------------------------------
bool hf_tokenizer_parse(const std::string& vocab_json, const std::string& merges_txt, const std::string& vocab_name,
                        const std::string& merges_name, Gpt2Tokenizer& tok, std::string& err) {
    json v = json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) return err = vocab_name + ": not valid JSON", false;
    if (!v.is_object()) return err = vocab_name + ": not a JSON object of token -> id", false;
    const size_t n = v.size();
    if (n < 256 || n > 65536)
        return err = vocab_name + ": " + std::to_string(n) + " tokens, outside 256..65536 (token shards hold 16-bit ids)", false;
    std::vector<std::string> tokens(n);
    std::vector<bool> seen(n, false);
    std::map<std::string, int> id_of;
    int eot = -1;
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (int64_t)n)
            return err = vocab_name + ": the id of " + quote(it.key()) + " is " + it->dump() + ", expected an integer in 0.." +
                         std::to_string(n - 1) + " (the ids of " + std::to_string(n) + " tokens)", false;
        const int id = (int)it->get<int64_t>();
        if (seen[id]) return err = vocab_name + ": the id " + std::to_string(id) + " is given to two tokens", false;
        seen[id] = true;
        std::string bytes;
        if (!alphabet_to_bytes(it.key(), bytes))
            return err = vocab_name + ": the token " + quote(it.key()) + " is not written in GPT-2's byte alphabet", false;
        if (it.key() == "<|endoftext|>") eot = id;
        tokens[id] = bytes;
        id_of[bytes] = id;
    }
    if (eot < 0) return err = vocab_name + ": has no \"<|endoftext|>\" token (GPT-2's end of text)", false;
    std::unordered_map<uint64_t, std::pair<int, int>> merges;
    std::istringstream lines(merges_txt);
    std::string line;
    int line_no = 0, rank = 0;
    while (std::getline(lines, line)) {
        line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        const size_t sp = line.find(' ');
        std::string a, b;
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos ||
            !alphabet_to_bytes(line.substr(0, sp), a) || !alphabet_to_bytes(line.substr(sp + 1), b))
            return err = merges_name + ": line " + std::to_string(line_no) + " " + quote(line) +
                         " is not two tokens in GPT-2's byte alphabet separated by one space", false;
        auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
        if (ia == id_of.end() || ib == id_of.end() || im == id_of.end())
            return err = merges_name + ": line " + std::to_string(line_no) + " " + quote(line) + " merges into " +
                         quote(bytes_to_alphabet(a + b)) + ", but " +
                         (ia == id_of.end() ? "its left token" : ib == id_of.end() ? "its right token" : "the merged token") +
                         " is not in " + vocab_name, false;
        merges.emplace((uint64_t)(uint32_t)ia->second << 32 | (uint32_t)ib->second, std::make_pair(rank++, im->second));
    }
    Gpt2Tokenizer t;
    if (!gpt2_tokenizer_build(std::move(tokens), eot, t, err)) return err = vocab_name + ": " + err, false;
    t.merges = std::move(merges);
    tok = std::move(t);
    return true;
}

static bool read_text(const std::string& path, std::string& text, std::string& err) {
    err = not_a_file_problem("tokenizer file", path);
    if (!err.empty()) return false;
    std::ifstream in(path, std::ios::binary);
    if (!in) return err = "cannot open tokenizer file " + path + ": " + strerror(errno), false;
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    return true;
}

bool hf_tokenizer_load(const std::string& vocab_path, const std::string& merges_path, Gpt2Tokenizer& tok, std::string& err) {
    std::string v, m;
    if (!read_text(vocab_path, v, err) || !read_text(merges_path, m, err)) return false;
    return hf_tokenizer_parse(v, m, vocab_path, merges_path, tok, err);
}

void hf_tokenizer_write(const std::string& dir, const std::vector<std::string>& tokens,
                        const std::vector<std::pair<std::string, std::string>>& merges) {
    json v = json::object();
    for (size_t id = 0; id < tokens.size(); id++) v[bytes_to_alphabet(tokens[id])] = id;
    std::string merges_txt = "#version: 0.2\n";
    for (const auto& [a, b] : merges) merges_txt += bytes_to_alphabet(a) + " " + bytes_to_alphabet(b) + "\n";
    const std::string vocab_txt = v.dump();
    const std::string& merges_ref = merges_txt;
    std::string err;
    for (const auto& [name, text] : {std::make_pair("/vocab.json", &vocab_txt), std::make_pair("/merges.txt", &merges_ref)}) {
        AtomicFile f;
        if (!f.open(dir + name, err)) mm_fatal("%s", err.c_str());
        f.write(text->data(), text->size());
        if (!f.commit(err)) mm_fatal("%s", err.c_str());
    }
}

// ---- which files a path names ---------------------------------------------------------------------------
static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void tokenizer_files(const std::string& path, std::string& vocab, std::string& merges) {
    struct stat st;
    vocab = path;
    merges.clear();
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        std::string dir = path;
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        vocab = dir + "/vocab.json";
        merges = dir + "/merges.txt";
    } else if (ends_with(path, "vocab.json")) {
        merges = dir_of(path) + "/merges.txt";
    } else if (ends_with(path, "merges.txt")) {
        merges = path;
        vocab = dir_of(path) + "/vocab.json";
    }
}

std::string tokenizer_path_problem(const std::string& flag, const std::string& path) {
    std::string vocab, merges;
    tokenizer_files(path, vocab, merges);
    if (merges.empty()) return input_file_problem(flag, path);
    std::string p = input_file_problem(flag, vocab);
    if (p.empty()) p = input_file_problem(flag, merges);
    return p.empty() ? "" : p + " (a Hugging Face tokenizer is vocab.json and merges.txt side by side)";
}

bool tokenizer_load_any(const std::string& path, Gpt2Tokenizer& tok, std::string& err) {
    std::string vocab, merges;
    tokenizer_files(path, vocab, merges);
    return merges.empty() ? gpt2_tokenizer_load(path, tok, err) : hf_tokenizer_load(vocab, merges, tok, err);
}
