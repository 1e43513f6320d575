#!/usr/bin/env python3
"""Encode the texts that `test_gpt2_tokenizer --dump DIR` wrote with tiktoken, an independent implementation
of GPT-2's byte-level BPE, built offline from the same tokenizer file (ranks = token ids, GPT-2's pattern),
and compare with mini-megatron's encodings. Exit 0: all agree; 1: a difference; 77: tiktoken not installed."""
import os
import struct
import sys

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def read_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240328 and header[1] in (1, 2), "not a tokenizer file"
    vocab, eot = header[2], (header[3] if header[1] == 2 else header[2] - 1)
    tokens, pos = [], 1024
    for _ in range(vocab):
        n = data[pos]
        tokens.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    return tokens, eot


def main():
    try:
        import tiktoken
    except ImportError:
        print("tiktoken is not installed (pip install tiktoken): comparison skipped")
        return 77
    d = sys.argv[1]
    tokens, eot = read_tokenizer(os.path.join(d, "tokenizer.bin"))
    ranks = {t: i for i, t in enumerate(tokens) if i != eot}
    enc = tiktoken.Encoding(name="mini_megatron_test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": eot})
    k, bad = 0, 0
    while os.path.exists(os.path.join(d, f"text_{k}.txt")):
        with open(os.path.join(d, f"text_{k}.txt"), "rb") as f:
            text = f.read().decode("utf-8")
        with open(os.path.join(d, f"ids_{k}.txt")) as f:
            ours = [int(x) for x in f.read().split()]
        theirs = enc.encode_ordinary(text)
        if ours != theirs:
            bad += 1
            print(f"text {k} {text!r}:\n  ours     {ours}\n  tiktoken {theirs}")
        k += 1
    print(f"tiktoken {tiktoken.__version__}: {k - bad} of {k} texts encoded identically")
    return 1 if bad or k == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
