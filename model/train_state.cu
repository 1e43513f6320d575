// train_state.cu — the training-state file and the checkpoint directory (see train_state.h).
#include "train_state.h"
#include "../parallel/pipeline_schedule.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../data/atomic_file.h"
#include "../data/paths.h"
#include "checkpoint.h"

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static const int64_t kHeaderBytes = kTrainStateHeaderInts * (int64_t)sizeof(int64_t);

static int64_t dbits(double x) {
    int64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}
static double bitsd(int64_t b) {
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

// The doubles of the header, in slot order 25..32, with their flag names (for messages).
struct DoubleField { const char* flag; double TrainState::*field; };
static const DoubleField kDoubles[] = {
    {"--lr", &TrainState::lr},           {"--final-lr-frac", &TrainState::min_lr_frac},
    {"--beta1", &TrainState::beta1},     {"--beta2", &TrainState::beta2},
    {"--eps", &TrainState::eps},         {"--weight-decay", &TrainState::weight_decay},
    {"--grad-clip", &TrainState::grad_clip}, {"--dropout", &TrainState::dropout}};

static void make_header(const TrainState& s, uint64_t payload_hash, int64_t h[kTrainStateHeaderInts]) {
    memset(h, 0, sizeof(int64_t) * kTrainStateHeaderInts);
    h[0] = kTrainStateMagic;
    h[1] = kTrainStateVersion;
    h[2] = kHeaderBytes;
    h[3] = s.cfg.max_seq; h[4] = s.cfg.vocab; h[5] = s.cfg.layers;
    h[6] = s.cfg.heads;   h[7] = s.cfg.channels; h[8] = s.cfg.padded_vocab;
    h[9] = param_count(s.cfg);
    h[10] = s.tp; h[11] = s.dp; h[12] = s.sp; h[13] = s.dtype; h[14] = s.recompute;
    h[15] = s.step; h[16] = s.data_epoch; h[17] = s.data_position;
    h[18] = (int64_t)s.seed; h[19] = s.shuffle; h[20] = s.batch; h[21] = s.seq;
    h[22] = s.steps; h[23] = s.warmup; h[24] = s.lr_schedule;
    for (int i = 0; i < 8; i++) h[25 + i] = dbits(s.*kDoubles[i].field);
    h[33] = s.train_tokens; h[34] = (int64_t)s.train_hash; h[35] = (int64_t)s.model_hash;
    h[36] = (int64_t)payload_hash; h[37] = s.skipped_steps;
    h[38] = s.pp; h[39] = s.microbatches; h[40] = s.schedule; h[41] = s.chunks;
    h[42] = s.cp; h[43] = s.attention + 1;  // 0 in files written before they were recorded: cp 1, unfused
}

// Check the header against itself and against the file's length; fill `s` (not the moments).
static bool parse_header(const int64_t* h, int64_t file_bytes, const std::string& name, TrainState& s,
                         uint64_t& payload_hash, std::string& err) {
    auto fail = [&](const std::string& m) { err = "training state " + name + ": " + m; return false; };
    if (file_bytes < kHeaderBytes)
        return fail("truncated: expected at least a header of " + std::to_string(kHeaderBytes) + " bytes, the file has " +
                    std::to_string(file_bytes));
    if (h[0] != kTrainStateMagic)
        return fail("wrong magic " + std::to_string(h[0]) + ", expected " + std::to_string(kTrainStateMagic) +
                    " (\"MMTSTATE\"; not a mini-megatron training state?)");
    if (h[1] != kTrainStateVersion)
        return fail("version " + std::to_string(h[1]) + ", expected " + std::to_string(kTrainStateVersion));
    if (h[2] != kHeaderBytes)
        return fail("header size " + std::to_string(h[2]) + ", expected " + std::to_string(kHeaderBytes));
    for (int i = 3; i <= 8; i++)
        if (h[i] <= 0 || h[i] > (1 << 30)) return fail("model size field " + std::to_string(i) + " = " + std::to_string(h[i]) + " is out of range");
    GPTConfig c;
    c.max_seq = (int)h[3]; c.vocab = (int)h[4]; c.layers = (int)h[5];
    c.heads = (int)h[6];   c.channels = (int)h[7]; c.padded_vocab = (int)h[8];
    std::string bad = validate_config(c);
    if (!bad.empty()) return fail("invalid model configuration: " + bad);
    const int64_t n = param_count(c);
    if (h[9] != n)
        return fail("parameter count " + std::to_string(h[9]) + " disagrees with the configuration's " + std::to_string(n));
    struct { const char* what; int64_t v, lo, hi; } ranges[] = {
        {"tp", h[10], 1, 1 << 20},        {"dp", h[11], 1, 1 << 20},       {"sp", h[12], 0, 1},
        {"dtype", h[13], 0, 1},           {"recompute", h[14], 0, 2},      {"step", h[15], 0, INT32_MAX},
        {"data epoch", h[16], 0, INT64_MAX}, {"data position", h[17], 0, INT64_MAX},
        {"shuffle", h[19], 0, 1},         {"batch", h[20], 1, INT32_MAX},  {"seq", h[21], 1, c.max_seq},
        {"steps", h[22], 0, INT32_MAX},   {"warmup", h[23], 0, INT32_MAX}, {"lr schedule", h[24], 0, 1},
        {"train tokens", h[33], 0, INT64_MAX}, {"skipped steps", h[37], 0, INT32_MAX},
        // pipeline fields: 0 in a state written before pipelines existed (read as 1, 1, 1F1B, 1)
        {"pp", h[38], 0, 1 << 20}, {"micro-batches", h[39], 0, INT32_MAX}, {"schedule", h[40], 0, 4},
        {"model chunks", h[41], 0, 1 << 20},
        // context parallelism and attention: 0 in a state written before they were recorded (cp 1, unfused)
        {"cp", h[42], 0, 1 << 20}, {"attention", h[43], 0, 2},
        {"lr decay steps", h[44], 0, INT32_MAX}};
    for (auto& r : ranges)
        if (r.v < r.lo || r.v > r.hi)
            return fail(std::string(r.what) + " = " + std::to_string(r.v) + " is out of range [" + std::to_string(r.lo) + ", " +
                        std::to_string(r.hi) + "]");
    if (h[20] % h[11] != 0)
        return fail("batch " + std::to_string(h[20]) + " is not divisible by its dp " + std::to_string(h[11]));
    for (int i = 0; i < 8; i++)
        if (!std::isfinite(bitsd(h[25 + i]))) return fail(std::string(kDoubles[i].flag) + " is not a finite number");
    const int64_t expected = kHeaderBytes + 2 * n * (int64_t)sizeof(float);
    if (file_bytes != expected)
        return fail("has " + std::to_string(file_bytes) + " bytes, expected " + std::to_string(expected) + " (header + AdamW m and v of " +
                    std::to_string(n) + " parameters): " + (file_bytes < expected ? "truncated" : "oversized"));
    s.cfg = c;
    s.tp = (int)h[10]; s.dp = (int)h[11]; s.sp = (int)h[12]; s.dtype = (int)h[13]; s.recompute = (int)h[14];
    s.step = h[15]; s.data_epoch = h[16]; s.data_position = h[17];
    s.seed = (uint64_t)h[18]; s.shuffle = (int)h[19]; s.batch = (int)h[20]; s.seq = (int)h[21];
    s.steps = (int)h[22]; s.warmup = (int)h[23]; s.lr_schedule = (int)h[24];
    for (int i = 0; i < 8; i++) s.*kDoubles[i].field = bitsd(h[25 + i]);
    s.train_tokens = h[33]; s.train_hash = (uint64_t)h[34]; s.model_hash = (uint64_t)h[35];
    payload_hash = (uint64_t)h[36];
    s.skipped_steps = h[37];
    s.pp = h[38] ? (int)h[38] : 1;
    s.microbatches = h[39] ? (int)h[39] : 1;
    s.schedule = h[38] ? (int)h[40] : (int)PipeSchedule::OneFOneB;
    s.chunks = h[41] ? (int)h[41] : 1;
    s.cp = h[42] ? (int)h[42] : 1;
    s.attention = h[43] ? (int)h[43] - 1 : 0;
    s.lr_decay_steps = h[44] ? (int)h[44] : s.steps;
    return true;
}

static bool check_payload(const TrainState& s, uint64_t payload_hash, const std::string& name, std::string& err) {
    uint64_t hash = fnv1a64(s.adam_m.data(), s.adam_m.size() * sizeof(float));
    hash = fnv1a64(s.adam_v.data(), s.adam_v.size() * sizeof(float), hash);
    if (hash != payload_hash) {
        err = "training state " + name + ": the AdamW moments do not match the header's checksum (corrupt file)";
        return false;
    }
    for (size_t i = 0; i < s.adam_m.size(); i++)
        if (!std::isfinite(s.adam_m[i]) || !std::isfinite(s.adam_v[i]) || s.adam_v[i] < 0) {
            err = "training state " + name + ": AdamW moment " + std::to_string(i) + " is not finite (or v < 0)";
            return false;
        }
    return true;
}

bool train_state_parse(const uint8_t* data, size_t size, const std::string& name, TrainState& s, std::string& err) {
    int64_t h[kTrainStateHeaderInts] = {0};
    if (size >= (size_t)kHeaderBytes) memcpy(h, data, kHeaderBytes);
    uint64_t payload_hash = 0;
    if (!parse_header(h, (int64_t)size, name, s, payload_hash, err)) return false;
    const size_t n = (size_t)param_count(s.cfg);
    s.adam_m.resize(n);
    s.adam_v.resize(n);
    if (n) {
        memcpy(s.adam_m.data(), data + kHeaderBytes, n * sizeof(float));
        memcpy(s.adam_v.data(), data + kHeaderBytes + n * sizeof(float), n * sizeof(float));
    }
    return check_payload(s, payload_hash, name, err);
}

bool train_state_read(const std::string& path, TrainState& s, std::string& err) {
    err = not_a_file_problem("training state", path);
    if (!err.empty()) return false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        err = "cannot open training state " + path + ": " + strerror(errno);
        return false;
    }
    struct stat st;
    int64_t h[kTrainStateHeaderInts] = {0};
    int64_t file_bytes = fstat(fileno(f), &st) == 0 ? (int64_t)st.st_size : -1;
    if (file_bytes >= kHeaderBytes && fread(h, sizeof(int64_t), kTrainStateHeaderInts, f) != (size_t)kTrainStateHeaderInts)
        file_bytes = -1;
    uint64_t payload_hash = 0;
    bool ok = file_bytes >= 0 || (err = "cannot read training state " + path, false);
    ok = ok && parse_header(h, file_bytes, path, s, payload_hash, err);
    if (ok) {
        const size_t n = (size_t)param_count(s.cfg);
        s.adam_m.resize(n);
        s.adam_v.resize(n);
        ok = fread(s.adam_m.data(), sizeof(float), n, f) == n && fread(s.adam_v.data(), sizeof(float), n, f) == n;
        if (!ok) err = "error reading the AdamW moments of training state " + path;
    }
    fclose(f);
    return ok && check_payload(s, payload_hash, path, err);
}

bool train_state_write(const std::string& path, const TrainState& s, std::string& err) {
    const size_t n = (size_t)param_count(s.cfg);
    if (s.adam_m.size() != n || s.adam_v.size() != n) {
        err = "internal: training state for " + path + " holds " + std::to_string(s.adam_m.size()) + " moments, expected " +
              std::to_string(n);
        return false;
    }
    uint64_t hash = fnv1a64(s.adam_m.data(), n * sizeof(float));
    hash = fnv1a64(s.adam_v.data(), n * sizeof(float), hash);
    int64_t h[kTrainStateHeaderInts];
    make_header(s, hash, h);
    AtomicFile f;
    if (!f.open(path, err)) return false;
    f.write(h, sizeof h);
    f.write(s.adam_m.data(), n * sizeof(float));
    f.write(s.adam_v.data(), n * sizeof(float));
    return f.commit(err);
}

static const char* schedule_name(int lr_schedule) { return lr_schedule ? "cosine" : "constant"; }

std::string schedule_description(const TrainState& s) {
    char b[160];
    if (s.lr_schedule == 0)
        snprintf(b, sizeof b, "constant %.3g after %d warm-up steps, weight decay %g", s.lr, s.warmup, s.weight_decay);
    else
        snprintf(b, sizeof b, "cosine from %.3g to %.3g over steps 1..%d after %d warm-up steps, weight decay %g", s.lr,
                 s.lr * s.min_lr_frac, s.lr_decay_steps, s.warmup, s.weight_decay);
    return b;
}

// The learning-rate schedule's fields (Megatron-LM's opt_param_scheduler: the rate's peak, floor, warm-up, decay
// style and steps, and the weight decay): the first that differs, as "--flag now differs from the checkpoint's
// saved", values by name; "" when none does.
static std::string schedule_difference(const TrainState& a, const TrainState& b) {
    auto differs = [](const std::string& flag, const std::string& now, const std::string& saved) {
        return flag + " " + now + " differs from the checkpoint's " + saved;
    };
    auto num = [](double x) {
        char t[32];
        snprintf(t, sizeof t, "%.9g", x);
        return std::string(t);
    };
    if (a.lr_schedule != b.lr_schedule) return differs("--lr-schedule", schedule_name(b.lr_schedule), schedule_name(a.lr_schedule));
    if (a.warmup != b.warmup) return differs("--warmup", std::to_string(b.warmup), std::to_string(a.warmup));
    if (a.lr != b.lr) return differs("--lr", num(b.lr), num(a.lr));
    if (a.min_lr_frac != b.min_lr_frac) return differs("--final-lr-frac", num(b.min_lr_frac), num(a.min_lr_frac));
    if (a.weight_decay != b.weight_decay) return differs("--weight-decay", num(b.weight_decay), num(a.weight_decay));
    if (a.lr_schedule == 1 && a.lr_decay_steps != b.lr_decay_steps)  // a constant rate has no length
        return differs("--steps", std::to_string(b.lr_decay_steps), std::to_string(a.lr_decay_steps)) +
               " (its cosine schedule decays over " + std::to_string(a.lr_decay_steps) + " steps)";
    return "";
}

std::string train_state_mismatch(const TrainState& a, const TrainState& b, const std::string& name, bool schedule_from_flags) {
    auto differs = [&](const std::string& flag, const std::string& saved, const std::string& now) {
        return flag + " " + now + " differs from the checkpoint's " + saved + " (" + name +
               "); an exact continuation needs the same value";
    };
    const GPTConfig &x = a.cfg, &y = b.cfg;
    if (x.max_seq != y.max_seq || x.vocab != y.vocab || x.layers != y.layers || x.heads != y.heads || x.channels != y.channels ||
        x.padded_vocab != y.padded_vocab)
        return "the model in the checkpoint (" + name + ") has another shape than the state file describes";
    if (a.shuffle != b.shuffle)
        return std::string(b.shuffle ? "the shuffled order (no --no-shuffle) differs from the checkpoint's file order (--no-shuffle)"
                                     : "--no-shuffle (file order) differs from the checkpoint's shuffled order") +
               " (" + name + "); an exact continuation needs the same order";
    struct { const char* flag; int64_t saved, now; } ints[] = {
        {"--batch", a.batch, b.batch}, {"--seq", a.seq, b.seq}, {"--seed", (int64_t)a.seed, (int64_t)b.seed}};
    for (auto& i : ints)
        if (i.saved != i.now) return differs(i.flag, std::to_string(i.saved), std::to_string(i.now));
    for (auto& d : kDoubles) {
        if (d.field == &TrainState::lr || d.field == &TrainState::min_lr_frac || d.field == &TrainState::weight_decay) continue;
        if (a.*d.field != b.*d.field) {
            char s1[32], s2[32];
            snprintf(s1, sizeof s1, "%.9g", a.*d.field);
            snprintf(s2, sizeof s2, "%.9g", b.*d.field);
            return differs(d.flag, s1, s2);
        }
    }
    // The schedule: the checkpoint's unless this run says otherwise on purpose (train/options.h).
    const std::string schedule = schedule_from_flags ? "" : schedule_difference(a, b);
    if (!schedule.empty())
        return schedule + " (" + name + "). A resumed run keeps the checkpoint's learning-rate schedule (" +
               schedule_description(a) + "); to change it from step " + std::to_string(a.step + 1) +
               " on, e.g. to extend a finished run, add --override-opt_param-scheduler (this run's flags from then on); "
               "--use-checkpoint-opt_param-scheduler keeps the checkpoint's whatever the flags say (a cosine then stays at "
               "its final rate past its steps); or give the checkpoint's value";
    if (a.train_tokens != b.train_tokens || a.train_hash != b.train_hash)
        return "--train: the training data (" + std::to_string(b.train_tokens) + " tokens) is not the data the checkpoint " + name +
               " was trained on (" + std::to_string(a.train_tokens) + " tokens, another hash)";
    if (a.step > b.steps)
        return "--steps " + std::to_string(b.steps) + " is below the checkpoint's step " + std::to_string(a.step) + " (" + name + ")";
    return "";
}

std::string train_state_layout_note(const TrainState& a, const TrainState& b) {
    if (a.tp == b.tp && a.dp == b.dp && a.sp == b.sp && a.dtype == b.dtype && a.pp == b.pp &&
        a.microbatches == b.microbatches && a.schedule == b.schedule && a.chunks == b.chunks && a.cp == b.cp &&
        a.attention == b.attention)
        return "";
    static const char* sched[] = {"afab", "1f1b", "interleaved"};
    auto layout = [&](const TrainState& x) {
        char m[256];
        snprintf(m, sizeof m, "tp %d x cp %d x dp %d x pp %d, sp %s, %s, %s attention, %d micro-batches, %s schedule with %d chunks",
                 x.tp, x.cp, x.dp, x.pp, x.sp ? "on" : "off", x.dtype ? "bf16" : "fp32", x.attention ? "flash" : "unfused",
                 x.microbatches, sched[x.schedule], x.chunks);
        return std::string(m);
    };
    return "the checkpoint was written at " + layout(a) + "; this run is " + layout(b) +
           ": the continuation is equivalent but not bitwise identical (the same math up to float rounding)";
}

// ---- the checkpoint directory ------------------------------------------------------------------------------
std::string checkpoint_step_name(int64_t step) {
    char b[32];
    snprintf(b, sizeof b, "step_%08lld", (long long)step);
    return b;
}

static bool is_step_name(const std::string& s) {
    if (s.size() <= 5 || s.compare(0, 5, "step_") != 0) return false;
    for (size_t i = 5; i < s.size(); i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

bool parse_latest(const std::string& text, const std::string& name, std::string& step_name, std::string& err) {
    std::string t = text;
    if (!t.empty() && t.back() == '\n') t.pop_back();
    if (!is_step_name(t) || t.size() > 40) {
        err = "checkpoint pointer " + name + " should hold one line 'step_' + digits (e.g. step_00000010), got '" +
              t.substr(0, 40) + "'";
        return false;
    }
    step_name = t;
    return true;
}

static bool make_dir(const std::string& d, std::string& err) {
    if (mkdir(d.c_str(), 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
        err = d + " exists and is not a directory";
        return false;
    }
    err = "cannot create directory " + d + ": " + strerror(errno);
    return false;
}

// Delete a step directory: its regular files (model.bin, state.bin, stray temporaries), then itself.
static void remove_step_dir(const std::string& d) {
    if (DIR* dir = opendir(d.c_str())) {
        while (dirent* e = readdir(dir)) {
            std::string n = e->d_name;
            if (n != "." && n != "..") unlink((d + "/" + n).c_str());
        }
        closedir(dir);
    }
    rmdir(d.c_str());
}

bool checkpoint_dir_save(const std::string& dir, const GPTConfig& cfg, const float* params, TrainState& s, std::string& err) {
    begin_save_for_fault_injection();
    const std::string name = checkpoint_step_name(s.step), step_dir = dir + "/" + name;
    if (!make_dir(dir, err)) return false;
    // A directory of the same name can only be the debris of a save that died before publishing it.
    std::string current;
    {
        FILE* f = fopen((dir + "/latest").c_str(), "rb");
        char buf[64] = {0};
        if (f) {
            size_t k = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            std::string e;
            parse_latest(std::string(buf, k), dir + "/latest", current, e);
        }
    }
    if (current != name) remove_step_dir(step_dir);
    if (!make_dir(step_dir, err)) return false;

    // model.bin: an llm.c fp32 checkpoint (checkpoint.cu writes it through AtomicFile: durable, fault-injectable)
    const size_t n = (size_t)param_count(cfg);
    s.cfg = cfg;
    s.model_hash = fnv1a64(params, n * sizeof(float));
    if (!checkpoint_try_write(step_dir + "/model.bin", cfg, params, false, err)) return false;
    if (!train_state_write(step_dir + "/state.bin", s, err)) return false;
    if (!fsync_dir(step_dir, err) || !fsync_dir(dir, err)) return false;

    // Publish: `latest` names the new pair only now that both files are durable.
    AtomicFile latest;
    const std::string line = name + "\n";
    if (!latest.open(dir + "/latest", err)) return false;
    latest.write(line.data(), line.size());
    if (!latest.commit(err)) return false;

    // Older pairs are no longer needed: the new one is complete and published. (Also the temporary pointer
    // of a save that was killed while publishing.)
    if (DIR* d = opendir(dir.c_str())) {
        std::vector<std::string> old, stray;
        while (dirent* e = readdir(d)) {
            std::string n = e->d_name;
            if (is_step_name(n) && n != name) old.push_back(n);
            if (n.compare(0, 11, "latest.tmp.") == 0) stray.push_back(n);
        }
        closedir(d);
        for (auto& o : old) remove_step_dir(dir + "/" + o);
        for (auto& t : stray) unlink((dir + "/" + t).c_str());
    }
    return true;
}

bool checkpoint_dir_load(const std::string& dir, GPTConfig& cfg, std::vector<float>& params, TrainState& s,
                         std::string& step_dir, std::string& err) {
    const std::string latest = dir + "/latest";
    FILE* f = fopen(latest.c_str(), "rb");
    if (!f) {
        err = "--resume " + dir + ": no checkpoint there (cannot open " + latest + ": " + strerror(errno) +
              "; a checkpoint directory is made by --save-every K --checkpoint-dir DIR)";
        return false;
    }
    char buf[64] = {0};
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    std::string name;
    if (!parse_latest(std::string(buf, k), latest, name, err)) return false;
    step_dir = dir + "/" + name;
    // A pair that is not there: say what is, and what to run instead.
    struct stat st;
    if (stat(step_dir.c_str(), &st) != 0) {
        std::string others;  // the step directories that are there (newest last)
        if (DIR* d = opendir(dir.c_str())) {
            std::vector<std::string> steps;
            while (dirent* e = readdir(d))
                if (is_step_name(e->d_name)) steps.push_back(e->d_name);
            closedir(d);
            std::sort(steps.begin(), steps.end());
            if (!steps.empty()) others = steps.back();
        }
        err = latest + " names " + name + ", but " + step_dir + " is not there (deleted or not copied: " + strerror(errno) + "); " +
              (others.empty() ? "the directory holds no step_N pair: restore " + name + ", or start a new run without --resume"
                              : "restore it, or resume from the pair that is there: echo " + others + " > " + latest +
                                    " and run again with --resume " + dir);
        return false;
    }
    if (!checkpoint_read(step_dir + "/model.bin", cfg, params, err)) return false;
    if (stat((step_dir + "/state.bin").c_str(), &st) != 0) {
        err = "--resume " + dir + ": " + step_dir + "/state.bin is missing (" + strerror(errno) + "): an exact continuation needs "
              "the training state (AdamW moments, data position, step) beside model.bin; to start a new run from these weights "
              "alone use --init " + step_dir + " instead of --resume";
        return false;
    }
    if (!train_state_read(step_dir + "/state.bin", s, err)) return false;
    const GPTConfig& c = s.cfg;
    if (c.max_seq != cfg.max_seq || c.vocab != cfg.vocab || c.layers != cfg.layers || c.heads != cfg.heads ||
        c.channels != cfg.channels || c.padded_vocab != cfg.padded_vocab) {
        err = step_dir + "/state.bin describes another model shape than " + step_dir + "/model.bin (files from different runs?)";
        return false;
    }
    if (fnv1a64(params.data(), params.size() * sizeof(float)) != s.model_hash) {
        err = step_dir + "/model.bin is not the model that " + step_dir + "/state.bin was saved with (hash differs; files from "
              "different steps or runs?)";
        return false;
    }
    if (checkpoint_step_name(s.step) != name) {
        err = step_dir + "/state.bin holds step " + std::to_string(s.step) + ", but its directory is " + name;
        return false;
    }
    return true;
}
