#!/usr/bin/python3
"""Encode the texts that `test_gpt2_tokenizer --dump DIR` wrote with transformers' GPT2TokenizerFast, read
from the same DIR/vocab.json + DIR/merges.txt (a tokenizer the test learned itself: no download), and compare
with mini-megatron's two encodings: after reading those two files (ids_hf_K.txt, data/hf_tokenizer.cu) and
after reading llm.c's tokenizer.bin of the same tokens (ids_K.txt). Exit 0: all three agree on every text;
1: a difference; 77: transformers is not installed for /usr/bin/python3 (make deps installs it).
A text holding "<|endoftext|>" is left out: transformers reads it as the special token, and mini-megatron, like
tiktoken's encode_ordinary, as the characters it is made of."""
import os
import sys


def read_ids(path):
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def main():
    try:
        import transformers
        from transformers import GPT2TokenizerFast
    except ImportError as e:
        print(f"skipped: {e} (make deps installs transformers for /usr/bin/python3)")
        return 77
    d = sys.argv[1]
    tok = GPT2TokenizerFast(vocab_file=os.path.join(d, "vocab.json"), merges_file=os.path.join(d, "merges.txt"))
    k = bad = left_out = 0
    while os.path.exists(os.path.join(d, f"text_{k}.txt")):
        with open(os.path.join(d, f"text_{k}.txt"), "rb") as f:
            text = f.read().decode("utf-8")
        if "<|endoftext|>" in text:
            left_out += 1
            k += 1
            continue
        theirs = tok.encode(text, add_special_tokens=False)
        ours_hf = read_ids(os.path.join(d, f"ids_hf_{k}.txt"))
        ours_llmc = read_ids(os.path.join(d, f"ids_{k}.txt"))
        if not (theirs == ours_hf == ours_llmc):
            bad += 1
            print(f"text {k} {text!r}:\n  GPT2TokenizerFast {theirs}\n  ours (vocab.json) {ours_hf}\n  ours (llm.c file) {ours_llmc}")
        k += 1
    n = k - left_out
    print(f"transformers {transformers.__version__} GPT2TokenizerFast ({len(tok)} tokens): {n - bad} of {n} texts encoded "
          f"identically by it, by mini-megatron from vocab.json + merges.txt and from llm.c's file ({left_out} left out: "
          f"they hold <|endoftext|>)")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
