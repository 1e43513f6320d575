// text_tokenizer.cu — byte-level or GPT-2 BPE, behind one interface (see text_tokenizer.h).
#include "text_tokenizer.h"

#include "hf_tokenizer.h"
#include "tokenizer.h"

bool text_tokenizer_open(const std::string& file, int model_vocab, TextTokenizer& tok, std::string& err) {
    tok.file = file;
    if (!file.empty() && !tokenizer_load_any(file, tok.bpe, err)) return false;  // llm.c's file or HF's pair
    if (tok.vocab() != model_vocab) {
        err = "the tokenizer (" + std::string(tok.describe()) + ") has " + std::to_string(tok.vocab()) +
              " tokens but the model's vocabulary is " + std::to_string(model_vocab) +
              (file.empty() ? ": pass the model's --tokenizer FILE" : ": use the tokenizer the model was trained with");
        return false;
    }
    return true;
}

int TextTokenizer::vocab() const { return file.empty() ? tokenizer::kVocab : bpe.vocab(); }
const char* TextTokenizer::describe() const { return file.empty() ? "byte-level" : file.c_str(); }

std::vector<int> TextTokenizer::encode(const std::string& text) const {
    if (!file.empty()) return gpt2_encode(bpe, text);
    std::vector<uint16_t> t = tokenizer::encode(text);
    return std::vector<int>(t.begin(), t.end());
}

std::string TextTokenizer::decode(const std::vector<int>& ids) const {
    if (!file.empty()) {
        // The end-of-text token on a line of its own, as the byte-level decoder shows it.
        std::string text;
        std::vector<int> run;
        for (int id : ids) {
            if (id != bpe.eot) { run.push_back(id); continue; }
            text += gpt2_decode(bpe, run) + tokenizer::kEOTText;
            run.clear();
        }
        return text + gpt2_decode(bpe, run);
    }
    std::vector<uint16_t> t;
    for (int id : ids) t.push_back((uint16_t)(id >= 0 && id < 65536 ? id : 65535));
    return tokenizer::decode(t);
}
