// test_pipeline_schedule.cu — parallel/pipeline_schedule.cu, every rank simulated under NCCL's point-to-point
// rules (parallel/point_to_point.h): sends are rendezvous (a send completes only when the peer has posted the matching
// receive), messages between two ranks match in issue order (no tags), and an exchange (a group) completes
// as a unit. For AFAB, 1F1B and interleaved at p 2..8, M 1..16 and m 2..4 (every layout the schedule allows):
//  - every (micro-batch, chunk) forward and backward runs once on its rank, each backward after its forward,
//    backwards of a chunk in micro-batch order;
//  - every directed pair's sends and receives agree in order (tag and byte count): what NCCL needs;
//  - the exchanges the executor issues (one per schedule unit: the previous unit's sends with this unit's
//    receives, model/pipeline_step.cu) drain: no deadlock;
//  - the warm-up counts are the fewest forwards before the steady state that give the shortest step
//    (derived by simulation, one rank's count varied at a time);
//  - the first stage's peak in-flight count is the paper's.
// And the negative control: the old ungrouped order (receive before an op, send right after it) deadlocks
// under these rules for 1F1B at M >= 2 and for every interleaved layout.
#include <map>
#include <set>
#include <tuple>
#include "../test_util.h"
#include "../../parallel/pipeline_schedule.h"
#include "../../parallel/pipeline_simulation.h"
#include "../../parallel/zero_bubble_schedule.h"

// One message of a rank's exchange, as the executor posts it.
struct SimMessage {
    bool send;
    int peer, tag;
    long bytes;  // every boundary tensor of a step has the micro-batch's shape: one unit here
};
using Exchange = std::vector<SimMessage>;

// What an op receives and sends, derived here from the virtual stages rather than taken from the schedule
// code: a forward of virtual stage v gets its input from v − 1 and passes its output to v + 1; a backward
// the other way. The tag names (micro-batch, boundary, direction) like pipe_message_tag.
// Placement: virtual stage v on rank v mod p, or (ZB-V) on v and then back up, 2p − 1 − v.
static bool g_v = false;  // the layout being checked is ZB-V's
static int vstage(int chunk, int p, int r) { return g_v && chunk == 1 ? 2 * p - 1 - r : chunk * p + r; }
static int rank_of(int v, int p) { return g_v && v >= p ? 2 * p - 1 - v : v % p; }
static bool receives(const PipeOp& op, int p, int r, int m, SimMessage* out) {
    if (op.kind == PipeOp::WeightGrad) return false;  // a zero-bubble W: computed from what its B kept
    const int v = vstage(op.chunk, p, r), P = p * m;
    const bool fwd = op.kind == PipeOp::Forward;
    if (fwd ? v == 0 : v == P - 1) return false;
    const int from = fwd ? v - 1 : v + 1, boundary = fwd ? v - 1 : v;
    *out = SimMessage{false, rank_of(from, p), (op.microbatch * P + boundary) * 2 + (fwd ? 0 : 1), 1};
    return true;
}
static bool sends(const PipeOp& op, int p, int r, int m, SimMessage* out) {
    if (op.kind == PipeOp::WeightGrad) return false;
    const int v = vstage(op.chunk, p, r), P = p * m;
    const bool fwd = op.kind == PipeOp::Forward;
    if (fwd ? v == P - 1 : v == 0) return false;
    const int to = fwd ? v + 1 : v - 1, boundary = fwd ? v : v - 1;
    *out = SimMessage{true, rank_of(to, p), (op.microbatch * P + boundary) * 2 + (fwd ? 0 : 1), 1};
    return true;
}

// The executor's exchanges for one rank: grouped, one per unit (this unit's receives, the previous unit's
// sends), then the last unit's sends; ungrouped, each receive and each send on its own. work (optional)
// gets the compute time before each exchange and, last, after the final one: a forward takes 1, a
// backward 2 (the usual ratio; only the shape of the result matters here).
static std::vector<Exchange> exchanges(const std::vector<std::vector<PipeOp>>& units, int p, int r, int m, bool grouped,
                                       std::vector<double>* work = nullptr) {
    std::vector<Exchange> out;
    std::vector<double> w;
    double busy = 0;  // compute since the last exchange
    auto post = [&](const Exchange& x) {
        if (x.empty()) return;
        out.push_back(x);
        w.push_back(busy);
        busy = 0;
    };
    auto run = [&](const PipeOp& op) { busy += op.kind == PipeOp::Forward ? 1 : 2; };  // (ZB: B and W 2 each; unused)
    Exchange pending;  // the previous unit's sends
    SimMessage msg;
    for (const std::vector<PipeOp>& unit : units) {
        // (ZB-V's turn on rank p − 1 stays on the rank: no message.)
        if (grouped) {
            Exchange x;
            for (const PipeOp& op : unit)
                if (receives(op, p, r, m, &msg) && msg.peer != r) x.push_back(msg);
            x.insert(x.end(), pending.begin(), pending.end());
            pending.clear();
            post(x);
            for (const PipeOp& op : unit) {
                run(op);
                if (sends(op, p, r, m, &msg) && msg.peer != r) pending.push_back(msg);
            }
        } else {
            for (const PipeOp& op : unit) {
                if (receives(op, p, r, m, &msg) && msg.peer != r) post({msg});
                run(op);
                if (sends(op, p, r, m, &msg) && msg.peer != r) post({msg});
            }
        }
    }
    post(pending);
    w.push_back(busy);
    if (work) *work = w;
    return out;
}

// Every directed pair (a → b): a's sends to b and b's receives from a, in issue order, must be the same
// messages (tag, bytes). Returns "" or the first disagreement.
// channels: 1, or 2 (ZB-V: activations and gradients each in their own order, parallel/comm.h's Comm::channels).
static std::string order_problem(const std::vector<std::vector<Exchange>>& ex, int p, int channels = 1) {
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++)
            for (int ch = 0; ch < channels && a != b; ch++) {
                auto on = [&](const SimMessage& s) { return channels == 1 || (s.tag & 1) == ch; };
                std::vector<std::pair<int, long>> sent, got;
                for (const Exchange& x : ex[a])
                    for (const SimMessage& s : x)
                        if (s.send && s.peer == b && on(s)) sent.push_back({s.tag, s.bytes});
                for (const Exchange& x : ex[b])
                    for (const SimMessage& s : x)
                        if (!s.send && s.peer == a && on(s)) got.push_back({s.tag, s.bytes});
                if (sent != got) {
                    size_t k = 0;
                    while (k < sent.size() && k < got.size() && sent[k] == got[k]) k++;
                    return "rank " + std::to_string(a) + " -> " + std::to_string(b) + ": message " + std::to_string(k) +
                           " sent as tag " + (k < sent.size() ? std::to_string(sent[k].first) : "none") + ", received as tag " +
                           (k < got.size() ? std::to_string(got[k].first) : "none");
                }
            }
    return "";
}

// Run every rank's exchanges under NCCL's rules. The k-th message of a directed pair matches the k-th
// receive; an exchange completes when every message in it is matched by one its peer has posted (the peer's
// current exchange or an earlier one). Ranks run their exchanges one at a time (a communicator's
// operations in issue order). Returns "" when every exchange completed, else who waits for what.
static std::string drain(const std::vector<std::vector<Exchange>>& ex, int p, const std::vector<std::vector<double>>* work = nullptr,
                         double* step_time = nullptr) {
    // For each message: the index of the exchange holding its counterpart on the peer.
    std::vector<std::vector<std::vector<size_t>>> partner(p);
    std::map<std::pair<int, int>, std::vector<size_t>> send_at, recv_at;  // (from, to) -> exchange indices
    for (int r = 0; r < p; r++)
        for (size_t g = 0; g < ex[r].size(); g++)
            for (const SimMessage& s : ex[r][g]) (s.send ? send_at[{r, s.peer}] : recv_at[{s.peer, r}]).push_back(g);
    std::map<std::pair<int, int>, size_t> seen_send, seen_recv;
    for (int r = 0; r < p; r++) {
        partner[r].resize(ex[r].size());
        for (size_t g = 0; g < ex[r].size(); g++)
            for (const SimMessage& s : ex[r][g]) {
                const std::pair<int, int> pair = s.send ? std::make_pair(r, s.peer) : std::make_pair(s.peer, r);
                const size_t k = s.send ? seen_send[pair]++ : seen_recv[pair]++;
                const std::vector<size_t>& other = s.send ? recv_at[pair] : send_at[pair];
                partner[r][g].push_back(k < other.size() ? other[k] : SIZE_MAX);  // SIZE_MAX: never posted
            }
    }
    // Timing (optional): rank r posts exchange g at posted[r][g]; it completes when the last of its
    // messages' counterparts is posted (communication itself is free); then the rank computes for
    // (*work)[r][g] before it posts the next.
    std::vector<size_t> at(p, 0);
    std::vector<std::vector<double>> posted(p);
    for (int r = 0; r < p; r++) posted[r].assign(ex[r].size() + 1, 0.0);
    if (work) for (int r = 0; r < p; r++) posted[r][0] = (*work)[r][0];
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++) {
            if (at[r] == ex[r].size()) continue;
            bool ready = true;
            double t = posted[r][at[r]];
            for (size_t i = 0; i < ex[r][at[r]].size(); i++) {
                const size_t need = partner[r][at[r]][i];
                const int peer = ex[r][at[r]][i].peer;
                ready &= need != SIZE_MAX && at[peer] >= need;
                if (ready) t = std::max(t, posted[peer][need]);
            }
            if (!ready) continue;
            at[r]++, progress = true;
            posted[r][at[r]] = t + (work ? (*work)[r][at[r]] : 0.0);
        }
    }
    if (step_time) {
        *step_time = 0;
        for (int r = 0; r < p; r++) *step_time = std::max(*step_time, posted[r][ex[r].size()]);
    }
    std::string s;
    for (int r = 0; r < p; r++)
        if (at[r] < ex[r].size())
            s += " rank " + std::to_string(r) + " waits in exchange " + std::to_string(at[r]) + " of " + std::to_string(ex[r].size()) + ";";
    return s.empty() ? "" : "deadlock:" + s;
}

static std::vector<std::vector<Exchange>> all_exchanges(PipeSchedule s, int p, int M, int m, const std::vector<int>& warmup,
                                                        bool grouped, std::vector<std::vector<double>>* work = nullptr) {
    std::vector<std::vector<Exchange>> ex(p);
    if (work) work->assign(p, {});
    for (int r = 0; r < p; r++) ex[r] = exchanges(pipe_units(s, p, r, M, m, warmup[r]), p, r, m, grouped, work ? &(*work)[r] : nullptr);
    return ex;
}

// The step time with these warm-up counts under NCCL's rules (grouped exchanges, communication itself free,
// a forward taking 1 and a backward 2); -1 when the exchanges disagree in order or deadlock.
static double step_time(PipeSchedule s, int p, int M, int m, const std::vector<int>& warmup) {
    std::vector<std::vector<double>> work;
    const std::vector<std::vector<Exchange>> ex = all_exchanges(s, p, M, m, warmup, true, &work);
    double t = 0;
    if (!order_problem(ex, p).empty() || !drain(ex, p, &work, &t).empty()) return -1;
    return t;
}

static int g_ungrouped_stuck = 0, g_ungrouped_total = 0;

// The posted exchanges (model/pipeline_step.cu, exchange_post / receive_wait): each op waits only for its own
// input, which arrives once the rank that sends it has run the op that produced it (its sends are posted at once
// and complete later); a rank never waits for its own sends. Returns "" when every op runs, else who waits.
static std::string drain_posted(const std::vector<std::vector<PipeOp>>& ops, int p, int m) {
    std::set<std::tuple<int, int, int>> sent;  // (from, to, tag)
    std::vector<size_t> at(p, 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++)
            for (; at[r] < ops[r].size(); at[r]++) {
                SimMessage msg;
                const PipeOp& op = ops[r][at[r]];
                if (receives(op, p, r, m, &msg) && msg.peer != r && !sent.count({msg.peer, r, msg.tag})) break;
                if (sends(op, p, r, m, &msg)) sent.insert({r, msg.peer, msg.tag});
                progress = true;
            }
    }
    std::string stuck;
    for (int r = 0; r < p; r++)
        if (at[r] < ops[r].size()) stuck += " rank " + std::to_string(r) + " waits before op " + std::to_string(at[r]) + ";";
    return stuck.empty() ? "" : "deadlock:" + stuck;
}

static void check_layout(PipeSchedule s, int p, int M, int m) {
    g_v = s == PipeSchedule::ZeroBubbleV;
    char what[96];
    snprintf(what, sizeof what, "%s p=%d M=%d m=%d", pipe_schedule_name(s), p, M, m);
    std::vector<std::vector<PipeOp>> ops(p);
    std::vector<int> warmup(p);
    for (int r = 0; r < p; r++) ops[r] = pipe_schedule(s, p, r, M, m), warmup[r] = pipe_warmup(s, p, r, M, m);
    for (int r = 0; r < p; r++) {
        // Each (micro-batch, chunk) forward and backward exactly once, each backward after its forward.
        std::map<std::tuple<int, int, int>, int> count;
        bool after = true;
        for (const PipeOp& op : ops[r]) {
            count[{op.kind, op.microbatch, op.chunk}]++;
            if (op.kind == PipeOp::Backward) after &= count.count({PipeOp::Forward, op.microbatch, op.chunk}) > 0;
        }
        const int kinds = is_zero_bubble(s) ? 3 : 2;  // F, B (and W)
        bool once = (int)ops[r].size() == kinds * M * m && (int)count.size() == kinds * M * m;
        for (auto& [k, n] : count)
            once &= n == 1 && std::get<1>(k) >= 0 && std::get<1>(k) < M && std::get<2>(k) >= 0 && std::get<2>(k) < m;
        CHECK(once, "%s rank %d: every forward and backward (and W) must run once", what, r);
        if (is_zero_bubble(s)) {
            // Each W after its B, W's in micro-batch order, and no W under the other schedules.
            std::set<std::pair<int, int>> b_done;
            std::vector<int> next_w(m, 0);
            bool w_ok = true;
            for (const PipeOp& op : ops[r]) {
                if (op.kind == PipeOp::Backward) b_done.insert({op.microbatch, op.chunk});
                if (op.kind == PipeOp::WeightGrad)
                    w_ok &= b_done.count({op.microbatch, op.chunk}) && op.microbatch == next_w[op.chunk]++;
            }
            CHECK(w_ok, "%s rank %d: a W before its B, or out of micro-batch order", what, r);
        }
        CHECK(after, "%s rank %d: a backward runs before its forward", what, r);
        // Backwards of each chunk in micro-batch order (FIFO): the single-rank accumulation order.
        std::vector<int> last(m, -1);
        bool fifo = true;
        for (const PipeOp& op : ops[r])
            if (op.kind == PipeOp::Backward) fifo &= op.microbatch == last[op.chunk] + 1, last[op.chunk] = op.microbatch;
        CHECK(fifo, "%s rank %d: backwards not in micro-batch order", what, r);
        // The executor's messages are the schedule code's (pipe_op_receives / pipe_op_sends / pipe_message_tag).
        for (const PipeOp& op : ops[r]) {
            SimMessage want;
            PipeMessage got;
            const bool rw = receives(op, p, r, m, &want), rg = pipe_op_receives(s, op, p, r, m, &got);
            CHECK(rw == rg && (!rw || (got.peer == want.peer && pipe_message_tag(got, p, m) == want.tag % 32768)),
                  "%s rank %d: pipe_op_receives disagrees", what, r);
            const bool sw = sends(op, p, r, m, &want), sg = pipe_op_sends(s, op, p, r, m, &got);
            CHECK(sw == sg && (!sw || (got.peer == want.peer && pipe_message_tag(got, p, m) == want.tag % 32768)),
                  "%s rank %d: pipe_op_sends disagrees", what, r);
        }
    }
    // NCCL's rules: order agreement per pair (ZB-V: per pair and direction, its two channels), then the grouped
    // exchanges drain (the whole units NCCL runs; ZB-V is not run on NCCL), and the posted ones do.
    const std::vector<std::vector<Exchange>> ex = all_exchanges(s, p, M, m, warmup, true);
    const std::string order = order_problem(ex, p, g_v ? 2 : 1);
    CHECK(order.empty(), "%s: %s", what, order.c_str());
    if (!g_v) {
        const std::string stuck = drain(ex, p);
        CHECK(stuck.empty(), "%s: %s", what, stuck.c_str());
    }
    const std::string posted = drain_posted(ops, p, m);
    CHECK(posted.empty(), "%s (posted exchanges): %s", what, posted.c_str());
    if (g_v && p > 1 && M >= 2 * p) {  // one channel per pair would not do: ZB-V's two directions cross
        CHECK(!order_problem(ex, p, 1).empty(), "%s: one channel per pair keeps the order; the second is not needed", what);
    }
    // The warm-up counts, derived by simulating the executor's exchanges with other counts on one rank (the
    // others as scheduled):
    //  - 1F1B and interleaved (M > p): the fewest forwards that give the shortest step (step_time); each one
    //    more holds another micro-batch's activations. 1F1B: with every op its own unit, one fewer still drains
    //    but stalls the steady state. Interleaved: the fewest that
    //    drain is one less, but that stalls the steady state; Megatron-LM's count holds one more (micro-batch,
    //    chunk) to avoid it.
    //  - AFAB, and interleaved with M == p (as in Megatron-LM: no steady state to alternate with): every
    //    forward first, by definition.
    // (Zero bubble: ZB-H1 takes 1F1B's counts, checked below; ZB-H2's are larger by design, to fill the start.)
    const bool all_first = s == PipeSchedule::AFAB || (s == PipeSchedule::Interleaved && M == p) || p == 1 || is_zero_bubble(s);
    for (int r = 0; r < p && !all_first; r++) {
        std::vector<int> w = warmup;
        int derived = -1;
        double best = -1;
        for (int k = 0; k <= M * m; k++) {
            w[r] = k;
            const double t = step_time(s, p, M, m, w);
            if (t < 0) continue;
            if (best < 0 || t < best - 1e-9) best = t, derived = k;
        }
        // (Two counts that give the same ops in the same units are one schedule: with M < p the last warm-up
        // forward and the steady state's first are the same unit.)
        const bool same = derived >= 0 && pipe_units(s, p, r, M, m, derived) == pipe_units(s, p, r, M, m, warmup[r]);
        CHECK(derived == warmup[r] || same, "%s rank %d: warm-up %d, but the simulation gives %d", what, r, warmup[r], derived);
    }
    if (is_zero_bubble(s) && !g_v)
        for (int r = 0; r < p; r++)
            CHECK(warmup[r] == (s == PipeSchedule::ZeroBubbleH1 ? pipe_warmup(PipeSchedule::OneFOneB, p, r, M, 1)
                                                                : std::min(2 * (p - 1 - r), M)),
                  "%s rank %d: warm-up %d", what, r, warmup[r]);
    if (g_v)  // the forwards before the first B, as pipe_warmup says
        for (int r = 0; r < p; r++) {
            int f = 0;
            for (const PipeOp& op : ops[r]) {
                if (op.kind == PipeOp::Backward) break;
                f += op.kind == PipeOp::Forward;
            }
            CHECK(warmup[r] == f, "%s rank %d: warm-up %d, the order has %d forwards before its first B", what, r, warmup[r], f);
        }
    if (all_first && p > 1 && !is_zero_bubble(s))
        for (int r = 0; r < p; r++) CHECK(warmup[r] == M * m, "%s rank %d: warm-up %d, not every forward", what, r, warmup[r]);
    // Negative control: the ungrouped order (each receive, each send alone, as issued before the grouping).
    if (p > 1) {
        const std::vector<std::vector<Exchange>> ungrouped = all_exchanges(s, p, M, m, warmup, false);
        const bool hangs = !drain(ungrouped, p).empty();
        g_ungrouped_total++, g_ungrouped_stuck += hangs;
        if ((s == PipeSchedule::OneFOneB || (is_zero_bubble(s) && !g_v)) && M >= 2)
            CHECK(hangs, "%s: the ungrouped order should deadlock under NCCL's rules", what);
        if (s == PipeSchedule::Interleaved) CHECK(hangs, "%s: the ungrouped order should deadlock under NCCL's rules", what);
    }
    // The first stage's peak: 1F1B holds min(p, M) micro-batches, AFAB M, interleaved (p−1)·2 + (m−1)·p + 1
    // (micro-batch, chunk) pairs — L·(1 + (p−1)/(p·m)) layers at L/(p·m) layers per chunk.
    const int peak = pipe_peak_in_flight(ops[0]);
    // ZB-H1 holds 1F1B's p on the first stage (and on every stage: the later ones keep their W's back instead of
    // idling), ZB-H2 2p − 1.
    int want_peak = s == PipeSchedule::AFAB ? M : s == PipeSchedule::ZeroBubbleH2 ? std::min(2 * p - 1, M) : std::min(p, M);
    if (g_v) {
        // ZB-V: the first stage holds 2p chunk-micro-batches at its peak (2p · L/(2p) = L layers: 1F1B's) once M >= 2p,
        // fewer below; activations only (its W's follow their B's). Rank r keeps r W's back: 2p + r at most.
        const ZeroBubblePeak zp = zero_bubble_peak(ops[0], 2);
        CHECK(zp.pending == 0 && zp.saved == zp.held && (M >= 2 * p ? zp.held == 2 * p : zp.held <= 2 * p),
              "%s: first stage holds %d (%d saved, %d W inputs), expected %s2p = %d saved", what, zp.held, zp.saved, zp.pending,
              M >= 2 * p ? "" : "at most ", 2 * p);
        for (int r = 0; r < p; r++)
            CHECK(zero_bubble_peak(ops[r], 2).held <= 2 * p + r, "%s rank %d: more than 2p + r in flight", what, r);
        CHECK(pipe_peak_in_flight(ops[0]) == zp.held, "%s: peak %d, F-to-W peak %d", what, pipe_peak_in_flight(ops[0]), zp.held);
        return;
    }
    if (is_zero_bubble(s)) {
        // Micro-batches whose F ran and W not (activations or W inputs): at most the first stage's peak anywhere.
        for (int r = 0; r < p; r++) {
            int live = 0, most = 0;
            for (const PipeOp& op : ops[r]) most = std::max(most, live += op.kind == PipeOp::Forward ? 1 : op.kind == PipeOp::WeightGrad ? -1 : 0);
            CHECK(most <= want_peak, "%s rank %d: %d micro-batches between F and W, more than %d", what, r, most, want_peak);
        }
        // The first stage runs each W right after its B (lag 0): at its peak it holds saved activations only,
        // min(p, M) (ZB-H1: 1F1B's) or min(2p − 1, M) (ZB-H2).
        const ZeroBubblePeak zp = zero_bubble_peak(ops[0]);
        CHECK(zp.held == want_peak && zp.saved == want_peak && zp.pending == 0, "%s: first stage holds %d (%d saved, %d W "
              "inputs) at its peak, expected %d saved", what, zp.held, zp.saved, zp.pending, want_peak);
        // ZB-H1's last stage (lag p − 1): one micro-batch's activations and p − 1 micro-batches' W inputs, once M > p.
        const ZeroBubblePeak last = zero_bubble_peak(ops[p - 1]);
        if (s == PipeSchedule::ZeroBubbleH1 && M > p && p > 1)
            CHECK(last.saved == 1 && last.pending == p - 1, "%s: last stage peak %d saved + %d W inputs, expected 1 + %d", what,
                  last.saved, last.pending, p - 1);
    }
    if (s == PipeSchedule::Interleaved) want_peak = M == p ? M * m : std::min((p - 1) * 2 + (m - 1) * p + 1, M * m);
    CHECK(peak == want_peak, "%s: first stage peak %d in flight, expected %d", what, peak, want_peak);
    if (s == PipeSchedule::Interleaved && M > p) {
        // In layers, with L = p·m·k layers (k per chunk): L·(1 + (p−1)/(p·m)).
        const int k = 3, L = p * m * k;
        CHECK(peak * k == L + (p - 1) * k, "%s: %d layer-micro-batches, expected L(1 + (p-1)/(pm)) = %d", what, peak * k,
              L + (p - 1) * k);
    }
}

int main() {
    int layouts = 0;
    for (int p = 1; p <= 8; p++)
        for (int M = 1; M <= 16; M++) {
            check_layout(PipeSchedule::AFAB, p, M, 1);
            check_layout(PipeSchedule::OneFOneB, p, M, 1);
            check_layout(PipeSchedule::ZeroBubbleH1, p, M, 1);
            check_layout(PipeSchedule::ZeroBubbleH2, p, M, 1);
            layouts += 4;
            if (p > 1) check_layout(PipeSchedule::ZeroBubbleV, p, M, 2), layouts++;
            for (int m = 2; m <= 4; m++)
                if (pipe_schedule_problem(PipeSchedule::Interleaved, p, M, m).empty()) {
                    check_layout(PipeSchedule::Interleaved, p, M, m);
                    layouts++;
                }
        }
    // Whole units against posted exchanges, timed (a forward 1, a B or W 2; communication free): under 1F1B a whole-unit
    // exchange costs nothing (every op alone), under ZB-H2 its steady (F, B) unit makes the F wait for the B's
    // gradient, and the step is longer than the schedule's own dependencies allow (pipeline_simulation.h); the posted
    // exchanges wait for inputs only, so their step is exactly that (drain_posted runs the same dependencies).
    for (int p = 2; p <= 4; p++)
        for (int M = 2 * p; M <= 16; M += p) {
            std::vector<int> w1(p), w2(p);
            for (int r = 0; r < p; r++)
                w1[r] = pipe_warmup(PipeSchedule::OneFOneB, p, r, M, 1), w2[r] = pipe_warmup(PipeSchedule::ZeroBubbleH2, p, r, M, 1);
            const double whole_1f1b = step_time(PipeSchedule::OneFOneB, p, M, 1, w1), whole_h2 = step_time(PipeSchedule::ZeroBubbleH2, p, M, 1, w2);
            const double deps_1f1b = pipe_simulate(PipeSchedule::OneFOneB, p, M, 1, 1, 2, 0).step;  // (its backward: 2)
            const double deps_h2 = pipe_simulate(PipeSchedule::ZeroBubbleH2, p, M, 1, 1, 2, 2).step;
            CHECK(whole_1f1b == deps_1f1b, "1f1b p=%d M=%d: whole units %g, dependencies %g", p, M, whole_1f1b, deps_1f1b);
            CHECK(whole_h2 > deps_h2, "zb-h2 p=%d M=%d: whole units %g should stall beyond the dependencies' %g", p, M, whole_h2, deps_h2);
        }
    // The paper's example: p = 2, m = 2, L = 4, M = 4 holds 5 layer-micro-batches on the first stage.
    CHECK(pipe_peak_in_flight(pipe_schedule(PipeSchedule::Interleaved, 2, 0, 4, 2)) == 5, "p=2 m=2 M=4: 5 in flight");
    // Refusals, naming the numbers.
    CHECK(pipe_schedule_problem(PipeSchedule::Interleaved, 2, 3, 2).find("3 micro-batches are not a multiple of --pp 2") !=
              std::string::npos, "%s", pipe_schedule_problem(PipeSchedule::Interleaved, 2, 3, 2).c_str());
    CHECK(!pipe_schedule_problem(PipeSchedule::AFAB, 2, 4, 2).empty(), "AFAB with chunks accepted");
    CHECK(pipe_schedule_problem(PipeSchedule::OneFOneB, 4, 1, 1).empty(), "1F1B with M < p refused");
    CHECK(pipe_ideal_bubble(2, 8, 1) == 1.0 / 8 && pipe_ideal_bubble(4, 8, 2) == 3.0 / 16, "ideal bubble");
    printf("%d layouts simulated under NCCL's rules; the ungrouped order deadlocks in %d of %d multi-stage layouts\n", layouts,
           g_ungrouped_stuck, g_ungrouped_total);
    return test_finish("test_pipeline_schedule");
}
