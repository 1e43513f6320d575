// safetensors.h — the safetensors file format (Hugging Face's model.safetensors): read, check, write.
//
// Layout: 8 bytes, a little-endian uint64 N; then N bytes of JSON, one object: for each tensor
//   "name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}
// and optionally "__metadata__": {string: string}; then the byte buffer, in which each tensor's raw
// little-endian, row-major values lie at [begin, end) (offsets from the buffer's start, not the file's).
// The reader trusts nothing: the header length must fit the file, the JSON must be that object, every dtype
// known, every byte range inside the buffer, exactly as long as its shape and dtype say, the ranges disjoint
// and together covering the whole buffer (what the safetensors library itself demands). Every refusal names
// the file and what is wrong. Nothing is read before the check that it is inside the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

// Bytes per value of a safetensors dtype ("F32" -> 4, "BF16" -> 2, ...); 0 for a dtype the format does not
// define (then the file is refused: its byte ranges cannot be checked).
int safetensors_dtype_size(const std::string& dtype);

struct SafetensorsEntry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range inside the buffer
    int64_t numel() const;
};

struct SafetensorsIndex {
    std::vector<SafetensorsEntry> tensors;       // sorted by name
    std::map<std::string, std::string> metadata;  // "__metadata__"
    uint64_t data_start = 0;                      // where the buffer starts in the file: 8 + N
    const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
};

// Parse and check the header of a whole file held in memory (`path` only names it in messages).
bool safetensors_parse(const uint8_t* file, size_t size, const std::string& path, SafetensorsIndex& index,
                       std::string& err);
// Read a whole file into `bytes` and parse it.
bool safetensors_read(const std::string& path, std::vector<uint8_t>& bytes, SafetensorsIndex& index, std::string& err);

// A tensor's values widened to fp32 (F32 as it is, F16 and BF16 exactly): numel() floats into `out`.
// False with `err` for another dtype (I64, F64, ...: not a weight this project can take).
bool safetensors_to_f32(const uint8_t* file, const SafetensorsIndex& index, const SafetensorsEntry& e, float* out,
                        const std::string& path, std::string& err);

// One tensor to write: its raw little-endian bytes must be numel · dtype size long.
struct SafetensorsTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
// Write a file (atomically: data/atomic_file.h), tensors in the given order, the header padded with spaces to
// a multiple of 8 bytes (as the safetensors library does, so the buffer is aligned). False with `err`.
bool safetensors_write(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, std::string& err);
