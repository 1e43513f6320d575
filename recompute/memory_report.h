// memory_report.h — measured activation memory (from the tagged allocator), gathered for the comparison
// with the paper's formulas.
//
// Taken at the step's peak (the allocator's snapshot), when exactly the tensors saved for backward are live:
// per layer and per tag, the measured bytes, and the formula's terms beside them (layer_terms(),
// recompute/memory_formulas.h, with the run's attention core); the small extras the paper ignores (layer-norm
// statistics, the loss's row statistics) apart; and the whole model on this rank vs L·layer formula + §4.3's
// terms outside the layers. The comparison itself, per tensor and with the run's Table 2 row, is
// recompute/table2.h; the rest of what --memory-report prints (the pipeline stage, the model states, the JSON
// record) is recompute/other_reports.h. The formulas are at shape.s, the tokens this rank holds of each
// sequence (sequence_ranks ranks share one).
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "../layers/activation_allocator.h"
#include "memory_formulas.h"

struct ModelStateReport;  // the model states beside the activations (recompute/other_reports.h, add_model_state)

// How many micro-batches' activations the measured moment holds, per layer of the model: under pipeline
// parallelism a stage holds only its layers (0 for the others) and several micro-batches of each (the
// schedule's peak, parallel/pipeline_schedule.h). Empty per_layer: every layer once (one stage, one
// micro-batch in flight). embedding / head: the micro-batches held by the parts outside the layers on the
// first / last stage (0 on a stage without them).
struct InFlightLayers {
    std::vector<int> per_layer;
    int embedding = 1, head = 1;
};

struct MemoryReport {
    ModelFormulaInput shape;               // s, b, h, a, L, v (= Vp), t, sp, rc, d and the attention core of this run
    int sequence_ranks = 1;                // ranks that share each sequence (shape.s: this rank's tokens of it)
    std::vector<FormulaTerm> formula;      // one layer's formula terms (names are the tags)
    std::map<std::string, double> tensors; // the first layer held: measured bytes by tag, per micro-batch
    int first_layer = 0;                   // that layer (the stage's first)
    double per_layer_measured = 0, per_layer_formula = 0, per_layer_extras = 0;
    bool layers_identical = true;          // every layer measured the same as layer 0
    double model_measured = 0, model_formula = 0, model_extras = 0;
    std::vector<FormulaTerm> model_terms;  // §4.3 terms outside the layers (formula)
    std::map<std::string, double> model_tensors_measured;
    size_t peak_live_bytes = 0, peak_reserved_bytes = 0;  // allocator high-water marks (previous step)
    double device_used_bytes = -1;                         // cudaMemGetInfo total - free (CUDA only)
    // The pipeline stage (pp = 1: the whole model): its layers' bytes over all the micro-batches in flight,
    // measured vs in_flight_layers × one layer's formula. The per-layer numbers above are per micro-batch.
    int pp = 1, pp_rank = 0, microbatches = 1;
    std::string schedule = "1f1b";
    int in_flight_layers = 0;  // Σ over the stage's layers of the micro-batches each holds
    double stage_layers_measured = 0, stage_layers_formula = 0;
    // The model states (weights, gradients, master, moments) measured next to their formula: null until
    // add_model_state (recompute/other_reports.h) adds them.
    std::shared_ptr<const ModelStateReport> model_states;
};

// "4.33 MB": bytes for a reader (GB, MB, kB or B; powers of ten).
std::string human_bytes(double bytes);
// The layer-norm statistics a layer keeps (fp32 mean and rstd), which the paper ignores: counted apart.
bool is_layer_extra(const std::string& name);

MemoryReport build_memory_report(const std::vector<ActivationRecord>& live, const ModelFormulaInput& shape,
                                 const InFlightLayers& in_flight = {});
