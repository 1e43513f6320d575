// did_you_mean.h — the nearest known flags to an unknown one, for its error message ("did you mean ...?").
// The known flags are read from a program's usage text (every word that starts with "--"), so that a
// suggestion is always a flag --help shows. Used by train_gpt (train/options.cu) and tools/generate.cu.
#pragma once
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

// Levenshtein distance: insertions, deletions and substitutions, one each.
inline size_t flag_edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = up;
        }
    }
    return row[b.size()];
}

// " (did you mean --a or --b?)" for the (at most three) known flags nearest to `given`, or "" when none is
// near: within a third of the name's length in edits (at least 2), or starting with what was typed.
inline std::string did_you_mean(const std::string& given, const std::string& usage) {
    std::vector<std::string> known;
    for (size_t i = usage.find("--"); i != std::string::npos; i = usage.find("--", i + 1)) {
        if (i > 0 && (isalnum((unsigned char)usage[i - 1]) || usage[i - 1] == '-')) continue;
        size_t e = i + 2;
        while (e < usage.size() && (isalnum((unsigned char)usage[e]) || usage[e] == '-' || usage[e] == '_')) e++;
        std::string f = usage.substr(i, e - i);
        if (f.size() > 3 && f.back() != '-' && std::find(known.begin(), known.end(), f) == known.end()) known.push_back(f);
    }
    std::string name = given;
    if (name.rfind("--", 0) != 0) name = (name.rfind("-", 0) == 0 ? "-" : "--") + name;  // -lr, lr: as --lr
    const size_t limit = std::max<size_t>(2, (name.size() - 2) / 3);
    // Nearest first; among equals, the one that shares the longest beginning with what was typed.
    std::vector<std::pair<std::pair<size_t, size_t>, std::string>> near;
    for (const std::string& k : known) {
        size_t common = 0;
        while (common < k.size() && common < name.size() && k[common] == name[common]) common++;
        const size_t d = flag_edit_distance(name, k);
        if (d <= limit) near.push_back({{d, k.size() - common}, k});
        else if (name.size() >= 5 && common == name.size()) near.push_back({{limit + 1, k.size() - common}, k});  // a prefix
    }
    std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (near.empty()) return "";
    std::string s = " (did you mean ";
    for (size_t i = 0; i < near.size() && i < 3; i++)
        s += (i == 0 ? "" : i + 1 == std::min<size_t>(near.size(), 3) ? " or " : ", ") + near[i].second;
    return s + "?)";
}
