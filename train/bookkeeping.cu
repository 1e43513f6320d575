// bookkeeping.cu — around each step and at the end of a run (see bookkeeping.h).
#include "bookkeeping.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include "../data/atomic_file.h"
#include "../data/paths.h"
#include "interrupt.h"
#include "../layers/trace.h"
#include "../model/checkpoint.h"
#include "../model/generate.h"
#include "../model/model_file.h"
#include "../model/pipeline_step.h"
#include "../parallel/pipeline_simulation.h"
#include "../parallel/zero_bubble_schedule.h"
#include "../model/offload_model.h"
#include "../model/zero_model.h"
#include "../parallel/comm.h"
#include "../recompute/formulas.h"  // cp_kv_*_bytes: the ring's K/V traffic
#include "../recompute/other_reports.h"
// Learning rate at `step` (1-based): linear warmup, then constant or cosine decay to min_lr_frac · lr over
// steps 1..lr_decay_steps (0: --steps), and min_lr_frac · lr after them.
float learning_rate(const TrainOptions& o, int step) {
    if (o.warmup > 0 && step <= o.warmup) return o.lr * step / o.warmup;
    const int decay = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.steps;
    if (o.lr_schedule == "constant" || decay <= o.warmup) return o.lr;
    float progress = std::min(1.0f, (float)(step - o.warmup) / (float)(decay - o.warmup));
    float min_lr = o.lr * o.min_lr_frac;
    return min_lr + 0.5f * (o.lr - min_lr) * (1.0f + std::cos((float)M_PI * progress));
}

void begin_training(Progress& p) { p.t_start = now_s(); }

// --trace: recording starts before the first step of the window and stops before the step after its last,
// so the steps' evaluations and checkpoints in between are recorded too; a window that reaches the last step
// ends in finish_run (after the final validation). Collective (the clocks are measured: layers/trace.h), and
// before the step's clock starts.
static void trace_window(Run& run, int step) {
    const TrainOptions& opt = run.opt;
    if (opt.trace.empty()) return;
    if (step == opt.trace_first) trace_start(MPI_COMM_WORLD);
    if (step == opt.trace_last + 1) trace_stop(MPI_COMM_WORLD);
    if (trace_recording()) trace_instant("step " + std::to_string(step), trace_now_us(), "\"step\":" + std::to_string(step));
}

void begin_step(Run& run, Progress& p, int step) {
    trace_window(run, step);
    run.grid.tp_comm.counters.reset();  // parallel/collectives.h: bytes each collective kind moves, per step
    run.grid.pp_comm.counters.reset();
    run.alloc->reset_peak();
    run.alloc->keep_peak_snapshot(run.opt.memory_report && step == run.start_step);  // layers/activation_allocator.h
    p.cp0 = cp_stats();
    op_times_begin_step(p.op_times, run.opt.op_times, step, run.start_step, run.opt.steps);
    p.t0 = now_s();
}

static void report_memory(Run& run, int step);

void end_step(Run& run, Progress& p, int step, const StepStats& st) {
    ctx_sync(run.ctx);
    p.dt = now_s() - p.t0;
    op_times_end_step(p.op_times, p.dt);
    const CpStats cp_step = cp_stats_since(p.cp0);
    if (step == run.start_step) p.cp_first = cp_step;
    p.train_peak = std::max(p.train_peak, run.alloc->peak_live_bytes());
    p.step_comm = run.grid.tp_comm.counters;
    p.step_p2p_bytes = run.grid.pp_comm.counters.p2p_bytes;
    report_memory(run, step);
    if (step > run.start_step || run.opt.steps == run.start_step) {  // the timed steps: the pipeline's idle time (bubble)
        p.t_steps += p.dt, p.cp_compute_s += cp_step.compute_s;
    }
}

// Context parallelism, after the run (collective; rank 0 prints): each CP rank's ring attention blocks and
// query-key pairs in the first step (the zigzag makes them equal), its attention compute time over the timed
// steps, and the K/V bytes of the first step measured by the communicator's counters next to their formula
// (recompute/formulas.h) for this stage's layers and micro-batches; full recompute runs each forward ring twice.
static void report_context_parallel(const Run& run, const Progress& p) {
    const ProcessGrid& g = run.grid;
    if (g.cp == 1) return;
    double mine[6] = {(double)p.cp_first.blocks, (double)p.cp_first.diagonal_blocks, p.cp_first.pairs, p.cp_compute_s,
                      (double)p.cp_first.forward_bytes, (double)p.cp_first.backward_bytes};
    std::vector<double> all(6 * (size_t)g.world);
    MPI_CHECK(MPI_Gather(mine, 6, MPI_DOUBLE, all.data(), 6, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (g_rank != 0) return;
    const int L = run.opt.seq / (2 * g.cp);
    LOG0("context parallelism: cp %d, the sequence in 2c = %d chunks of %d positions, CP rank r holding chunks r and "
         "2c-1-r; ring attention per rank (first step: chunk-pair blocks, diagonal ones, query-key pairs; attention "
         "compute over the timed steps):\n", g.cp, 2 * g.cp, L);
    double t_min = INFINITY, t_max = 0;
    for (int r = 0; r < g.world; r++) {
        const double* a = &all[6 * (size_t)r];
        t_min = std::min(t_min, a[3]), t_max = std::max(t_max, a[3]);
        if (r % g.tp == 0 && r < g.tp * g.cp)  // the CP group of rank 0
            LOG0("  rank %d (cp rank %d): %.0f blocks (%.0f diagonal), %.0f query-key pairs, %.3f s\n", r, r / g.tp, a[0],
                 a[1], a[2], a[3]);
    }
    if (t_min > 0) LOG0("  attention compute time, all %d ranks: %.3f to %.3f s, max/min %.3f\n", g.world, t_min, t_max, t_max / t_min);
    const LayerFormulaInput in = run.shape.layer();
    const double layers = (double)run.model.stage.layers.size() * run.micro_batches;
    const double fwd = cp_kv_forward_bytes(in, g.cp) * layers * (run.recompute == Recompute::Full ? 2 : 1);
    const double bwd = cp_kv_backward_bytes(in, g.cp) * layers;
    LOG0("  K/V bytes sent by rank 0 in the first step: forward %.0f (formula 2(c-1)(s/c)b(h/t)d x %.0f layer passes%s = "
         "%.0f), backward %.0f (formula [2(c-1)(s/c)b(h/t)d + 2c(s/c)b(h/t)4] x %.0f = %.0f)\n", all[4], layers,
         run.recompute == Recompute::Full ? " x 2 (full recompute reruns the ring)" : "", fwd, all[5], layers, bwd);
    if (run.logf)
        fprintf(run.logf, "{\"context_parallel\":{\"cp\":%d,\"blocks\":%.0f,\"pairs\":%.0f,\"kv_forward_bytes\":%.0f,"
                "\"kv_forward_formula\":%.0f,\"kv_backward_bytes\":%.0f,\"kv_backward_formula\":%.0f,"
                "\"attention_s_min\":%.6f,\"attention_s_max\":%.6f}}\n", g.cp, all[0], all[2], all[4], fwd, all[5], bwd,
                t_min, t_max), fflush(run.logf);
}


// After the run: each stage's measured idle share, from the op times the executor recorded on every backend
// (model/pipeline_timeline.h: on CUDA events on the stream), over the timed steps (the first step left out when
// there are more), next to the formula's at the run's own mean op times (schedule_bubble, train/run.h).
// Collective over each pipeline; rank 0 prints its own pipeline's.
static void report_bubble(Run& run) {
    const ProcessGrid& g = run.grid;
    if (g.pp == 1) return;
    run.model.pipe.timeline.flush(run.ctx);
    const size_t first = run.model.pipe.timeline.steps().size() > 1 ? 1 : 0;
    const bool post = run.opt.post_validation;  // steps that overlap: each stage's own period (pipeline_timeline.h)
    const PipelineIdle idle = pipeline_idle(run.model.pipe.timeline, run.grid.pp_comm, post, first);
    if (g_rank != 0 || idle.steps == 0) return;
    std::string formula, how;
    const double b = ideal_bubble_rate(run, &formula);
    // Post-validated steps overlap: a stage's period runs from one step's first op to the next step's, so n
    // recorded steps hold n - 1 periods (model/pipeline_timeline.h), none when n is 1.
    const int measured = post ? idle.steps - 1 : idle.steps;
    if (measured < 1) {
        LOG0("pipeline bubble (%s, p %d, m %d, M %d): ideal %s = %.3f of the ideal time, an idle share %.3f of the step; "
             "not measured: post-validated steps overlap, so a stage's idle share is taken over its period from one step "
             "to the next, and the timed steps (the first left out when there are more) hold no whole period: run at "
             "least 3 steps\n", pipe_schedule_name(run.schedule), g.pp, run.chunks, run.micro_batches, formula.c_str(), b,
             b / (1 + b));
        return;
    }
    const double tf = idle.mean_op_ms[0], tb = idle.mean_op_ms[1], tw = idle.mean_op_ms[2];
    const double bubble = schedule_bubble(run, run.micro_batches, tf, tb, tw, &how);
    const double share = bubble_idle_share(bubble, run.micro_batches, run.chunks, tf, tb, tw);
    LOG0("pipeline bubble (%s, p %d, m %d, M %d): ideal %s = %.3f of the ideal time, an idle share %.3f of the step\n",
         pipe_schedule_name(run.schedule), g.pp, run.chunks, run.micro_batches, formula.c_str(), b, b / (1 + b));
    LOG0("  measured over %d %s%s (op spans on every stage; %s): T_F %.3f, T_B %.3f, T_W %.3f ms per op; the formula's idle "
         "share at these times %.3f (%s); measured idle share:", measured, post ? "period" : "step", measured == 1 ? "" : "s",
         run.device == Device::CUDA ? "CUDA events on the stream" : "host clock", tf, tb, tw, share, how.c_str());
    for (const StageIdle& s : idle.stages)
        LOG0(" stage %d %.3f [%.3f-%.3f]%s", s.stage, s.mean_share, s.min_share, s.max_share, s.stage + 1 < g.pp ? "," : "\n");
}

// Under a zero-bubble schedule, after the report: the W passes' inputs the stage held at the same moment
// (layers/weight_grad_queue.h: "w:" tags) next to their formula. Each of the stage's layers holds, for every
// micro-batch whose B has run and W not, its four linear layers' inputs and output gradients: X and dY of
// QKV (h, 3h/t), the projection (h/t, h), fc1 (h, 4h/t) and fc2 (4h/t, h) per token, the column-parallel
// inputs all-gathered under SP: d·(s/c)·b·h·(4 + 12/t) bytes.
static double weight_input_bytes(const std::vector<ActivationRecord>& live) {
    double bytes = 0;
    for (const ActivationRecord& a : live)
        if (a.name.rfind("w:", 0) == 0) bytes += (double)a.bytes;
    return bytes;
}
static void print_weight_inputs(FILE* f, const Run& run, const MemoryReport& r, double measured) {
    if (!is_zero_bubble(run.schedule) || run.grid.pp == 1) return;
    const ModelFormulaInput& s = r.shape;
    const int pending = pipeline_weight_pending(run.model, run.micro_batches);
    const double per_layer = w_input_bytes_per_layer(s.s, s.b, s.h, s.t, s.d);  // at s/c; recompute/formulas.h
    const int layers = run.model.stage.layers_per_chunk;  // each (micro-batch, chunk) pending holds one chunk's layers
    const double formula = pending * layers * per_layer;
    fprintf(f, "W inputs held for the zero-bubble W passes (%d micro-batch%s with B run and W not, %d layers each; "
               "d(s/c)bh(4 + 12/t) = %.0f bytes per layer)\n", pending, pending == 1 ? "" : "es", layers, per_layer);
    fprintf(f, "  %-16s %14s %14s %10s\n", "", "measured", "formula", "difference");
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f\n", "W inputs", measured, formula, measured - formula);
}

// --memory-report, after the run's first step: the saved activations at the schedule's peak, as the
// allocator kept them (the step marked the moment: model/train_step.h), measured next to the paper's
// formulas (recompute/memory_report.cu); then the reports of the first rank of every pipeline stage,
// printed and logged by rank 0, and the model states per rank (collective).
static void report_memory(Run& run, int step) {
    if (!(run.opt.memory_report && step == run.start_step)) return;
    if (!run.alloc->has_peak_snapshot()) mm_fatal("--memory-report: the step marked no peak (ActivationAllocator::mark_peak)");
    // What the stage holds at its schedule's peak (model/pipeline_step.h).
    const PipelineStage& st = run.model.stage;
    // (Offloading: the device keeps what was not moved to the host, model/offload_model.h.)
    MemoryReport r = build_memory_report(run.alloc->peak_snapshot(), run.shape,
                                         offload_resident(run.model, run.micro_batches, pipeline_in_flight(run.model, run.micro_batches)));
    r.sequence_ranks = run.grid.cp;  // context parallelism: run.shape is at this rank's s/cp tokens
    r.pp = st.pp;
    r.pp_rank = st.rank;
    r.microbatches = run.micro_batches;
    r.schedule = pipe_schedule_name(run.schedule);
    add_model_state(r, run.model.state_memory, gpt_model_state_formula(run.model));  // recompute/model_state_memory.h
    r.device_used_bytes = run.alloc->peak_snapshot_device_used_bytes();  // the GPU's memory in use at the peak (-1: none)
    const double w_inputs = weight_input_bytes(run.alloc->peak_snapshot());
    run.alloc->keep_peak_snapshot(false);
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    print_memory_report(f, r);
    print_weight_inputs(f, run, r, w_inputs);
    print_zero_report(f, run.model, run.micro_batches);  // ZeRO-1/2/3's buffers and bytes (model/zero_model.h)
    print_offload_report(f, run.model, run.micro_batches, run.shape);  // host bytes, copies (model/offload_model.h)
    fclose(f);
    const std::string memory_text = text;
    free(text);
    const ProcessGrid& g = run.grid;
    const auto reports = gather_stage_reports(memory_text, memory_report_json(r), g.pp, ranks_per_stage(g), MPI_COMM_WORLD);
    for (size_t s = 0; s < reports.size(); s++) {  // rank 0 only
        if (g.pp > 1) printf("\n---- pipeline stage %zu (rank %d) ----", s, (int)s * ranks_per_stage(g));
        fputs(reports[s].first.c_str(), stdout);
        if (run.logf) fprintf(run.logf, "{\"step\":%d,\"memory_report\":%s}\n", step, reports[s].second.c_str());
    }
    const std::string by_rank = model_states_by_rank(run.model, MPI_COMM_WORLD);  // collective (distributed_optimizer.h)
    if (g_rank == 0) printf("Model states per rank\n%s", by_rank.c_str());
    fflush(stdout);
}

// A step whose loss or gradient norm was NaN/Inf (its update was not applied): name the first bad gradient
// tensor and stop -- or, with --skip-bad-steps, go on (at most 10 in a row). Returns the new run of bad steps.
static int handle_bad_step(const TrainOptions& o, GPT& model, const StepStats& st, int step, int bad_in_a_row) {
    // (collective; under post-validation named at the rollback: model/post_validation.cu)
    std::string where = st.rolled_back ? st.first_nonfinite : first_nonfinite_gradient(model);
    char head[160];
    snprintf(head, sizeof head, "step %d: the loss (%g) or the gradient norm (%g) is not finite; first non-finite gradient: ", step, st.loss, st.grad_norm);
    std::string what = head + (where.empty() ? std::string("none (the loss itself)") : where);
    if (!o.skip_bad_steps)
        refuse_if(what + "; stopped before the update (weights and checkpoints hold step " + std::to_string(step - 1) +
                  "); lower --lr, keep --grad-clip on, or pass --skip-bad-steps");
    if (bad_in_a_row + 1 >= 10) refuse_if(what + "; 10 steps in a row were not finite: stopping despite --skip-bad-steps");
    LOG0("warning: %s; update skipped (--skip-bad-steps)\n", what.c_str());
    return bad_in_a_row + 1;
}

// Post-validation: the pending step validated now (before a checkpoint, an evaluation, the end), its statistics
// queued for the next step lines. Collective.
static void settle_steps(Run& run) {
    if (!run.opt.post_validation) return;
    for (const StepStats& st : post_validation_settle(run.model, run.pv)) run.validated.push_back(st);
}

StepStats take_step(Run& run, int step, float lr) {
    const TrainOptions& opt = run.opt;
    if (!opt.post_validation)
        return train_step(run.model, run.train.inputs.data(), run.train.targets.data(), run.train.B_local, opt.seq, run.optim,
                          step, lr, run.micro_batches);
    const StepStats st = post_validated_step(run.model, run.pv, run.train.inputs.data(), run.train.targets.data(),
                                             run.train.B_local, opt.seq, run.optim, step, lr, run.micro_batches);
    if (st.step) run.validated.push_back(st);
    // A step that a checkpoint, an evaluation or the end follows is validated now, so that the nan policy and the
    // step line see it before them (a failed step never reaches a checkpoint).
    if (checkpoint_due(opt, step) || exit_interval_reached(opt, step) || eval_due(opt.val_every, step, opt.steps) ||
        eval_due(opt.eval_every, step, opt.steps) || step == opt.steps)
        settle_steps(run);
    return st;
}

static void nan_policy_one(Run& run, Progress& p, const StepStats& st) {
    const int step = st.step;
    if (st.rolled_back)
        LOG0("post-validation: step %d rolled back (%s)\n", step, st.applied ? "the clip changes its update: redone with it"
                                                                             : "not finite: skipped");
    if (!st.applied) {
        run.skipped_steps++;
        p.bad_in_a_row = handle_bad_step(run.opt, run.model, st, step, p.bad_in_a_row);
    } else {
        p.bad_in_a_row = 0;
        if (std::isnan(p.first_loss)) p.first_loss = st.loss, p.first_step = step;
        p.last_loss = st.loss, p.last_step = step;
    }
    p.steps_run++;
}

void apply_nan_policy(Run& run, Progress& p, int step, const StepStats& st) {
    // Numerical faults (model/train_step.cu): a non-finite step was not applied; stop, naming the first bad
    // gradient, before anything reaches a checkpoint -- or skip it with --skip-bad-steps. Under post-validation
    // the steps validated since the last call (model/post_validation.h: a step behind).
    if (!run.opt.post_validation) return nan_policy_one(run, p, st);
    (void)step;
    for (const StepStats& v : run.validated) nan_policy_one(run, p, v);
}

static void log_one(const Run& run, const Progress& p, const StepStats& st, float lr);
void log_step(Run& run, const Progress& p, int step, const StepStats& st, float lr) {
    if (!run.opt.post_validation) return log_one(run, p, st, lr);
    (void)step;
    for (const StepStats& v : run.validated) log_one(run, p, v, learning_rate(run.opt, v.step));
    run.validated.clear();
}

// dt is this step's time, t_steps that of the timed steps so far (for the ETA).
static void log_one(const Run& run, const Progress& p, const StepStats& st, float lr) {
    const int step = st.step;
    const TrainOptions& opt = run.opt;
    const double dt = p.dt, t_steps = p.t_steps;
    const uint64_t p2p_bytes = p.step_p2p_bytes;
    if (step % opt.log_every == 0 || step == opt.steps || step == run.start_step) {
        double avg = step > run.start_step ? t_steps / (step - run.start_step) : dt;
        double eta = avg * (opt.steps - step);
        char mfu[64] = "";
        if (run.device == Device::CUDA) {  // recompute/formulas.h: model FLOPs against the H100's bf16 peak
            double flops = model_flops(opt.batch, run.cfg.layers, opt.seq, run.cfg.channels, run.cfg.padded_vocab);
            snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * flops_utilization(flops, dt, kH100PeakBf16, run.world));
        }
        if (run.grid.pp > 1)  // what rank 0 (the first stage) sent to the next stage this step
            snprintf(mfu + strlen(mfu), sizeof mfu - strlen(mfu), " | p2p %.2f MB", p2p_bytes / 1e6);
        const double tokens_per_step = (double)opt.batch * opt.seq;
        LOG0("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s | ETA %.0fs\n", step, opt.steps, st.loss,
             lr, st.grad_norm, dt * 1e3, tokens_per_step / dt, mfu, eta);
    }
    char extra[96] = "";
    if (run.grid.pp > 1) snprintf(extra, sizeof extra, ",\"p2p_bytes\":%llu", (unsigned long long)p2p_bytes);
    // %.9g: a float's exact value (resume tests compare losses bitwise)
    // JSON has no NaN or Infinity: a skipped step's non-finite loss or norm is written null ("skipped" says why).
    auto number = [](double x) {
        char b[32];
        if (std::isfinite(x)) snprintf(b, sizeof b, "%.9g", x);
        else snprintf(b, sizeof b, "null");
        return std::string(b);
    };
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"train_loss\":%s,\"lr\":%.6e,\"grad_norm\":%s,\"ms\":%.3f%s%s}\n", step,
                          number(st.loss).c_str(), lr, number(st.grad_norm).c_str(), dt * 1e3, extra,
                          st.applied ? "" : ",\"skipped\":true"), fflush(run.logf);
}

// Save the pair DIR/step_N/{model.bin,state.bin} (model/train_state.cu): the TP ranks gather the weights and
// AdamW moments (consolidated), rank 0 writes. The directory was checked at start (check_paths), but a disk
// can fill or a directory vanish since: then the pair goes to a rescue directory that the message names,
// and the run stops (non-zero) rather than train on without checkpoints.
static void save_checkpoint_pair(const std::string& dir, GPT& model, TrainState s, const DataLoader& train, int step, int64_t skipped) {
    std::vector<float> params;
    gpt_gather_full(model, params);
    gpt_gather_full_optimizer(model, s.adam_m, s.adam_v);
    s.step = step;
    s.data_epoch = train.epoch;
    s.data_position = train.position;
    s.skipped_steps = skipped;
    std::string err;
    if (g_rank == 0 && !checkpoint_dir_save(dir, model.cfg, params.data(), s, err)) {
        const std::string rescue = rescue_path(dir);
        std::string rescue_err;
        const bool rescued = checkpoint_dir_save(rescue, model.cfg, params.data(), s, rescue_err);
        err = "checkpoint of step " + std::to_string(step) + " not saved: " + err + "; " +
              (rescued ? "saved to " + rescue + " instead (resume with --resume " + rescue + ")"
                       : "the rescue directory " + rescue + " failed too: " + rescue_err);
    }
    refuse_if(err);
    LOG0("saved checkpoint %s/%s\n", dir.c_str(), checkpoint_step_name(step).c_str());
}

bool exit_interval_reached(const TrainOptions& o, int step) {
    return o.exit_interval > 0 && step % o.exit_interval == 0 && step < o.steps;
}

bool checkpoint_due(const TrainOptions& o, int step) {
    return !o.checkpoint_dir.empty() && ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps);
}

void save_checkpoint(Run& run, int step) {
    if (run.opt.checkpoint_dir.empty()) return;
    settle_steps(run);  // (post-validation: the weights saved are validated ones)
    if (g_rank == 0) interrupt_saving(step);  // what an interrupt would leave (train/interrupt.h)
    save_checkpoint_pair(run.opt.checkpoint_dir, run.model, run.state, run.train, step, run.skipped_steps);
    if (g_rank == 0) interrupt_saved(step);
}

void stop_at_exit_interval(Run& run, int step) {
    TrainOptions& opt = run.opt;
    LOG0("exit: --exit-interval %d reached at step %d; continue with --resume %s\n", opt.exit_interval, step,
         opt.checkpoint_dir.c_str());  // (a checkpoint directory is required: train/options.cu)
    opt.steps = step;  // end here: the final validation, --save and --sample still run
}

// The validation loss over the first --val-batches batches, printed and logged; *best keeps the lowest.
// Nothing without validation data or with --val-batches 0. p keeps the lowest loss and the activation peak.
void validate(Run& run, Progress& p, int step) {
    settle_steps(run);
    float* best = &p.best_val;
    size_t* peak = &p.val_peak;
    const TrainOptions& opt = run.opt;
    if (!run.have_val || opt.val_batches == 0) return;
    TraceScope span(TraceThread::Compute, "eval", "validation", trace_recording() ? "\"step\":" + std::to_string(step) : "");
    run.alloc->reset_peak();
    run.val.set_state(DataLoaderState{});
    double sum = 0;
    int nb = (int)std::min<int64_t>(opt.val_batches, run.val.num_batches);
    for (int i = 0; i < nb; i++) {
        next_batch_or_stop(run.val);
        sum += eval_loss(run.model, run.val.inputs.data(), run.val.targets.data(), run.val.B_local, opt.seq);
    }
    float vl = (float)(sum / nb);
    LOG0("step %5d | val loss %.4f\n", step, vl);
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"val_loss\":%.6f}\n", step, vl), fflush(run.logf);
    if (vl >= 0) *best = std::min(*best, vl);
    *peak = std::max(*peak, run.alloc->peak_live_bytes());
}

// --hellaswag: the multiple-choice accuracy (model/hellaswag.cu), printed and logged. Each DP rank scores
// its share of the examples, a quarter of its batch's rows' worth of examples per forward pass.
void evaluate_hellaswag(Run& run, int step) {
    if (run.hellaswag.empty()) return;
    settle_steps(run);
    TraceScope span(TraceThread::Compute, "eval", "hellaswag", trace_recording() ? "\"step\":" + std::to_string(step) : "");
    const int per_forward = std::max(1, run.train.B_local / kEvalCompletions);
    EvalScore s = hellaswag_evaluate(run.model, run.hellaswag, run.opt.seq, per_forward);
    LOG0("step %5d | hellaswag %d/%d = %.4f\n", step, s.correct, s.total, s.accuracy());
    if (run.logf) fprintf(run.logf, "{\"step\":%d,\"hellaswag_acc\":%.6f}\n", step, s.accuracy()), fflush(run.logf);
}

// ---- the end of a run ------------------------------------------------------------------------------------
// --save: one consolidated llm.c file (fp32), or a Hugging Face directory in the training dtype
// (model/model_file.h), gathered from every rank, written by rank 0. Its
// directory was checked at start (check_paths); if the write fails all the same (a full disk, a directory
// removed since), the trained model goes to a rescue file that the message names, and the run stops with an
// error (collective, so no rank is left waiting and MPI prints no abort report).
static void save_final_model(Run& run) {
    const std::string& path = run.opt.save;
    std::vector<float> full;
    gpt_gather_full(run.model, full);
    std::string err;
    const bool bf16 = run.dtype == DType::BF16;  // the Hugging Face format is written in the training dtype
    if (g_rank == 0 && !model_try_write(path, run.cfg, full.data(), bf16, err)) {
        // A Hugging Face directory ("out/") is rescued as a directory of the same kind ("rescued_<pid>_out/").
        const bool dir = !path.empty() && path.back() == '/';
        const std::string rescue = dir ? rescue_path(path.substr(0, path.find_last_not_of('/') + 1)) + "/" : rescue_path(path);
        std::string rescue_err;
        const bool rescued = model_try_write(rescue, run.cfg, full.data(), bf16, rescue_err);
        err = "--save " + path + ": the trained model could not be written (" + err + "); " +
              (rescued ? "it was written to " + rescue + " instead" : "the rescue file " + rescue + " failed too: " + rescue_err);
    }
    refuse_if(err);
    LOG0("saved %s (%s)\n", path.c_str(), model_format_name(path, bf16).c_str());
}

// The done line: the steps this run ran (after --resume, from the checkpoint's step on), the losses of its
// first and last steps with their numbers, the best validation loss, and the activation peaks of a training
// step and of validation apart. Nothing is printed that was not measured.
static std::string summary_line(const Run& run, const Progress& p, double seconds) {
    char b[256];
    std::string s = "done: ";
    if (run.start_step > 1) s += "resumed at step " + std::to_string(run.start_step - 1) + ": ";
    if (p.steps_run == 0) {
        s += run.start_step > 1 ? "no steps left to run (the run had reached --steps " + std::to_string(run.opt.steps) + ")"
                                : "no steps run (--steps " + std::to_string(run.opt.steps) + ")";
    } else {
        snprintf(b, sizeof b, "%d steps in %.1f s", p.steps_run, seconds);
        s += b;
        if (p.first_step > 0) {
            snprintf(b, sizeof b, " | loss %.4f (step %d) -> %.4f (step %d)", p.first_loss, p.first_step, p.last_loss, p.last_step);
            s += b;
        } else {
            s += " | no step had a finite loss";
        }
    }
    if (std::isfinite(p.best_val)) snprintf(b, sizeof b, " | best val %.4f", p.best_val), s += b;
    std::string peaks;
    if (p.steps_run > 0) snprintf(b, sizeof b, "training step %.2f MB", p.train_peak / 1e6), peaks += b;
    if (p.val_peak > 0) snprintf(b, sizeof b, "%svalidation %.2f MB", peaks.empty() ? "" : ", ", p.val_peak / 1e6), peaks += b;
    if (!peaks.empty()) s += " | activation peak: " + peaks + " (allocator, this rank)";
    return s;
}

// --trace: recording stops (if the window reached the end), every rank's events go to rank 0 (layers/trace.h),
// which writes the file whole or not at all (data/atomic_file.h). Collective.
static void write_trace(Run& run, const Progress& p) {
    const TrainOptions& opt = run.opt;
    if (opt.trace.empty()) return;
    trace_stop(MPI_COMM_WORLD);
    const ProcessGrid& g = run.grid;
    char other[640];
    snprintf(other, sizeof other,
             "\"program\":\"mini-megatron train_gpt\",\"steps\":[%d,%d],\"world\":%d,\"tp\":%d,\"cp\":%d,\"dp\":%d,\"pp\":%d,"
             "\"sp\":%s,\"ranks_per_stage\":%d,\"schedule\":\"%s\",\"micro_batches\":%d,\"chunks\":%d,\"device\":\"%s\","
             "\"comm\":\"%s\",\"ranks\":\"pid = world rank; stage = rank / ranks_per_stage (tp fastest, then cp, dp)\"",
             opt.trace_first, opt.trace_last, g.world, g.tp, g.cp, g.dp, g.pp, g.sp ? "true" : "false", ranks_per_stage(g),
             pipe_schedule_name(run.schedule), run.micro_batches, run.chunks, device_name(run.device),
             run.backend == CommBackend::NCCL ? "nccl" : "mpi");
    std::string doc, err;
    if (trace_gather_json(MPI_COMM_WORLD, other, &doc, &err) && g_rank == 0) {
        AtomicFile f;
        if (f.open(opt.trace, err)) f.write(doc.data(), doc.size()), f.commit(err);
    }
    refuse_if(err.empty() ? "" : "--trace " + opt.trace + ": " + err);
    const int last_run = run.start_step + p.steps_run - 1;  // the loop may have stopped early (--exit-interval)
    if (last_run < opt.trace_first)
        LOG0("trace: no step of --trace-steps %d:%d ran (the last was %d); %s holds no events\n", opt.trace_first, opt.trace_last,
             last_run, opt.trace.c_str());
    else
        LOG0("trace: steps %d to %d written to %s (open it in ui.perfetto.dev or chrome://tracing; build/draw_pipeline "
             "draws it as a PNG)\n", opt.trace_first, std::min(opt.trace_last, last_run), opt.trace.c_str());
}

// --trace (written first, before --save and --sample, which it does not record), --save (model/checkpoint.cu:
// one consolidated llm.c file), --sample (model/generate.cu), the TP group's communication in the last step,
// and the done line. t_start: when training began.
void finish_run(Run& run, Progress& p) {
    const TrainOptions& opt = run.opt;
    if (opt.post_validation) {  // the last step, validated (and its line); the rollbacks
        settle_steps(run);
        for (const StepStats& v : run.validated) nan_policy_one(run, p, v), log_one(run, p, v, learning_rate(opt, v.step));
        run.validated.clear();
        LOG0("post-validation: %d step%s rolled back\n", run.pv.rollbacks, run.pv.rollbacks == 1 ? "" : "s");
    }
    write_trace(run, p);
    if (!opt.save.empty()) save_final_model(run);
    if (opt.sample > 0) {
        std::vector<int> toks = run.text.encode(opt.prompt.empty() ? std::string("\n") : opt.prompt);
        size_t n0 = toks.size();
        int window = std::min(opt.seq, run.cfg.max_seq);
        generate(run.model, toks, opt.sample, window, opt.temperature, opt.top_k, opt.seed + 1);
        std::vector<int> out(toks.begin() + n0, toks.end());
        LOG0("\n---- sample (%d tokens, temperature %.2f, top-k %d) ----\n%s%s\n----\n", opt.sample, opt.temperature, opt.top_k,
             opt.prompt.c_str(), run.text.decode(out).c_str());
    }
    double total = now_s() - p.t_start;
    // Communication of the TP group in the last step (parallel/collectives.h ring model): under SP the all-gathers and
    // reduce-scatters move what TP's all-reduces move; the backward re-gathers of saved shards come on top.
    const CommCounters& cc = p.step_comm;
    if (run.grid.tp > 1)
        LOG0("TP communication per step (bytes sent per rank): all-reduce %llu calls %.2f MB | all-gather %llu calls %.2f MB "
             "(of which backward re-gathers %.2f MB) | reduce-scatter %llu calls %.2f MB\n",
             (unsigned long long)cc.calls[kAllReduce], cc.bytes[kAllReduce] / 1e6, (unsigned long long)cc.calls[kAllGather],
             cc.bytes[kAllGather] / 1e6, cc.regather_bytes / 1e6, (unsigned long long)cc.calls[kReduceScatter],
             cc.bytes[kReduceScatter] / 1e6);
    report_bubble(run);
    report_context_parallel(run, p);
    const std::string dp_line = distributed_optimizer_comm_line(run.model);  // parallel/distributed_optimizer.h
    if (!dp_line.empty()) LOG0("%s\n", dp_line.c_str());
    const std::string zero_line = zero_comm_line(run.model.sharded);  // parallel/zero_sharding.h
    if (!zero_line.empty()) LOG0("%s\n", zero_line.c_str());
    if (p.op_times.steps > 0) LOG0("%s", op_times_table(p.op_times).c_str());
    LOG0("%s\n", summary_line(run, p, total).c_str());
}
