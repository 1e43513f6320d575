// safetensors.cu — the safetensors reader and writer (see safetensors.h for the format and the checks).
#include "safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "../data/atomic_file.h"
#include "../data/paths.h"

using json = nlohmann::json;

// The header of a real model is a few hundred bytes per tensor; the safetensors library refuses headers
// above 100 MB, and so do we (a corrupt length must not make us allocate gigabytes).
static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

int safetensors_dtype_size(const std::string& d) {
    static const std::map<std::string, int> sizes = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
    auto it = sizes.find(d);
    return it == sizes.end() ? 0 : it->second;
}

int64_t SafetensorsEntry::numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

const SafetensorsEntry* SafetensorsIndex::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

// One tensor's entry of the header, checked against the buffer's length.
static bool parse_entry(const std::string& name, const json& v, uint64_t buffer, const std::string& where,
                        SafetensorsEntry& e, std::string& err) {
    const std::string at = where + ": tensor '" + name + "'";
    if (!v.is_object()) return err = at + " is not a JSON object", false;
    auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return err = at + " has no \"dtype\" string", false;
    if (sh == v.end() || !sh->is_array()) return err = at + " has no \"shape\" array", false;
    if (off == v.end() || !off->is_array() || off->size() != 2)
        return err = at + " has no \"data_offsets\" pair [begin, end]", false;
    e.name = name;
    e.dtype = dt->get<std::string>();
    const int size = safetensors_dtype_size(e.dtype);
    if (size == 0) return err = at + " has the unknown dtype '" + e.dtype + "'", false;
    // The element count is built up with a bound: a shape of huge dimensions must not overflow into a
    // small count that happens to match the byte range.
    uint64_t numel = 1;
    for (const json& d : *sh) {
        if (!d.is_number_unsigned()) return err = at + " has a shape entry that is not a non-negative integer", false;
        const uint64_t x = d.get<uint64_t>();
        if (x > (1ull << 40) || (numel && x > (1ull << 62) / numel))
            return err = at + " has a shape too large to be real (dimension " + std::to_string(x) + ")", false;
        numel *= x;
        e.shape.push_back((int64_t)x);
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
        return err = at + " has data_offsets that are not non-negative integers", false;
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end || e.end > buffer)
        return err = at + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] outside the " + std::to_string(buffer) + "-byte buffer after the header", false;
    if (e.end - e.begin != numel * (uint64_t)size)
        return err = at + " has " + std::to_string(e.end - e.begin) + " bytes, but its shape and dtype " + e.dtype +
                     " make " + std::to_string(numel * (uint64_t)size), false;
    return true;
}

bool safetensors_parse(const uint8_t* file, size_t size, const std::string& path, SafetensorsIndex& index,
                       std::string& err) {
    index = SafetensorsIndex{};
    const std::string where = "safetensors file " + path;
    if (size < 8) return err = where + " is " + std::to_string(size) + " bytes long: shorter than its 8-byte header length", false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | file[i];  // little-endian, whatever the host
    if (n > size - 8)
        return err = where + ": the header length " + std::to_string(n) + " runs past the end of the " +
                     std::to_string(size) + "-byte file (not a safetensors file, or cut short)", false;
    if (n > kMaxHeaderBytes) return err = where + ": the header length " + std::to_string(n) + " is above 100 MB", false;
    json h = json::parse(file + 8, file + 8 + n, nullptr, /*allow_exceptions=*/false);
    if (h.is_discarded()) return err = where + ": the header is not valid JSON", false;
    if (!h.is_object()) return err = where + ": the header is not a JSON object", false;
    index.data_start = 8 + n;
    const uint64_t buffer = size - index.data_start;
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) return err = where + ": __metadata__ is not an object", false;
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string()) return err = where + ": __metadata__ value '" + m.key() + "' is not a string", false;
                index.metadata[m.key()] = m->get<std::string>();
            }
            continue;
        }
        SafetensorsEntry e;
        if (!parse_entry(it.key(), *it, buffer, where, e, err)) return false;
        index.tensors.push_back(std::move(e));
    }
    // Disjoint ranges that cover the buffer: sorted by start, each must begin where the previous ended.
    std::vector<const SafetensorsEntry*> by_start;
    for (const auto& t : index.tensors) by_start.push_back(&t);
    std::sort(by_start.begin(), by_start.end(), [](auto a, auto b) {  // ties by name: the same message every time
        return a->begin != b->begin ? a->begin < b->begin : a->end != b->end ? a->end < b->end : a->name < b->name;
    });
    uint64_t at = 0;
    const SafetensorsEntry* prev = nullptr;
    for (const SafetensorsEntry* t : by_start) {
        if (t->begin < at)
            return err = where + ": tensors '" + prev->name + "' and '" + t->name + "' overlap (bytes " +
                         std::to_string(t->begin) + ".." + std::to_string(at) + ")", false;
        if (t->begin > at)
            return err = where + ": bytes " + std::to_string(at) + ".." + std::to_string(t->begin) +
                         " of the buffer belong to no tensor", false;
        at = t->end;
        prev = t;
    }
    if (at != buffer)
        return err = where + ": the last " + std::to_string(buffer - at) + " bytes of the buffer belong to no tensor", false;
    return true;
}

bool safetensors_read(const std::string& path, std::vector<uint8_t>& bytes, SafetensorsIndex& index, std::string& err) {
    err = not_a_file_problem("safetensors file", path);
    if (!err.empty()) return false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return err = "cannot open safetensors file " + path + ": " + strerror(errno), false;
    bytes.clear();
    uint8_t buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + k);
    const bool bad = ferror(f);
    fclose(f);
    if (bad) return err = "error reading safetensors file " + path + ": " + strerror(errno), false;
    return safetensors_parse(bytes.data(), bytes.size(), path, index, err);
}

// IEEE half to float, exactly (normal, subnormal, zero, inf, NaN).
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) bits = sign;
    else {  // subnormal: normalize
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

bool safetensors_to_f32(const uint8_t* file, const SafetensorsIndex& index, const SafetensorsEntry& e, float* out,
                        const std::string& path, std::string& err) {
    const uint8_t* p = file + index.data_start + e.begin;
    const int64_t n = e.numel();
    if (e.dtype == "F32") {
        memcpy(out, p, (size_t)n * 4);  // little-endian host (x86, ARM)
    } else if (e.dtype == "BF16" || e.dtype == "F16") {
        const bool bf = e.dtype == "BF16";
        for (int64_t i = 0; i < n; i++) {
            const uint16_t v = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            if (bf) {
                const uint32_t bits = (uint32_t)v << 16;
                memcpy(&out[i], &bits, 4);
            } else {
                out[i] = half_to_float(v);
            }
        }
    } else {
        return err = "safetensors file " + path + ": tensor '" + e.name + "' is stored as " + e.dtype +
                     ", expected F32, F16 or BF16", false;
    }
    return true;
}

bool safetensors_write(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, std::string& err) {
    json h = json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    uint64_t at = 0;
    for (const auto& t : tensors) {
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
        at += t.bytes.size();
    }
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)text.size() >> (8 * i));
    AtomicFile f;
    if (!f.open(path, err)) return false;
    f.write(len, 8);
    f.write(text.data(), text.size());
    for (const auto& t : tensors) f.write(t.bytes.data(), t.bytes.size());
    return f.commit(err);
}
