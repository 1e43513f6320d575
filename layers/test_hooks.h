// test_hooks.h — faults and switches that only tests turn on; production code never sets them, and with the
// defaults they do nothing. They live here, in one struct, so that no production interface carries a
// test-only argument. On the ground floor (layers/), so that every part of the trainer may read them without
// including what lies above it: model/gpt.cu, model/train_step.cu, model/pipeline_step.cu and
// parallel/context_parallel.cu read them; the trainer sets the NaN step and the stopped stage from its hidden
// flags (train/run.cu).
#pragma once

struct TestHooks {
    // Negative control: leave out the SP gradient sum over the TP group (sync_gradients), to show that the
    // equivalence with a single-rank run then fails (test_equivalence_sp_without_grad_sum).
    bool skip_sequence_parallel_sum = false;
    // Numerical-fault injection: at this optimizer step (0: never), after the gradient synchronization, one
    // element of the last layer's attention-projection gradient becomes NaN (the trainer's hidden flag
    // --inject-nan-at-step; test/test_nan.sh).
    int inject_nan_at_step = 0;
    // Negative control: drop the 1/M of gradient accumulation (gpt_backward), to show that the gradients of
    // M micro-batches then come out M times too large (test_equivalence_micro_without_scale).
    bool skip_microbatch_scale = false;
    // Negative control: leave out the tied word embedding's gradient sum over the first and last pipeline
    // stage (sync_gradients), to show that the pipeline's equivalence then fails.
    bool skip_tied_embedding_sum = false;
    // Negative control: run the pipeline's point-to-point messages in the order they had before grouping
    // (each receive alone before its op, each send alone after it; model/pipeline_step.cu), to show that
    // under NCCL's rules (--comm mpi-strict) it deadlocks and the timeout names who waits for what
    // (test_equivalence's --ungrouped-p2p).
    bool ungrouped_p2p = false;
    // Negative control: the pipeline's exchanges as they were before the posted ones (model/pipeline_step.cu:
    // whole units, each exchange waiting for its sends too), to show that the bubble test then finds ZB-H2
    // stalled: its replayed record idles beyond the formula (test_pipeline_bubble --blocking-p2p).
    bool blocking_p2p = false;
    // Negative control: under a zero-bubble schedule the executor runs each W right after its B (a W lag of 0 on
    // every stage: model/pipeline_step.cu, posted exchanges), an order other than the schedule's, to show that the
    // bubble test's replay then idles beyond the formula (test_pipeline_bubble --weight-unlagged).
    bool weight_unlagged = false;
    // Negative control: on this pipeline stage the executor runs one W a slot late, after the op that follows it
    // in the schedule (the last W that comes right before a B; model/pipeline_step.cu, posted exchanges), to show
    // that the bubble test's replay then idles beyond the formula (test_pipeline_bubble --delay-weight S). -1: never.
    int delay_weight_stage = -1;
    // Fault injection: pipeline stage stop_stage stops itself (SIGSTOP) in its stop_stage_at_step-th step
    // (model/pipeline_step.cu), to show that the other stages stop within --comm-timeout, naming it (the
    // trainer's hidden flag --stop-stage-at S:N; test/model/pipeline_peer_stopped.sh). -1: never.
    int stop_stage = -1, stop_stage_at_step = 0;
    // Negative control: ring attention's compute stream does not wait for the received K|V block
    // (parallel/context_parallel.cu), to show that the emulated GPU then fails the CP equivalence.
    bool skip_cp_ring_wait = false;
    // Negative control: under a zero-bubble schedule, micro-batch 0's W pass throws its put-off weight gradients
    // away (model/pipeline_step.cu), to show that the equivalence then fails (test_equivalence_pp2_zbh1_without_w).
    bool drop_first_weight_pass = false;
    // Negative control: activation offloading's copy stream does not wait for the layer's forward before it
    // copies the saved tensors out (recompute/activation_offload.cu), to show that the emulated GPU then
    // brings back other bytes than the layer saved (test_activation_offload, emu_offload_without_wait_fails).
    bool skip_offload_wait = false;
};
inline TestHooks g_test_hooks;  // C++17 inline: one instance in the whole program
