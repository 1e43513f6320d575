// options.h — the trainer's command line: names, defaults, and validation with clear messages. What is
// checked here needs no file, no world size and no model shape; train/run.cu checks the rest, before any step.
#pragma once
#include <cstdint>
#include <set>
#include <string>

struct TrainOptions {
    // device and numerics
    std::string device = "auto";  // auto | cpu | cuda  (auto: cuda when every local rank has its own GPU)
    std::string dtype = "fp32";   // fp32 | bf16 (activations and compute weights; master weights stay fp32)
    std::string comm = "auto";    // auto | nccl | mpi | mpi-strict  (auto: nccl on cuda, mpi on cpu; mpi-strict: MPI
                                  // with NCCL's point-to-point rules, parallel/point_to_point.h)
    double comm_timeout = 300;    // --comm-timeout S: a collective or exchange waiting longer aborts every rank
    // model: an llm.c checkpoint or a Hugging Face GPT-2 (model/model_file.h), or a fresh model of this shape
    std::string init;
    int layers = 4, heads = 4, hidden = 128, vocab = 257, max_seq = 256, padded_vocab = 0;  // 0: round up to 128
    uint64_t seed = 1337;
    // parallelism and recomputation
    int tp = 1;
    bool sp = false;
    int pp = 1;                              // pipeline stages
    int cp = 1;                              // context parallelism (parallel/context_parallel.h)
    std::string pipeline_schedule = "1f1b";  // 1f1b | afab | interleaved
    int layers_per_virtual_stage = 0;        // interleaving: layers per model chunk (0: not interleaved)
    std::string recompute = "none";  // none | selective | full
    std::string attention = "unfused";  // unfused | flash (layers/attention.h, layers/flash_attention.h)
    bool distributed_optimizer = false;  // ZeRO-1: optimizer states sharded over DP (parallel/distributed_optimizer.h)
    int zero_stage = 0;                  // 0..3: what is sharded over DP × CP (1: = distributed_optimizer;
                                         // 2, 3: parallel/zero_sharding.h)
    // Activation offloading (recompute/activation_offload.h): "" off, "layers" (each model chunk's first
    // offload_layers layers, -1: all but its last), "in-flight" (the micro-batches a stage holds beyond
    // offload_beyond, -1: beyond the last stage's count).
    std::string offload;
    int offload_layers = -1, offload_beyond = -1;
    // data
    std::string train_file = "data/generated/default/train.bin", val_file = "data/generated/default/val.bin";
    int batch = 8, seq = 64;          // global batch (sequences per step), sequence length
    int micro_batch = 0;              // Megatron's --micro-batch-size b: sequences per forward per DP rank
    int num_microbatches = 0;         // M = batch / (b · dp) (gradient accumulation); 0: from b, else 1
    bool shuffle = true;
    // optimization
    int steps = 100;
    float lr = 3e-4f, min_lr_frac = 0.1f;  // cosine decays to min_lr_frac · lr (llm.c's -q; Megatron's --min-lr / lr)
    int warmup = 0;
    std::string lr_schedule = "cosine";  // constant | cosine
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, grad_clip = 1.0f;
    float dropout = 0.0f;
    // evaluation, output
    int val_every = 0, val_batches = 4;
    std::string hellaswag;       // llm.c's eval file (hellaswag_val.bin): multiple-choice accuracy
    int eval_every = 0;          // with --hellaswag: before step 1 and every K steps (0: only at the end)
    std::string save, log;
    bool memory_report = false;
    bool op_times = false;  // --op-times: each op's time per step after the run (train/op_times.h)
    int sample = 0;
    float temperature = 1.0f;
    int top_k = 0;
    std::string prompt;
    std::string tokenizer;       // GPT-2 BPE for --prompt and --sample: llm.c's gpt2_tokenizer.bin or Hugging Face's
                                 // vocab.json + merges.txt (data/hf_tokenizer.h); "" = byte-level
    int log_every = 1;
    // --trace FILE.json: a timeline of steps trace_first..trace_last (layers/trace.h); 0: the default, the run's
    // second step (its only one when it runs one; train/run.cu decides, after a resume is known)
    std::string trace;
    int trace_first = 0, trace_last = 0;
    // reliability: checkpoints for exact resume, numerical faults
    std::string checkpoint_dir;  // DIR/step_NNNNNNNN/{model.bin,state.bin} + DIR/latest (model/train_state.h)
    int save_every = 0;          // save every K steps (and at the end); 0: only at the end when a dir is given
    int exit_interval = 0;       // Megatron's --exit-interval: stop (after saving) once step % K == 0
    std::string resume;          // continue from DIR/latest; "auto": from --checkpoint-dir's latest when there is one
                                 // (with --init FILE too: DIR/latest when it exists, else FILE; train/run.cu)
    bool resume_if_present = false;  // --resume auto, or --resume DIR with --init: DIR/latest only if it exists
    // A resumed run's learning-rate schedule (Megatron-LM's flags): by default the flags must equal the
    // checkpoint's; --override-opt_param-scheduler: this run's flags from the resumed step on (extending a run);
    // --use-checkpoint-opt_param-scheduler: the checkpoint's, whatever the flags say (train/run.cu).
    bool override_schedule = false, checkpoint_schedule = false;
    int lr_decay_steps = 0;      // the cosine decays over steps 1..this (0: --steps); the checkpoint's under
                                 // --use-checkpoint-opt_param-scheduler (no flag sets it)
    bool skip_bad_steps = false; // a non-finite loss or gradient norm skips the update instead of stopping
    int inject_nan_at_step = 0;  // tests (hidden): poison a gradient at this step
    int stop_stage = -1, stop_stage_at_step = 0;  // tests (hidden, --stop-stage-at S:N): stage S stops in step N
    // The flags given on the command line, by their first spelling ("--layers" for --num-layers too): a value
    // given on purpose is checked against what a checkpoint says (a shape), or must exist (a --val file).
    std::set<std::string> given;
    bool was_given(const char* flag) const { return given.count(flag) > 0; }
};

// Parse argv. On --help prints usage and exits 0; on a bad flag or value prints the problem and exits 2.
// Megatron-LM's spellings are accepted as aliases (--tensor-model-parallel-size, --sequence-parallel, ...),
// and so is --flag=value for --flag value. Checks every flag and every combination of flags that needs no
// file, no world size and no model shape (those are checked by train/run.cu, before any step).
TrainOptions parse_train_options(int argc, char** argv, bool print_errors);
void print_train_usage();
