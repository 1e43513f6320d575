// memory_report.cu — the measured side of the Table 2 comparison: the allocator's snapshot, by layer and tag
// (see the header).
#include "memory_report.h"

#include <algorithm>
#include <cstdio>

std::string human_bytes(double bytes) {
    char b[64];
    if (bytes >= 1e9) snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(b, sizeof b, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1e3) snprintf(b, sizeof b, "%.1f kB", bytes / 1e3);
    else snprintf(b, sizeof b, "%.0f B", bytes);
    return b;
}

bool is_layer_extra(const std::string& name) {
    return name == "ln1_mean" || name == "ln1_rstd" || name == "ln2_mean" || name == "ln2_rstd";
}
static bool is_model_extra(const std::string& name) {
    return name == "lnf_mean" || name == "lnf_rstd" || name == "ce_rowmax" || name == "ce_sumexp";
}

MemoryReport build_memory_report(const std::vector<ActivationRecord>& live, const ModelFormulaInput& shape,
                                 const InFlightLayers& in_flight) {
    MemoryReport r;
    r.shape = shape;
    r.formula = layer_terms(shape.layer());
    r.per_layer_formula = layer_bytes(shape.layer());
    int L = (int)shape.L;
    std::vector<int> count = in_flight.per_layer.empty() ? std::vector<int>(L, 1) : in_flight.per_layer;
    count.resize(L, 0);
    // The terms outside the layers: the embedding's dropout mask for each micro-batch the first stage holds,
    // the head's tensors for each the last stage holds.
    ModelFormulaInput one = shape;
    one.p = 1;
    for (FormulaTerm t : model_extra_terms(one)) {
        t.bytes *= std::string(t.name) == "embed_drop_mask" ? in_flight.embedding : in_flight.head;
        if (t.bytes > 0) r.model_terms.push_back(t);
    }
    std::vector<double> per_layer(L, 0.0), per_layer_extra(L, 0.0);
    int first_held = -1;
    for (int l = 0; l < L && first_held < 0; l++)
        if (count[l] > 0) first_held = l;
    for (const ActivationRecord& a : live) {
        if (a.name.rfind("tmp:", 0) == 0 || a.name.rfind("w:", 0) == 0) continue;  // transients; W inputs: apart
        if (a.layer == kModelLevel) {
            r.model_tensors_measured[a.name] += a.bytes;
            if (is_model_extra(a.name)) r.model_extras += a.bytes;
            else r.model_measured += a.bytes;
            continue;
        }
        if (a.layer < 0 || a.layer >= L) continue;
        if (is_layer_extra(a.name)) per_layer_extra[a.layer] += a.bytes;
        else per_layer[a.layer] += a.bytes;
        if (a.layer == first_held) r.tensors[a.name] += (double)a.bytes / count[a.layer];
    }
    // Per micro-batch: a layer's bytes over the micro-batches it holds (exact when each holds the same).
    r.first_layer = std::max(first_held, 0);
    if (first_held >= 0) {
        r.per_layer_measured = per_layer[first_held] / count[first_held];
        r.per_layer_extras = per_layer_extra[first_held] / count[first_held];
    }
    for (int l = 0; l < L; l++) {
        if (count[l] == 0) {
            if (per_layer[l] != 0) r.layers_identical = false;  // a layer this stage should not hold
            continue;
        }
        if (per_layer[l] != r.per_layer_measured * count[l] || per_layer_extra[l] != r.per_layer_extras * count[l])
            r.layers_identical = false;
        r.in_flight_layers += count[l];
        r.stage_layers_measured += per_layer[l];
        r.model_extras += per_layer_extra[l];
    }
    r.stage_layers_formula = r.in_flight_layers * r.per_layer_formula;
    r.model_measured += r.stage_layers_measured;
    r.model_formula = r.stage_layers_formula;
    for (const FormulaTerm& t : r.model_terms) r.model_formula += t.bytes;
    return r;
}
