// options.cu — command-line parsing for train_gpt (see options.h).
#include "options.h"

#include "../model/pipeline_timeline.h"

#include <mpi.h>
#include <cctype>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "did_you_mean.h"

// The usage text: every flag with its default. It is also the list of flags an unknown one is compared with
// ("did you mean"), so a flag that --help does not show is never suggested (the hidden test flags).
static const char* train_usage() {
    return
        "usage: mpirun -np N build/train_gpt [options]\n"
        "\n"
        "Device and numerics\n"
        "  --device auto|cpu|cuda      where to run (default auto: cuda when every local rank has its own GPU,\n"
        "                              else cpu)\n"
        "  --dtype fp32|bf16           activation / compute-weight storage (default fp32; master weights,\n"
        "                              gradients, AdamW: fp32 always)\n"
        "  --comm auto|nccl|mpi|mpi-strict   collectives backend (default auto: nccl on cuda, mpi on cpu; several\n"
        "                              ranks on one GPU need --comm mpi; mpi-strict: MPI with NCCL's point-to-point\n"
        "                              rules, so that a CPU run fails where NCCL would hang)\n"
        "  --comm-timeout S            a collective or pipeline exchange that waits longer than S seconds stops\n"
        "                              every rank, naming the operation and the peer (default 300)\n"
        "Model\n"
        "  --init PATH                 start from an llm.c checkpoint (version 3 fp32 or 5 bf16), a checkpoint\n"
        "                              directory (DIR: its latest step's model.bin, weights only; DIR/latest and\n"
        "                              DIR/step_N too), or a Hugging Face GPT-2: a directory with model.safetensors\n"
        "                              + config.json, or a .safetensors file with config.json beside it (default:\n"
        "                              none, a fresh model of the shape below)\n"
        "  --layers L --heads A --hidden H --vocab V --max-seq T   a fresh model (default 4/4/128/257/256; --max-seq:\n"
        "                              the longest --seq the model takes)\n"
        "  --padded-vocab VP           stored vocabulary rows (default: V rounded up to a multiple of 128)\n"
        "  --seed N                    initialization and dropout seed (default 1337)\n"
        "Parallelism and recomputation (paper: Korthikanti et al. 2022)\n"
        "  --tp N                      tensor-parallel size (default 1); data-parallel size = ranks /\n"
        "                              (tp · cp · pp)\n"
        "  --sp                        sequence parallelism (default off; needs --tp > 1, --seq divisible by --tp)\n"
        "  --cp N                      context-parallel size (default 1; alias --context-parallel-size): each rank\n"
        "                              holds 2 of 2N chunks of every sequence through attention too (ring attention;\n"
        "                              needs flash attention, the default with --cp > 1; --seq divisible by 2N)\n"
        "  --pp N                      pipeline-parallel size (default 1): N stages of L/N layers (alias\n"
        "                              --pipeline-model-parallel-size); ranks = tp · cp · dp · pp, tp fastest\n"
        "  --pipeline-schedule 1f1b|afab|interleaved|zb-h1|zb-h2|zb-v   the order of forwards and backwards\n"
        "                              (default 1f1b; interleaved needs --num-layers-per-virtual-pipeline-stage;\n"
        "                              zb-*: zero bubble, each backward split into B and a later W; zb-v: two\n"
        "                              chunks per stage in a V, stage r holding chunks r and 2pp-1-r)\n"
        "  --optimizer-post-validation no synchronization at a step's end (default off): each stage steps its\n"
        "                              optimizer as its gradients are ready; norm, clip and non-finite check arrive\n"
        "                              a step later and a failing step is rolled back and redone (Qi et al. 2024;\n"
        "                              the same weights; needs --pp > 1)\n"
        "  --pipeline-op-times F:B:W   test mode (default off): every pipeline op's work is a timed wait of F, B or\n"
        "                              W ms (a backward without W: B + W); messages, gradient sync and optimizer\n"
        "                              run for real; the run ends with each stage's idle share next to the formula's\n"
        "                              (needs --pp > 1; not with --zero 2|3, whose buckets only layers fill)\n"
        "  --num-layers-per-virtual-pipeline-stage k   interleaving: (L/pp)/k model chunks per stage (default: not\n"
        "                              interleaved)\n"
        "  --recompute none|selective|full   activation recomputation policy (default none; alias\n"
        "                              --recompute-granularity)\n"
        "  --attention unfused|flash   core attention (alias --attention-backend; default unfused, the paper's\n"
        "                              form, whose s×s tensors Table 2 counts). flash: tiled, keeps one fp32\n"
        "                              log-sum-exp per query and head instead, the same dropout masks; selective\n"
        "                              recompute then has nothing left to drop (it equals none), full still\n"
        "                              keeps only each layer's input\n"
        "  --use-distributed-optimizer fp32 master weights and AdamW moments sharded over the data-parallel ranks\n"
        "                              (default off; ZeRO-1; Megatron's name; --zero 1 is the same): gradients\n"
        "                              reduce-scattered, updated weights all-gathered; nothing changes at dp 1\n"
        "  --zero 0|1|2|3              what is sharded over the data- (and context-) parallel ranks (default 0):\n"
        "                              nothing, the optimizer states (1), the gradients too (2: reduce-scattered per\n"
        "                              layer as the backward produces them), the weights too (3: gathered per layer,\n"
        "                              the next one prefetched); Megatron's --data-parallel-sharding-strategy\n"
        "                              no_shard|optim|optim_grads|optim_grads_params is the same\n"
        "  --offload-activations       saved activations to host memory after a layer's forward, back before its\n"
        "                              backward (default off; Megatron's --cpu-offloading): each model chunk's layers\n"
        "                              but the last\n"
        "  --cpu-offloading-num-layers N   with --cpu-offloading: only each model chunk's first N layers (alias\n"
        "                              --offload-layers; default: all but the last)\n"
        "  --offload-beyond-in-flight K|last-stage   instead (default off): every layer of the micro-batches a stage\n"
        "                              holds in flight beyond K; last-stage: beyond the last stage's count (1 under\n"
        "                              1F1B), so the first stage keeps on the GPU what the last one keeps\n"
        "Data\n"
        "  --train FILE --val FILE     llm.c token shards (default: data/generated/default/{train,val}.bin; a file\n"
        "                              given must exist; --val none: no validation); build/prepare_data makes them\n"
        "  --batch B                   global batch: sequences per step over all data-parallel ranks (default 8)\n"
        "  --micro-batch-size b        sequences per forward pass on a data-parallel rank (Megatron's name):\n"
        "                              M = B / (b · dp) micro-batches per step, gradients accumulated; the loss\n"
        "                              and gradients stay those of the whole batch (default b = B / dp, M = 1)\n"
        "  --num-microbatches M        the same, given as M (default 1)\n"
        "  --seq T                     sequence length (default 64; at most the model's --max-seq)\n"
        "  --no-shuffle                read batches in file order (default: shuffled; llm.c's train_gpt2.c shuffles\n"
        "                              the training shards too)\n"
        "Optimization\n"
        "  --steps N                   optimizer steps (default 100; alias --train-iters)\n"
        "  --lr X                      peak learning rate (default 3e-4)\n"
        "  --warmup K                  linear warm-up steps (default 0: none)\n"
        "  --lr-schedule constant|cosine   after the warm-up (default cosine: decays over --steps to F·lr)\n"
        "  --final-lr-frac F           cosine decays to F·lr (default 0.1; llm.c's -q); or --min-lr X (Megatron)\n"
        "  --beta1 --beta2 --eps --weight-decay   AdamW constants (default 0.9 0.95 1e-8 0)\n"
        "  --grad-clip X               clip the global gradient norm (0 disables; default 1)\n"
        "  --dropout P                 hidden and attention dropout (default 0)\n"
        "Evaluation and output\n"
        "  --val-every K               validation before step 1 and every K steps (default 0: only at the end)\n"
        "  --val-batches M             batches of --val per validation (default 4)\n"
        "  --hellaswag FILE            multiple-choice accuracy on llm.c's eval file (HellaSwag), logged as\n"
        "                              hellaswag_acc (default: none); --eval-every K: before step 1 and every K\n"
        "                              steps (default 0: at the end)\n"
        "  --save FILE                 write an llm.c checkpoint (fp32) at the end; --save DIR/ (trailing slash) or\n"
        "                              FILE.safetensors: Hugging Face's model.safetensors + config.json instead, in\n"
        "                              the training dtype, the real vocabulary's rows only (default: none)\n"
        "  --log FILE.jsonl            one JSON object per line (train, val, memory_report) (default: none)\n"
        "  --log-every K               print every K-th step (default 1)\n"
        "  --trace FILE.json           a timeline of a training step for Perfetto or chrome://tracing (Chrome\n"
        "                              Trace Event Format): every rank's schedule ops, exchanges, collectives,\n"
        "                              optimizer and evaluation, on rank 0's clock; build/draw_pipeline draws it\n"
        "                              (default: none)\n"
        "  --trace-steps A:B           the steps it records, A to B inclusive, or A alone (default: the run's\n"
        "                              second step, after warm-up; on a GPU recorded steps run synchronized)\n"
        "  --memory-report             print measured vs formula activation and model-state memory (weights,\n"
        "                              gradients, master weights, moments) after the first step (default off)\n"
        "  --op-times                  after the run, each op's milliseconds per step and matrix-product rate,\n"
        "                              over the steps from the third on (rank 0's ops; on a GPU each op syncs;\n"
        "                              default off)\n"
        "  --sample N                  generate N tokens after training (default 0: none)\n"
        "  --prompt TEXT               the sample's beginning (default: a newline)\n"
        "  --temperature X             sampling temperature (default 1; 0: greedy, the most likely token each time)\n"
        "  --top-k K                   sample among the K most likely tokens (default 0: all)\n"
        "  --tokenizer FILE            llm.c's gpt2_tokenizer.bin, or a directory (or its vocab.json) with Hugging\n"
        "                              Face's vocab.json + merges.txt: GPT-2 BPE for --prompt and --sample (default:\n"
        "                              byte-level); its vocabulary must be the model's\n"
        "Reliability\n"
        "  --checkpoint-dir DIR        write DIR/step_NNNNNNNN/{model.bin,state.bin} atomically, DIR/latest last;\n"
        "                              only the newest complete pair is kept (model.bin is an llm.c file; DIR/lock\n"
        "                              names the run writing there, and a second one is refused; default: none)\n"
        "  --save-every K              save every K steps and at the end (needs --checkpoint-dir or --resume;\n"
        "                              default 0: only at the end)\n"
        "  --exit-interval K           stop after a step divisible by K, saving a checkpoint first (time-limited\n"
        "                              jobs; needs --checkpoint-dir; default: never)\n"
        "  --resume DIR                continue exactly where DIR/latest left off (same flags; saves go to DIR\n"
        "                              unless --checkpoint-dir says otherwise; default: none)\n"
        "  --resume auto               with --checkpoint-dir DIR: continue from DIR/latest when it exists, else start\n"
        "                              (from --init, or from scratch): the same command can be run again and again.\n"
        "                              --resume DIR --init FILE does the same with FILE as the first start\n"
        "  --override-opt_param-scheduler   with --resume: the learning-rate schedule (--lr, --warmup,\n"
        "                              --lr-schedule, --final-lr-frac, --weight-decay, and --steps for cosine) is\n"
        "                              this run's flags', from the resumed step on: how to extend a finished run\n"
        "                              (default: the flags must equal the checkpoint's)\n"
        "  --use-checkpoint-opt_param-scheduler   with --resume: the schedule is the checkpoint's, whatever those\n"
        "                              flags say; a cosine schedule stays at its final rate past its steps\n"
        "                              (default off)\n"
        "  --skip-bad-steps            a NaN/Inf loss or gradient norm skips that step's update (default: stop\n"
        "                              and name the first non-finite gradient tensor)\n"
        "  --help\n"
        "\n"
        "Megatron-LM spellings accepted: --tensor-model-parallel-size, --sequence-parallel,\n"
        "  --recompute-granularity selective|full, --global-batch-size, --seq-length, --num-layers,\n"
        "  --hidden-size, --num-attention-heads, --max-position-embeddings, --train-iters; --flag=value is\n"
        "  --flag value\n";
}

void print_train_usage() { fputs(train_usage(), stdout); }

// Leave before any work: every rank parses the same argv and reaches the same verdict, so each finalizes MPI
// on its own (no collective needed), and mpirun has no "exited improperly" report to add.
[[noreturn]] static void leave(int code) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    if (up && !down) MPI_Finalize();
    exit(code);
}

[[noreturn]] static void bad(bool print, const std::string& msg) {
    if (print) fprintf(stderr, "error: %s (see --help)\n", msg.c_str());
    fflush(stderr);
    leave(2);
}

static long long to_int(bool print, const char* flag, const char* v, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || !end || *end || end == v) bad(print, std::string(flag) + " expects an integer, got '" + v + "'");
    if (x < lo || x > hi)
        bad(print, std::string(flag) + " " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}
// A number in [lo, hi]; `range` is the bounds as the parser's call types them ("[0.1, 1e6]"), for the message.
static float to_float(bool print, const char* flag, const char* v, double lo, double hi, const char* range) {
    char* end = nullptr;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || !end || *end || end == v) bad(print, std::string(flag) + " expects a number, got '" + v + "'");
    if (!(x >= lo && x <= hi)) bad(print, std::string(flag) + " " + v + " is out of range " + range);
    return (float)x;
}
// to_float(print, f, v, IN(0.1, 1e6)): the bounds, and the same bounds as text.
#define IN(lo, hi) lo, hi, "[" #lo ", " #hi "]"
static std::string one_of(bool print, const char* flag, const char* v, std::initializer_list<const char*> ok) {
    for (const char* o : ok)
        if (!strcmp(v, o)) return v;
    std::string list;
    for (const char* o : ok) list += std::string(list.empty() ? "" : "|") + o;
    bad(print, std::string(flag) + " must be " + list + ", got '" + v + "'");
}

// A flag --help shows (the hidden test flags are not).
static bool shown_flag(const std::string& a) {
    const std::string u = train_usage();
    for (size_t i = u.find(a); i != std::string::npos; i = u.find(a, i + 1)) {
        const char after = i + a.size() < u.size() ? u[i + a.size()] : ' ';
        if ((i == 0 || u[i - 1] == ' ') && !isalnum((unsigned char)after) && after != '-' && after != '_') return true;
    }
    return false;
}

TrainOptions parse_train_options(int argc, char** argv, bool print) {
    TrainOptions o;
    const int big = 1 << 30;
    float min_lr = -1;  // --min-lr: an absolute floor, turned into the fraction once --lr is known
    int zero_stage = -1;  // --zero N as given (-1: not given), checked against --use-distributed-optimizer
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], inline_value;
        bool has_inline = false;  // --flag=value
        const size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_inline = true;
        }
        auto flag = [&](std::initializer_list<const char*> names) {
            for (const char* n : names)
                if (a == n) return o.given.insert(*names.begin()), true;  // recorded by its first spelling
            return false;
        };
        // flags without a value (a switch given "=value" is refused rather than read as on)
        auto switch_flag = [&](std::initializer_list<const char*> names) {
            if (!flag(names)) return false;
            if (has_inline) bad(print, a + " takes no value, got '" + a + "=" + inline_value + "'");
            return true;
        };
        if (switch_flag({"--help", "-h"})) { print_train_usage(); fflush(stdout); leave(0); }
        if (switch_flag({"--sp", "--sequence-parallel"})) { o.sp = true; continue; }
        if (switch_flag({"--no-shuffle"})) { o.shuffle = false; continue; }
        if (switch_flag({"--memory-report"})) { o.memory_report = true; continue; }
        if (switch_flag({"--op-times"})) { o.op_times = true; continue; }
        if (switch_flag({"--skip-bad-steps"})) { o.skip_bad_steps = true; continue; }
        if (switch_flag({"--use-distributed-optimizer"})) { o.distributed_optimizer = true; continue; }
        if (switch_flag({"--optimizer-post-validation"})) { o.post_validation = true; continue; }
        if (switch_flag({"--override-opt_param-scheduler"})) { o.override_schedule = true; continue; }
        if (switch_flag({"--use-checkpoint-opt_param-scheduler"})) { o.checkpoint_schedule = true; continue; }
        if (switch_flag({"--offload-activations", "--cpu-offloading"})) { o.offload = o.offload.empty() ? "layers" : o.offload; continue; }
        if (!has_inline && i + 1 >= argc)
            bad(print, shown_flag(a) ? a + " needs a value" : "unknown flag " + a + did_you_mean(a, train_usage()));
        const char* v = has_inline ? inline_value.c_str() : argv[++i];
        const char* f = a.c_str();
        if (flag({"--device"})) o.device = one_of(print, f, v, {"auto", "cpu", "cuda"});
        else if (flag({"--dtype"})) o.dtype = one_of(print, f, v, {"fp32", "bf16"});
        else if (flag({"--comm"})) o.comm = one_of(print, f, v, {"auto", "nccl", "mpi", "mpi-strict"});
        else if (flag({"--comm-timeout"})) o.comm_timeout = to_float(print, f, v, IN(0.1, 1e6));
        else if (flag({"--init"})) o.init = v;
        else if (flag({"--layers", "--num-layers"})) o.layers = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--heads", "--num-attention-heads"})) o.heads = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--hidden", "--hidden-size"})) o.hidden = (int)to_int(print, f, v, 1, 1 << 20);
        else if (flag({"--vocab"})) o.vocab = (int)to_int(print, f, v, 2, 65536);
        else if (flag({"--padded-vocab"})) o.padded_vocab = (int)to_int(print, f, v, 2, 1 << 20);
        else if (flag({"--max-seq", "--max-position-embeddings"})) o.max_seq = (int)to_int(print, f, v, 1, 1 << 20);
        else if (flag({"--seed"})) o.seed = (uint64_t)to_int(print, f, v, 0, (1LL << 62));
        else if (flag({"--tp", "--tensor-model-parallel-size"})) o.tp = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--pp", "--pipeline-model-parallel-size"})) o.pp = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--cp", "--context-parallel-size"})) o.cp = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--pipeline-schedule"}))
            o.pipeline_schedule = one_of(print, f, v, {"1f1b", "afab", "interleaved", "zb-h1", "zb-h2", "zb-v"});
        else if (flag({"--pipeline-op-times"})) o.pipeline_op_times = v;
        else if (flag({"--num-layers-per-virtual-pipeline-stage"})) o.layers_per_virtual_stage = (int)to_int(print, f, v, 1, 4096);
        else if (flag({"--recompute", "--recompute-granularity"})) o.recompute = one_of(print, f, v, {"none", "selective", "full"});
        else if (flag({"--attention", "--attention-backend"})) o.attention = one_of(print, f, v, {"unfused", "flash"});
        else if (flag({"--train"})) o.train_file = v;
        else if (flag({"--val"})) o.val_file = v;
        else if (flag({"--batch", "--global-batch-size"})) o.batch = (int)to_int(print, f, v, 1, big);
        else if (flag({"--micro-batch-size"})) o.micro_batch = (int)to_int(print, f, v, 1, big);
        else if (flag({"--num-microbatches"})) o.num_microbatches = (int)to_int(print, f, v, 1, big);
        else if (flag({"--seq", "--seq-length"})) o.seq = (int)to_int(print, f, v, 1, 1 << 20);
        else if (flag({"--steps", "--train-iters"})) o.steps = (int)to_int(print, f, v, 0, big);
        else if (flag({"--lr"})) o.lr = to_float(print, f, v, IN(0, 10));
        else if (flag({"--final-lr-frac", "-q"})) o.min_lr_frac = to_float(print, f, v, IN(0, 1));
        else if (flag({"--min-lr"})) min_lr = to_float(print, f, v, IN(0, 10));
        else if (flag({"--warmup"})) o.warmup = (int)to_int(print, f, v, 0, big);
        else if (flag({"--lr-schedule"})) o.lr_schedule = one_of(print, f, v, {"constant", "cosine"});
        else if (flag({"--beta1"})) o.beta1 = to_float(print, f, v, IN(0, 0.999999));
        else if (flag({"--beta2"})) o.beta2 = to_float(print, f, v, IN(0, 0.999999));
        else if (flag({"--eps"})) o.eps = to_float(print, f, v, IN(0, 1));
        else if (flag({"--weight-decay"})) o.weight_decay = to_float(print, f, v, IN(0, 10));
        else if (flag({"--grad-clip"})) o.grad_clip = to_float(print, f, v, IN(0, 1e9));
        else if (flag({"--dropout"})) o.dropout = to_float(print, f, v, IN(0, 0.95));
        else if (flag({"--val-every"})) o.val_every = (int)to_int(print, f, v, 0, big);
        else if (flag({"--val-batches"})) o.val_batches = (int)to_int(print, f, v, 0, big);
        else if (flag({"--hellaswag"})) o.hellaswag = v;
        else if (flag({"--eval-every"})) o.eval_every = (int)to_int(print, f, v, 0, big);
        else if (flag({"--save"})) o.save = v;
        else if (flag({"--log"})) o.log = v;
        else if (flag({"--log-every"})) o.log_every = (int)to_int(print, f, v, 1, big);
        else if (flag({"--trace"})) o.trace = v;
        else if (flag({"--trace-steps"})) {  // A:B or A
            const char* colon = strchr(v, ':');
            const std::string a = colon ? std::string(v, colon) : std::string(v), b = colon ? std::string(colon + 1) : a;
            auto step_number = [](const std::string& x) {  // -1 unless the whole of x is a number
                char* end = nullptr;
                errno = 0;
                const long long n = strtoll(x.c_str(), &end, 10);
                return errno || end == x.c_str() || *end ? -1LL : n;
            };
            const long long first = step_number(a), last = step_number(b);
            if (first < 1 || last < first || last > big)
                bad(print, std::string("--trace-steps expects FIRST:LAST (steps from 1, FIRST <= LAST) or one STEP, got '") + v + "'");
            o.trace_first = (int)first, o.trace_last = (int)last;
        }
        else if (flag({"--sample"})) o.sample = (int)to_int(print, f, v, 0, 1 << 20);
        else if (flag({"--temperature"})) o.temperature = to_float(print, f, v, IN(0, 100));  // 0: greedy (model/generate.h)
        else if (flag({"--top-k"})) o.top_k = (int)to_int(print, f, v, 0, 1 << 20);
        else if (flag({"--prompt"})) o.prompt = v;
        else if (flag({"--tokenizer"})) o.tokenizer = v;
        else if (flag({"--checkpoint-dir"})) o.checkpoint_dir = v;
        else if (flag({"--save-every"})) o.save_every = (int)to_int(print, f, v, 1, big);
        else if (flag({"--resume"})) o.resume = v;
        else if (flag({"--exit-interval"})) o.exit_interval = (int)to_int(print, f, v, 1, big);
        // ---- ZeRO stages and activation offloading (parallel/zero_sharding.h, recompute/activation_offload.h) ----
        else if (flag({"--zero"})) {
            const int z = (int)to_int(print, f, v, 0, 3);
            if (zero_stage >= 0 && z != zero_stage) bad(print, "--zero " + std::string(v) + " contradicts --zero " + std::to_string(zero_stage) +
                                                                " (or --data-parallel-sharding-strategy): give one stage");
            zero_stage = z;
        } else if (flag({"--data-parallel-sharding-strategy"})) {  // Megatron-FSDP's names for the same stages
            const std::string k = one_of(print, f, v, {"no_shard", "optim", "optim_grads", "optim_grads_params"});
            const int z = k == "no_shard" ? 0 : k == "optim" ? 1 : k == "optim_grads" ? 2 : 3;
            if (zero_stage >= 0 && z != zero_stage) bad(print, a + " " + k + " (ZeRO-" + std::to_string(z) + ") contradicts --zero " +
                                                                std::to_string(zero_stage) + ": give one stage");
            zero_stage = z;
        } else if (flag({"--cpu-offloading-num-layers", "--offload-layers"})) {  // how many: --cpu-offloading switches it on
            o.offload_layers = (int)to_int(print, f, v, 0, 4096);
        } else if (flag({"--offload-beyond-in-flight"})) {
            o.offload_beyond = strcmp(v, "last-stage") ? (int)to_int(print, f, v, 0, big) : -1;
            o.offload = "in-flight";
        }
        else if (flag({"--inject-nan-at-step"})) o.inject_nan_at_step = (int)to_int(print, f, v, 1, big);
        else if (flag({"--stop-stage-at"})) {  // tests (hidden): S:N, layers/test_hooks.h
            char tail = 0;
            if (sscanf(v, "%d:%d%c", &o.stop_stage, &o.stop_stage_at_step, &tail) != 2 || o.stop_stage < 0 || o.stop_stage_at_step < 1)
                bad(print, std::string("--stop-stage-at expects STAGE:STEP (a stage >= 0, a step >= 1), got '") + v + "'");
        }
        else bad(print, "unknown flag " + a + did_you_mean(a, train_usage()));
    }
    if (min_lr >= 0) {
        if (min_lr > o.lr) bad(print, "--min-lr " + std::to_string(min_lr) + " is above --lr " + std::to_string(o.lr));
        o.min_lr_frac = o.lr > 0 ? min_lr / o.lr : 0.f;
    }
    // Combinations that cannot mean anything.
    if (zero_stage == 0 && o.distributed_optimizer)
        bad(print, "--zero 0 contradicts --use-distributed-optimizer (the same as --zero 1): give one of them");
    if (zero_stage == 1) o.distributed_optimizer = true;
    o.zero_stage = std::max(zero_stage, o.distributed_optimizer ? 1 : 0);  // ZeRO-2/3 shard the optimizer too
    // Whose learning-rate schedule a resumed run follows (Megatron-LM's two flags; train/run.cu applies them).
    if (o.override_schedule && o.checkpoint_schedule)
        bad(print, "--override-opt_param-scheduler (this run's schedule) contradicts --use-checkpoint-opt_param-scheduler "
                   "(the checkpoint's): give one of them");
    if ((o.override_schedule || o.checkpoint_schedule) && o.resume.empty())
        bad(print, std::string(o.override_schedule ? "--override-opt_param-scheduler" : "--use-checkpoint-opt_param-scheduler") +
                   " goes with --resume DIR: it says whose learning-rate schedule a resumed run follows");
    if (o.was_given("--cpu-offloading-num-layers") && o.was_given("--offload-beyond-in-flight"))
        bad(print, "--cpu-offloading-num-layers and --offload-beyond-in-flight are two offloading policies: give one");
    // As in Megatron-LM, the count says how many layers --cpu-offloading moves; alone it would move none there.
    if (o.was_given("--cpu-offloading-num-layers") && !o.was_given("--offload-activations"))
        bad(print, "--cpu-offloading-num-layers " + std::to_string(o.offload_layers) + " says how many layers offloading moves, but "
                   "offloading is off: add --cpu-offloading (or --offload-activations) to switch it on");
    if (o.resume == "auto" && o.checkpoint_dir.empty())
        bad(print, "--resume auto needs --checkpoint-dir DIR (where to look for a checkpoint and to save)");
    if (o.resume != "auto" && !o.resume.empty() && !o.checkpoint_dir.empty() && o.checkpoint_dir != o.resume && !o.init.empty())
        bad(print, "--resume " + o.resume + " with --init and another --checkpoint-dir " + o.checkpoint_dir +
                   ": a restartable job resumes from and saves to one directory");
    o.resume_if_present = o.resume == "auto" || (!o.resume.empty() && !o.init.empty());
    if (o.resume == "auto") o.resume = o.checkpoint_dir;
    if (o.checkpoint_dir.empty()) o.checkpoint_dir = o.resume;  // a resumed run keeps saving where it was
    if (o.save_every > 0 && o.checkpoint_dir.empty())
        bad(print, "--save-every " + std::to_string(o.save_every) + " needs --checkpoint-dir DIR (where to save)");
    // A job that stops at --exit-interval must find its work again: without a directory nothing would be saved.
    if (o.exit_interval > 0 && o.checkpoint_dir.empty())
        bad(print, "--exit-interval " + std::to_string(o.exit_interval) + " needs --checkpoint-dir DIR: it stops the run after "
                   "saving a checkpoint there, which the next job continues with --resume DIR (or --resume auto)");
    if (o.checkpoint_dir.empty() == false && o.checkpoint_dir == o.save)
        bad(print, "--save " + o.save + " is the --checkpoint-dir too: --save writes one file, the checkpoint dir a directory");
    if (!o.log.empty() && (o.log == o.save || o.log == o.checkpoint_dir))
        bad(print, "--log " + o.log + " is also the --" + (o.log == o.save ? "save file" : "checkpoint-dir") + ": give each its own path");
    if (!o.trace.empty() && (o.trace == o.save || o.trace == o.checkpoint_dir || o.trace == o.log))
        bad(print, "--trace " + o.trace + " is also the --" + (o.trace == o.save ? "save file" : o.trace == o.log ? "log file" : "checkpoint-dir") +
                   ": give each its own path");
    if (o.trace_first > 0 && o.trace.empty())
        bad(print, "--trace-steps needs --trace FILE.json (where to write the timeline)");
    if (o.trace_last > o.steps)
        bad(print, "--trace-steps " + std::to_string(o.trace_first) + ":" + std::to_string(o.trace_last) + " goes beyond --steps " +
                   std::to_string(o.steps) + ": record steps that run");
    // An output over an input would destroy it (--save over --init is allowed: the trained model replaces it).
    for (const auto& out : {std::make_pair("--log", &o.log), std::make_pair("--save", &o.save), std::make_pair("--trace", &o.trace)})
        for (const auto& in : {std::make_pair("--train", &o.train_file), std::make_pair("--val", &o.val_file),
                               std::make_pair("--tokenizer", &o.tokenizer), std::make_pair("--hellaswag", &o.hellaswag),
                               std::make_pair("--init", &o.init)})
            if (!out.second->empty() && *out.second == *in.second && !(out.first == std::string("--save") && in.first == std::string("--init")))
                bad(print, std::string(out.first) + " " + *out.second + " is the " + in.first + " file: the run would overwrite its input");
    // Ring attention merges blocks of keys by their log-sum-exp: the flash path's online softmax. The unfused
    // path materialises the whole s×s scores of a rank's queries, which is exactly what CP avoids.
    if (o.cp > 1 && !o.was_given("--attention")) o.attention = "flash";
    if (o.cp > 1 && o.attention == "unfused")
        bad(print, "--cp " + std::to_string(o.cp) + " needs --attention flash: ring attention merges the blocks of keys "
                   "that arrive from the other ranks by their log-sum-exp (flash attention's online softmax); the unfused "
                   "path would need every rank's keys at once");
    if (o.val_file == "none" && o.val_every > 0)
        bad(print, "--val-every " + std::to_string(o.val_every) + " with --val none: there is no validation data to evaluate");
    // The pipeline schedule and its model chunks, as far as the flags alone decide (the layer count, from the
    // flags or a checkpoint, and M are checked by train/run.cu's pipeline_layout). Giving
    // --num-layers-per-virtual-pipeline-stage alone means interleaved, as in Megatron-LM.
    if (o.layers_per_virtual_stage > 0 && !o.was_given("--pipeline-schedule")) o.pipeline_schedule = "interleaved";
    if (o.pipeline_schedule == "interleaved" && o.layers_per_virtual_stage == 0)
        bad(print, "--pipeline-schedule interleaved needs --num-layers-per-virtual-pipeline-stage k (layers per model chunk)");
    if (o.pipeline_schedule == "interleaved" && o.pp == 1)
        bad(print, "the interleaved schedule needs --pp > 1 (it interleaves model chunks across pipeline stages)");
    if (o.pipeline_schedule.rfind("zb-", 0) == 0 && o.pp == 1)
        bad(print, "--pipeline-schedule " + o.pipeline_schedule + " needs --pp > 1 (its W passes fill the bubble between stages)");
    if (o.pipeline_schedule != "interleaved" && o.layers_per_virtual_stage > 0)
        bad(print, "--num-layers-per-virtual-pipeline-stage goes with the interleaved schedule, not --pipeline-schedule " +
                   o.pipeline_schedule);
    // --pipeline-op-times (model/pipeline_timeline.h): a pipeline test mode.
    PipeOpTimes times;
    if (!o.pipeline_op_times.empty() && !parse_pipe_op_times(o.pipeline_op_times, &times).empty())
        bad(print, parse_pipe_op_times(o.pipeline_op_times, &times));
    if (!o.pipeline_op_times.empty() && o.pp == 1)
        bad(print, "--pipeline-op-times times the ops of a pipeline schedule: it needs --pp > 1");
    // The test mode runs no layer, so no layer's gradient bucket is ever opened, and ZeRO-2/3 reduce-scatter each
    // layer's gradients from its bucket (parallel/zero_sharding.h): the step would stop, a unit without gradient.
    if (!o.pipeline_op_times.empty() && o.zero_stage >= 2)
        bad(print, "--pipeline-op-times with --zero " + std::to_string(o.zero_stage) + ": the test mode runs no layer, and ZeRO-2/3 "
                   "reduce-scatter each layer's gradients as its backward produces them; use --zero 1 (or none) to time a schedule");
    // Post-validation overlaps one stage's optimizer step with the other stages' work (Qi et al. 2024); at one stage
    // there is none to overlap, and a clipped step would be run twice (its update undone and redone with the clip).
    if (o.post_validation && o.pp == 1)
        bad(print, "--optimizer-post-validation needs --pp > 1: it lets each pipeline stage step its optimizer without waiting "
                   "for the others, and one stage has none to wait for (it would only roll back and redo each clipped step)");
    return o;
}
