#include "chatbench/chatbot.h"

#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "checkpoint.h"
#include "fastdecode.h"
#include "model.h"
#include "runstate.h"
#include "snapshot.h"
#include "text.h"
#include "torchutil.h"
#include "tracedreply.h"
#include "tracejson.h"
#include "trainstep.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>

namespace chatbench {

struct Chatbot::Impl {
    TrainConfig cfg;
    Tokenizer tok;
    Seq2Seq model { nullptr };
    torch::Device device { torch::kCPU };
    std::string note;
    int64_t step = 0;
    uint64_t corpusFingerprint = 0; // of the pairs the run trained on (0: not known)
    // The batch-1 CPU path, built on first use (the weights never change after load).
    std::once_flag fastOnce;
    std::unique_ptr<FastDecoder> fast;
};

Chatbot::Chatbot(std::shared_ptr<Impl> impl)
    : m_impl(std::move(impl))
{
}

namespace {

// For one call on a GPU, the maths mode the run trained in (TrainConfig::tf32; off: IEEE fp32
// for cuBLAS and cuDNN alike), then the process' own again. torch's default runs cuDNN's LSTM in
// TF32: on an H200 that put a trained seed model's step-by-step logits 1e-3 away from its
// teacher-forced pass, and the chat pane called a correct loop broken.
class RunMaths {
public:
    RunMaths(const torch::Device& device, bool tf32)
    {
        if (device.is_cuda())
            m_scope.emplace(tf32);
    }

private:
    std::optional<Tf32Scope> m_scope;
};

} // namespace

const Tokenizer& Chatbot::tokenizer() const
{
    return m_impl->tok;
}
const TrainConfig& Chatbot::config() const
{
    return m_impl->cfg;
}
std::string Chatbot::device() const
{
    return m_impl->device.str();
}
std::string Chatbot::note() const
{
    return m_impl->note;
}
int64_t Chatbot::step() const
{
    return m_impl->step;
}
uint64_t Chatbot::corpusFingerprint() const
{
    return m_impl->corpusFingerprint;
}

Chatbot Chatbot::load(const std::string& runDir, const std::string& device, Weights weights)
{
    requireThreadsStart(torch::get_num_threads()); // said in words, not by libgomp's exit
    auto impl = std::make_shared<Impl>();
    impl->cfg = loadRunConfig(runDir);
    std::error_code ec; // config.json alone: a training or import stopped before its first checkpoint
    if (!isRun(runDir) && !std::filesystem::exists(bestStatePath(runDir), ec))
        throw Error(runDir, 0,
            "holds a run that stopped before its first checkpoint (config.json without state.json or "
            "checkpoints): nothing to chat with yet; train or import into it again");
    impl->tok = Tokenizer::load(vocabPath(runDir));
    checkRunTokenizer(runDir, impl->tok, impl->cfg, /*size=*/true);
    const ResolvedDevice r = resolveDevice(device, Precision::FP32);
    impl->note = r.note;
    impl->device = parseDevice(r.device);
    // The model config.json describes is built before a checkpoint can say it does not match: one
    // edited to hidden 8192 and 8 layers took every byte of memory until the system killed the
    // process. Its weights and the checkpoint's copy of them, fp32, must fit.
    if (impl->device.is_cpu())
        requireMemoryFor(impl->cfg.model, 8.0, "loading",
            "was config.json edited? put back the sizes the run was trained with", configPath(runDir));
    impl->model = Seq2Seq(impl->cfg.model);
    impl->model->to(impl->device);
    if (weights == Weights::Best) {
        const RunState best = loadBestCheckpoint(runDir, impl->model);
        checkRunVocabulary(impl->tok, best);
        impl->step = best.step;
        try {
            impl->corpusFingerprint = loadState(runDir).corpusFingerprint;
        } catch (const Error&) {
        }
        impl->model->eval();
        return Chatbot(impl);
    }
    // A run that is still training replaces its checkpoint now and then; when the file that
    // state.json named is gone by the time we open it, read state.json again.
    for (int attempt = 0;; ++attempt) {
        std::string recovered;
        RunState state = loadState(runDir, &recovered);
        checkRunVocabulary(impl->tok, state);
        state.vocabFingerprint = vocabularyFingerprint(impl->tok); // a fallback must match it
        try {
            std::string fellBack;
            impl->step = loadUsableCheckpoint(runDir, state, impl->model, nullptr, &fellBack).step;
            impl->corpusFingerprint = state.corpusFingerprint;
            // config.json edited since the run started (a resume refuses that): chat follows the
            // file, so that a longer prompt or reply limit can be tried, and says so.
            std::string edited;
            if (!state.recipe.empty())
                for (const std::string& change : recipeChanges(state.recipe, impl->cfg))
                    edited += (edited.empty() ? "" : "; ") + change;
            if (!edited.empty())
                edited = configPath(runDir) + " differs from the settings this run trained with (" + edited
                    + "): replies follow config.json";
            for (const std::string* n : { &recovered, &fellBack, &edited })
                if (!n->empty())
                    impl->note += (impl->note.empty() ? "" : "; ") + *n;
            break;
        } catch (const Error&) {
            if (attempt >= 3 || loadState(runDir).checkpoint == state.checkpoint)
                throw;
        }
    }
    impl->model->eval();
    return Chatbot(impl);
}

Chatbot makeSnapshot(const TrainConfig& cfg, const Tokenizer& tok, Seq2Seq& model, int64_t step)
{
    torch::NoGradGuard noGrad;
    auto impl = std::make_shared<Chatbot::Impl>();
    impl->cfg = cfg;
    impl->tok = tok;
    impl->device = model->parameters().front().device();
    impl->model = Seq2Seq(cfg.model);
    impl->model->to(impl->device);
    auto dst = impl->model->named_parameters();
    for (const auto& p : model->named_parameters())
        dst[p.key()].copy_(p.value());
    impl->model->eval();
    impl->step = step;
    return Chatbot(impl);
}

namespace {

std::vector<LayerState> layerStates(const torch::Tensor& h, const torch::Tensor& c, int64_t b)
{
    std::vector<LayerState> out;
    for (int64_t l = 0; l < h.size(0); ++l)
        out.push_back({ toVector(h[l][b]), toVector(c[l][b]) });
    return out;
}

// Source ids for one prompt; an empty prompt becomes one <unk>.
std::vector<int64_t> encodeSource(const Tokenizer& tok, const ModelConfig& cfg, const std::string& text, Encoded* info)
{
    // As the corpus' text was read: a CR from a Windows file or `read` is a line break, U+FEFF
    // (Notepad's byte-order mark before the first question) is dropped.
    Encoded e = tok.encode(text::normaliseBreaks(text), static_cast<size_t>(cfg.maxSourceLength));
    std::vector<int64_t> ids = e.ids;
    if (ids.empty())
        ids.push_back(Tokenizer::kUnk);
    if (info)
        *info = std::move(e);
    return ids;
}

// One LSTM step for every layer written out gate by gate (PyTorch order i, f, g, o), from the
// module's own weights. Returns the top layer's gates; `diff` gets the largest difference to
// the module's (h, c).
struct Gates {
    torch::Tensor i, f, g, o;
};
Gates replayStep(Seq2SeqImpl& m, int64_t token, const torch::Tensor& hIn, const torch::Tensor& cIn,
    const torch::Tensor& hOut, const torch::Tensor& cOut, double* diff)
{
    auto params = m.decoder->named_parameters();
    auto x = m.decoderEmbedding(torch::tensor({ token }, torch::TensorOptions().device(hIn.device()))); // (1, E)
    Gates top;
    *diff = 0;
    for (int64_t l = 0; l < hIn.size(0); ++l) {
        const std::string k = std::to_string(l);
        auto gates = torch::matmul(x, params["weight_ih_l" + k].t()) + params["bias_ih_l" + k]
            + torch::matmul(hIn[l], params["weight_hh_l" + k].t()) + params["bias_hh_l" + k]; // (1, 4H)
        auto chunks = gates.chunk(4, /*dim=*/1);
        Gates gl { torch::sigmoid(chunks[0]), torch::sigmoid(chunks[1]), torch::tanh(chunks[2]),
            torch::sigmoid(chunks[3]) };
        auto c = gl.f * cIn[l] + gl.i * gl.g; // (1, H)
        auto h = gl.o * torch::tanh(c);
        *diff = std::max({ *diff, maxAbsDiff(h, hOut[l]), maxAbsDiff(c, cOut[l]) });
        x = h;
        top = gl;
    }
    return top;
}

// Decoding options a user typed: NaN, infinities and out-of-range values are errors, not silent
// greedy decoding.
void checkOptions(const DecodeOptions& o)
{
    if (!std::isfinite(o.temperature) || o.temperature <= 0 || o.temperature > 1000)
        throw Error("temperature must be a number in (0, 1000]");
    if (o.topK < 0)
        throw Error("top-k must be >= 0 (0 = all tokens)");
    if (o.beamWidth < 1 || o.beamWidth > 1000)
        throw Error("beam width must be 1..1000");
    if (o.maxLength < 0)
        throw Error("max length must be >= 0 (0 = the model's)");
    if (o.traceTopK < 0)
        throw Error("trace top-k must be >= 0");
}

// Greedy choice that never picks <pad> or <start>.
int64_t argmaxToken(const torch::Tensor& logits)
{
    auto l = logits.to(torch::kFloat32).clone();
    l[Tokenizer::kPad] = -INFINITY;
    l[Tokenizer::kStart] = -INFINITY;
    return l.argmax().item<int64_t>();
}

// The forced prefix of a what-if reply: known tokens, never <pad> or <start>, <end> only last.
void checkForced(const DecodeOptions& o, int64_t V)
{
    for (size_t k = 0; k < o.forcedPrefix.size(); ++k) {
        const int64_t id = o.forcedPrefix[k];
        if (id < 0 || id >= V)
            throw Error(
                "forced token " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
        if (id == Tokenizer::kPad || id == Tokenizer::kStart)
            throw Error("a reply cannot be forced to <pad> or <start>");
        if (id == Tokenizer::kEnd && k + 1 < o.forcedPrefix.size())
            throw Error("<end> can only be the last forced token");
    }
}

// Beam search from (h0, c0), its first tokens forced to opt.forcedPrefix. With opt.trace, `tree`
// gets every candidate of every step (see BeamNode) and the returned reply's path is marked
// chosen; without, it stays empty.
std::vector<int64_t> beamSearch(Seq2SeqImpl& m, const Tokenizer& tok, const EncoderOutput& enc, const torch::Tensor& h0,
    const torch::Tensor& c0, const DecodeOptions& opt, int maxSteps, std::vector<BeamNode>& tree)
{
    struct Hyp {
        std::vector<int64_t> tokens;
        double logp = 0;
        torch::Tensor h, c; // the state its last token is fed from
        int node = 0; // its last token's node
        bool ended = false; // its last token is <end>
    };
    const int64_t V = tok.size();
    const int width = std::max(1, opt.beamWidth);
    const bool record = opt.trace;
    tree.clear();
    BeamNode root;
    root.id = Tokenizer::kStart;
    root.word = tok.word(Tokenizer::kStart);
    root.kept = true;
    tree.push_back(root);
    std::vector<Hyp> beams { { {}, 0.0, h0, c0, 0 } };
    std::vector<Hyp> done;
    auto topLayer = [](const torch::Tensor& t) { return toVector(t[t.size(0) - 1][0]); };
    for (int t = 0; t < maxSteps && !beams.empty(); ++t) {
        throwIfCancelled(opt);
        const bool forcing = t < static_cast<int>(opt.forcedPrefix.size());
        struct Cand {
            size_t beam;
            int64_t token;
            double tokenLogp;
            double logp;
        };
        std::vector<Cand> cands;
        std::vector<DecoderOutput> outs;
        for (size_t b = 0; b < beams.size(); ++b) {
            const auto& hyp = beams[b];
            const bool reset = opt.handoff == HandoffMode::ResetEachStep && t > 0;
            auto hIn = reset ? torch::zeros_like(hyp.h) : hyp.h;
            auto cIn = reset ? torch::zeros_like(hyp.c) : hyp.c;
            const int64_t last = hyp.tokens.empty() ? Tokenizer::kStart : hyp.tokens.back();
            outs.push_back(
                m.decode(torch::tensor({ { last } }, torch::TensorOptions().device(h0.device())), hIn, cIn, enc));
            if (record) {
                tree[static_cast<size_t>(hyp.node)].h = topLayer(outs.back().h);
                tree[static_cast<size_t>(hyp.node)].c = topLayer(outs.back().c);
            }
            auto lp = torch::log_softmax(outs.back().logits[0][0].to(torch::kFloat32), -1).cpu();
            lp[Tokenizer::kPad] = -INFINITY;
            lp[Tokenizer::kStart] = -INFINITY;
            if (forcing) {
                const int64_t id = opt.forcedPrefix[static_cast<size_t>(t)];
                const double l = lp[id].item<double>();
                cands.push_back({ b, id, l, hyp.logp + l });
                continue;
            }
            // <pad> and <start> are never candidates, however wide the beam.
            auto [vals, idx] = lp.topk(std::min<int64_t>(width, V - 2));
            for (int64_t k = 0; k < vals.size(0); ++k) {
                const double l = vals[k].item<double>();
                if (std::isfinite(l))
                    cands.push_back({ b, idx[k].item<int64_t>(), l, hyp.logp + l });
            }
        }
        std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.logp > b.logp; });
        std::vector<Hyp> next;
        for (const Cand& c : cands) {
            BeamNode n;
            n.parent = beams[c.beam].node;
            n.step = t + 1;
            n.id = c.token;
            n.word = tok.word(c.token);
            n.logProbability = c.tokenLogp;
            n.score = c.logp;
            n.forced = forcing;
            n.finished = c.token == Tokenizer::kEnd;
            n.kept = static_cast<int>(next.size()) < width;
            if (!n.kept && !record)
                break; // the rest are pruned too
            tree.push_back(std::move(n));
            if (!tree.back().kept)
                continue;
            Hyp h { beams[c.beam].tokens, c.logp, outs[c.beam].h, outs[c.beam].c, static_cast<int>(tree.size() - 1) };
            if (c.token == Tokenizer::kEnd) {
                h.ended = true;
                done.push_back(std::move(h));
            } else {
                h.tokens.push_back(c.token);
                next.push_back(std::move(h));
            }
        }
        beams = std::move(next);
        if (static_cast<int>(done.size()) >= width)
            break;
    }
    // Cut by the length limit before `width` replies ended: the cut replies compete with the ended
    // ones, as greedy's cut reply is given (found by an outside pass: an <end> at log p -13 was
    // chosen over a cut reply at -0.002, because only ended replies were compared).
    if (static_cast<int>(done.size()) < width)
        done.insert(done.end(), beams.begin(), beams.end());
    // Length-normalised: mean log-probability per emitted token (an <end> counts).
    auto norm = [](const Hyp& h) {
        return h.logp / static_cast<double>(std::max<size_t>(1, h.tokens.size() + (h.ended ? 1 : 0)));
    };
    const Hyp& best
        = *std::max_element(done.begin(), done.end(), [&](const Hyp& a, const Hyp& b) { return norm(a) < norm(b); });
    for (int n = best.node; n >= 0; n = tree[static_cast<size_t>(n)].parent)
        tree[static_cast<size_t>(n)].chosen = true;
    if (!record)
        tree.clear();
    return best.tokens;
}

} // namespace

Reply Chatbot::reply(const std::string& text, const DecodeOptions& opt) const
{
    checkOptions(opt);
    Impl& I = *m_impl;
    checkForced(opt, I.tok.size());
    const RunMaths maths(I.device, I.cfg.tf32);
    torch::NoGradGuard noGrad;
    I.model->eval();
    const auto dev = torch::TensorOptions().device(I.device);
    Reply r;
    StateTrace& tr = r.trace;
    Encoded info;
    tr.inputIds = encodeSource(I.tok, I.cfg.model, text, &info);
    tr.inputWords = info.words;
    tr.unknownWords = info.unknown;
    tr.wordsLeftOut = info.wordsLeftOut;
    tr.handoff = opt.handoff;
    tr.device = I.device.str();
    tr.hidden = I.cfg.model.hidden;
    tr.layers = I.cfg.model.layers;

    const int limit = I.cfg.model.maxTargetLength - 1;
    const int maxSteps = opt.maxLength > 0 ? std::min(opt.maxLength, limit) : limit;
    // One prompt on the CPU steps on the fast batch-1 path (greedy and sampled replies; beam
    // search and attention take the general path below).
    if (I.device.is_cpu() && !I.cfg.model.attention && opt.method != DecodeMethod::Beam) {
        std::call_once(I.fastOnce, [&] { I.fast = std::make_unique<FastDecoder>(*I.model); });
        if (!opt.trace && opt.method == DecodeMethod::Greedy && opt.handoff == HandoffMode::Correct
            && opt.forcedPrefix.empty()) {
            r.ids = I.fast->reply(tr.inputIds, maxSteps, /*stopAtEnd=*/true, &r.score);
            r.text = I.tok.decode(r.ids);
            // The mean covers every step taken: the words, and the <end> unless the limit came first.
            const bool ended = r.ids.size() < static_cast<size_t>(maxSteps);
            r.logProbability = r.score * static_cast<double>(r.ids.size() + (ended ? 1 : 0));
        } else {
            tracedReply(*I.fast, *I.model, I.tok, tr.inputIds, opt, maxSteps, /*stopAtEnd=*/true, r);
        }
        return r;
    }

    auto src = torch::tensor(tr.inputIds, dev).unsqueeze(0); // (1, S)
    auto len = torch::tensor({ static_cast<int64_t>(tr.inputIds.size()) }, torch::kInt64); // (1)
    const EncoderOutput enc = I.model->encode(src, len);
    tr.encoderFinal = layerStates(enc.h, enc.c, 0);
    for (int64_t s = 0; s < enc.outputs.size(1); ++s)
        tr.encoderTopH.push_back(toVector(enc.outputs[0][s]));

    // The handoff: the decoder's initial state per layer.
    const bool zero = opt.handoff == HandoffMode::ZeroInit;
    const auto h0 = zero ? torch::zeros_like(enc.h) : enc.h.clone();
    const auto c0 = zero ? torch::zeros_like(enc.c) : enc.c.clone();
    tr.decoderInitial = layerStates(h0, c0, 0);

    std::vector<int64_t> forced;
    if (opt.method == DecodeMethod::Beam)
        forced = beamSearch(*I.model, I.tok, enc, h0, c0, opt, maxSteps, r.beamTree);
    else
        forced = opt.forcedPrefix;
    std::mt19937_64 rng(opt.seed);

    auto h = h0, c = c0;
    int64_t input = Tokenizer::kStart;
    std::vector<int64_t> inputs;
    std::vector<torch::Tensor> stepLogits, statesIn, statesOut; // states as (2, L, H)
    double logpSum = 0;
    for (int t = 0; t < maxSteps; ++t) {
        throwIfCancelled(opt);
        const auto t0 = std::chrono::steady_clock::now();
        const bool reset = opt.handoff == HandoffMode::ResetEachStep && t > 0;
        auto hIn = reset ? torch::zeros_like(h) : h;
        auto cIn = reset ? torch::zeros_like(c) : c;
        DecoderOutput d = I.model->decode(torch::tensor({ { input } }, dev), hIn, cIn, enc);
        auto logits = d.logits[0][0].to(torch::kFloat32); // (V)
        int64_t next;
        if (t < static_cast<int>(forced.size()))
            next = forced[static_cast<size_t>(t)];
        else if (opt.method == DecodeMethod::Beam)
            next = Tokenizer::kEnd;
        else if (opt.method == DecodeMethod::Sample)
            next = sampleToken(logits, opt, rng);
        else
            next = argmaxToken(logits);

        DecoderStep step;
        step.inputId = input;
        step.inputWord = I.tok.word(input);
        step.chosenId = next;
        step.chosenWord = I.tok.word(next);
        auto probs = torch::softmax(logits, -1);
        logpSum += std::log(std::max(1e-30, probs[next].item<double>()));
        auto [pv, pi] = probs.topk(std::min<int64_t>(std::max(1, opt.traceTopK), probs.size(0)));
        for (int64_t k = 0; k < pv.size(0); ++k) {
            const int64_t id = pi[k].item<int64_t>();
            step.topK.push_back({ id, I.tok.word(id), pv[k].item<float>() });
        }
        step.stateIn = layerStates(hIn, cIn, 0);
        step.stateOut = layerStates(d.h, d.c, 0);
        double replayDiff = 0;
        Gates g = replayStep(
            *I.model, input, hIn.select(1, 0), cIn.select(1, 0), d.h.select(1, 0), d.c.select(1, 0), &replayDiff);
        tr.checks.gateReplayMaxDiff = std::max(tr.checks.gateReplayMaxDiff, replayDiff);
        step.inputGate = toVector(g.i);
        step.forgetGate = toVector(g.f);
        step.cellGate = toVector(g.g);
        step.outputGate = toVector(g.o);
        if (d.attention.defined())
            step.attention = toVector(d.attention[0][0]);
        if (opt.recordLogits)
            step.logits = toVector(logits);
        step.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        tr.steps.push_back(std::move(step));

        inputs.push_back(input);
        stepLogits.push_back(logits);
        statesIn.push_back(torch::stack({ hIn.select(1, 0), cIn.select(1, 0) }));
        statesOut.push_back(torch::stack({ d.h.select(1, 0), d.c.select(1, 0) }));
        h = d.h;
        c = d.c;
        if (next == Tokenizer::kEnd)
            break;
        r.ids.push_back(next);
        input = next;
    }
    r.text = I.tok.decode(r.ids);
    r.logProbability = logpSum;
    r.score = tr.steps.empty() ? 0 : logpSum / static_cast<double>(tr.steps.size());

    // The three checks.
    TraceChecks& ck = tr.checks;
    ck.handoffMaxDiff = std::max(maxAbsDiff(h0, enc.h), maxAbsDiff(c0, enc.c));
    ck.handoffEqual = ck.handoffMaxDiff == 0.0;
    ck.carriedMaxDiff = 0;
    for (size_t t = 1; t < statesIn.size(); ++t)
        ck.carriedMaxDiff = std::max(ck.carriedMaxDiff, maxAbsDiff(statesIn[t], statesOut[t - 1]));
    ck.stateCarried = ck.carriedMaxDiff == 0.0;
    // Reference: the same tokens in one teacher-forced pass, started from the encoder's state.
    auto reference = I.model->decode(torch::tensor(inputs, dev).unsqueeze(0), enc.h, enc.c, enc).logits[0]; // (T, V)
    ck.teacherForcedMaxDiff = maxAbsDiff(torch::stack(stepLogits), reference.to(torch::kFloat32));
    ck.teacherForcedTolerance
        = TraceChecks::logitTolerance(reference.abs().max().item<double>(), I.device.is_cuda() && I.cfg.tf32);
    ck.teacherForcedEqual = ck.teacherForcedMaxDiff <= ck.teacherForcedTolerance;
    return r;
}

std::vector<int64_t> Chatbot::sourceIds(const std::string& text) const
{
    return encodeSource(m_impl->tok, m_impl->cfg.model, text, nullptr);
}

namespace {

// The encoder over a padded batch of token lists (each checked: non-empty, known ids, at most
// the model's source length).
EncoderOutput encodeBatch(Chatbot::Impl& I, const std::vector<std::vector<int64_t>>& ids)
{
    const int64_t N = static_cast<int64_t>(ids.size());
    int64_t S = 1;
    for (const auto& v : ids) {
        if (v.empty() || v.size() > static_cast<size_t>(I.cfg.model.maxSourceLength))
            throw Error("a source must have 1.." + std::to_string(I.cfg.model.maxSourceLength) + " tokens");
        for (int64_t id : v)
            if (id < 0 || id >= I.tok.size())
                throw Error("source token " + std::to_string(id) + " is outside the vocabulary");
        S = std::max<int64_t>(S, static_cast<int64_t>(v.size()));
    }
    auto src = torch::zeros({ N, S }, torch::kInt64);
    auto len = torch::zeros({ N }, torch::kInt64);
    auto* sp = src.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i) {
        const auto& v = ids[static_cast<size_t>(i)];
        std::copy(v.begin(), v.end(), sp + i * S);
        len[i] = static_cast<int64_t>(v.size());
    }
    return I.model->encode(src.to(I.device), len);
}

} // namespace

std::vector<std::vector<LayerState>> Chatbot::encoderFinalStates(const std::vector<std::vector<int64_t>>& sources) const
{
    Impl& I = *m_impl;
    std::vector<std::vector<LayerState>> out;
    if (sources.empty())
        return out;
    const RunMaths maths(I.device, I.cfg.tf32);
    torch::NoGradGuard noGrad;
    I.model->eval();
    const EncoderOutput enc = encodeBatch(I, sources);
    const auto h = enc.h.to(torch::kCPU, torch::kFloat32), c = enc.c.to(torch::kCPU, torch::kFloat32);
    for (int64_t i = 0; i < static_cast<int64_t>(sources.size()); ++i)
        out.push_back(layerStates(h, c, i));
    return out;
}

std::vector<double> Chatbot::gradientTimesInput(
    const std::vector<int64_t>& source, int64_t token, HandoffMode handoff) const
{
    Impl& I = *m_impl;
    encodeBatch(I, { source }); // the checks on the source
    if (token < 0 || token >= I.tok.size())
        throw Error("token " + std::to_string(token) + " is outside the vocabulary");
    I.model->eval();
    const RunMaths maths(I.device, I.cfg.tf32);
    torch::AutoGradMode withGrad(true);
    const auto dev = torch::TensorOptions().device(I.device);
    const auto S = static_cast<int64_t>(source.size());
    // One unpadded sequence: the LSTM's final state is the state at its last token, no packing.
    auto x = I.model->encoderEmbedding(torch::tensor(source, dev.dtype(torch::kInt64)).unsqueeze(0))
                 .detach()
                 .requires_grad_(true); // (1, S, E)
    auto [out, state] = I.model->encoder->forward(x);
    EncoderOutput enc { out, std::get<0>(state), std::get<1>(state), torch::ones({ 1, S }, dev.dtype(torch::kBool)) };
    const bool zero = handoff == HandoffMode::ZeroInit;
    auto logits = I.model
                      ->decode(torch::tensor({ { Tokenizer::kStart } }, dev.dtype(torch::kInt64)),
                          zero ? torch::zeros_like(enc.h) : enc.h, zero ? torch::zeros_like(enc.c) : enc.c, enc)
                      .logits[0][0]
                      .to(torch::kFloat32);
    auto logp = torch::log_softmax(logits, -1)[token];
    // Only the input's gradient: the parameters' .grad stay untouched (the model is shared).
    auto grads = torch::autograd::grad({ logp }, { x }, {}, /*retain_graph=*/false, /*create_graph=*/false,
        /*allow_unused=*/true);
    std::vector<double> shares(static_cast<size_t>(S), 0.0);
    if (!grads[0].defined())
        return shares; // the decoder never saw the source
    auto share = (grads[0] * x.detach()).sum(-1)[0].to(torch::kCPU, torch::kFloat64).contiguous(); // (S)
    std::copy_n(share.data_ptr<double>(), S, shares.begin());
    return shares;
}

std::vector<Reply> Chatbot::replyBatch(const std::vector<std::string>& texts, const DecodeOptions& opt) const
{
    std::vector<std::vector<int64_t>> ids;
    std::vector<Encoded> info(texts.size());
    for (size_t i = 0; i < texts.size(); ++i)
        ids.push_back(encodeSource(m_impl->tok, m_impl->cfg.model, texts[i], &info[i]));
    std::vector<Reply> replies = replyBatchIds(ids, opt);
    for (size_t i = 0; i < texts.size(); ++i) {
        replies[i].trace.inputWords = std::move(info[i].words);
        replies[i].trace.unknownWords = std::move(info[i].unknown);
        replies[i].trace.wordsLeftOut = info[i].wordsLeftOut;
    }
    return replies;
}

std::vector<Reply> Chatbot::replyBatchIds(const std::vector<std::vector<int64_t>>& ids, const DecodeOptions& opt) const
{
    checkOptions(opt);
    Impl& I = *m_impl;
    std::vector<Reply> replies(ids.size());
    if (ids.empty())
        return replies;
    const RunMaths maths(I.device, I.cfg.tf32);
    torch::NoGradGuard noGrad;
    I.model->eval();
    const auto dev = torch::TensorOptions().device(I.device);
    const int64_t N = static_cast<int64_t>(ids.size());
    const EncoderOutput enc = encodeBatch(I, ids);
    const bool zero = opt.handoff == HandoffMode::ZeroInit;
    auto h = zero ? torch::zeros_like(enc.h) : enc.h;
    auto c = zero ? torch::zeros_like(enc.c) : enc.c;
    for (int64_t i = 0; i < N; ++i) {
        auto& tr = replies[static_cast<size_t>(i)].trace;
        tr.inputIds = ids[static_cast<size_t>(i)];
        tr.handoff = opt.handoff;
        tr.encoderFinal = layerStates(enc.h, enc.c, i);
        tr.device = I.device.str();
    }
    const int limit = I.cfg.model.maxTargetLength - 1;
    const int maxSteps = opt.maxLength > 0 ? std::min(opt.maxLength, limit) : limit;
    auto input = torch::full({ N, 1 }, Tokenizer::kStart, dev.dtype(torch::kInt64));
    std::vector<bool> done(ids.size(), false);
    for (int t = 0; t < maxSteps; ++t) {
        throwIfCancelled(opt);
        if (opt.handoff == HandoffMode::ResetEachStep && t > 0) {
            h = torch::zeros_like(h);
            c = torch::zeros_like(c);
        }
        DecoderOutput d = I.model->decode(input, h, c, enc);
        auto logits = d.logits.squeeze(1).to(torch::kFloat32).clone(); // (N, V)
        logits.select(1, Tokenizer::kPad).fill_(-INFINITY);
        logits.select(1, Tokenizer::kStart).fill_(-INFINITY);
        auto next = logits.argmax(-1).cpu(); // (N)
        bool all = true;
        for (int64_t i = 0; i < N; ++i) {
            auto& rep = replies[static_cast<size_t>(i)];
            const int64_t tok = next[i].item<int64_t>();
            if (!done[static_cast<size_t>(i)]) {
                if (tok == Tokenizer::kEnd)
                    done[static_cast<size_t>(i)] = true;
                else
                    rep.ids.push_back(tok);
            }
            all = all && done[static_cast<size_t>(i)];
        }
        h = d.h;
        c = d.c;
        input = next.unsqueeze(1).to(I.device);
        if (all)
            break;
    }
    for (auto& rep : replies)
        rep.text = I.tok.decode(rep.ids);
    return replies;
}

HandoffDiagnosis diagnoseHandoff(const Chatbot& bot, const std::vector<std::string>& prompts)
{
    HandoffDiagnosis d;
    d.prompts = static_cast<int>(prompts.size());
    // Prompts the tokenizer reads alike (all of their words unknown: another language) can only
    // get one reply, whatever the loop does.
    std::set<std::vector<int64_t>> inputs;
    for (const std::string& p : prompts) {
        const std::vector<int64_t> ids = bot.sourceIds(p);
        inputs.insert(ids);
        d.unknownOnly += std::all_of(ids.begin(), ids.end(), [](int64_t id) { return id == Tokenizer::kUnk; }) ? 1 : 0;
    }
    d.distinctInputs = static_cast<int>(inputs.size());
    const int limit = bot.config().model.maxTargetLength - 1; // the words a reply may have
    for (HandoffMode mode : { HandoffMode::Correct, HandoffMode::ZeroInit, HandoffMode::ResetEachStep }) {
        DecodeOptions opt;
        opt.handoff = mode;
        std::map<std::string, int> counts;
        int unended = 0;
        // In chunks, so a long prompt list never builds one huge padded batch.
        for (size_t at = 0; at < prompts.size(); at += 64) {
            const std::vector<std::string> chunk(prompts.begin() + static_cast<ptrdiff_t>(at),
                prompts.begin() + static_cast<ptrdiff_t>(std::min(prompts.size(), at + 64)));
            for (const Reply& r : bot.replyBatch(chunk, opt)) {
                ++counts[r.text];
                unended += static_cast<int>(r.ids.size()) >= limit ? 1 : 0;
            }
        }
        HandoffDiagnosis::Mode m;
        m.handoff = mode;
        m.unended = unended;
        m.distinct = static_cast<int>(counts.size());
        for (const auto& [text, n] : counts)
            if (n > m.mostCommonCount) {
                m.mostCommon = text;
                m.mostCommonCount = n;
            }
        d.modes.push_back(m);
    }
    const auto& ok = d.modes[0];
    const auto& zero = d.modes[1];
    const auto& reset = d.modes[2];
    std::ostringstream v;
    const int n = d.prompts;
    const std::string unknown = d.unknownOnly == 0
        ? std::string()
        : " (" + std::to_string(d.unknownOnly) + " of them hold no word the model knows)";
    if (n < 2) {
        v << "Give at least two prompts to compare replies.";
    } else if (d.distinctInputs < 2) {
        v << "The prompts cannot tell: the tokenizer reads all " << n << " of them as one input" << unknown
          << ", so they get one reply whatever the decoding loop does. "
          << (d.unknownOnly > 0 ? "Diagnose with prompts in the words the model was trained on (--corpus)."
                                : "Diagnose with prompts that differ in the words the model reads (--corpus).");
    } else if (ok.unended * 10 >= n * 9) {
        // A tokenizer of another model (ids shifted by one) or the wrong end word: the replies
        // differ, but none of them ends, so they say nothing of the handoff.
        v << "Something is wrong before the handoff: " << ok.unended << " of " << n
          << " replies never gave the end word and ran to the length limit (" << limit
          << " words), even with the encoder's state handed over. Is the tokenizer the model's own, and the end word "
             "the one it was trained with? Until replies end, their count says nothing about the decoding loop.";
    } else if (ok.distinct <= 1) {
        v << "The model itself gives one reply (\"" << ok.mostCommon << "\") to all " << n << " prompts"
          << (d.distinctInputs < n ? " (as " + std::to_string(d.distinctInputs) + " different inputs"
                         + (d.unknownOnly > 0 ? "; " + std::to_string(d.unknownOnly) + " hold no word the model knows"
                                              : "")
                         + ")"
                                   : "")
          << " even with the encoder's state handed over: it is undertrained or collapsed, so the decoding loop is not "
             "the whole story.";
    } else {
        v << "The model is fine: with the encoder's final state_h/state_c as the decoder's initial state it gives "
          << ok.distinct << " different replies to " << n << " prompts. Started from zeros it gives " << zero.distinct
          << (zero.distinct == 1 ? " reply" : " replies");
        if (zero.distinct == 1)
            v << " (\"" << zero.mostCommon << "\" to every prompt)";
        v << "; with the state reset every step, " << reset.distinct << ". ";
        if (zero.distinct * 4 <= ok.distinct || zero.distinct == 1)
            v << "If your own loop gives the same reply to every question, it does not pass the encoder's states "
                 "as the decoder's initial_state";
        else
            v << "Dropping the state changes the replies less than usual here";
        if (reset.distinct * 4 <= ok.distinct)
            v << ", or does not carry the decoder's states from one step to the next";
        v << ".";
    }
    d.verdict = v.str();
    return d;
}

std::string describe(const HandoffDiagnosis& d)
{
    std::ostringstream o;
    o << "handoff            distinct replies   most common reply\n";
    for (const auto& m : d.modes) {
        std::string name = handoffModeName(m.handoff);
        name.resize(19, ' ');
        std::string count = std::to_string(m.distinct) + " / " + std::to_string(d.prompts);
        count.resize(19, ' ');
        o << name << count << "\"" << m.mostCommon << "\" (" << m.mostCommonCount << "×)\n";
    }
    o << d.verdict << "\n";
    return o.str();
}

nlohmann::ordered_json replyJson(const Reply& r)
{
    using nlohmann::ordered_json;
    auto layers = [](const std::vector<LayerState>& v) {
        ordered_json a = ordered_json::array();
        for (const auto& s : v)
            a.push_back({ { "h", s.h }, { "c", s.c } });
        return a;
    };
    const StateTrace& t = r.trace;
    ordered_json j;
    j["reply"] = r.text;
    j["ids"] = r.ids;
    j["score"] = r.score;
    j["log_probability"] = r.logProbability;
    ordered_json tj;
    tj["device"] = t.device;
    tj["handoff"] = handoffModeName(t.handoff);
    tj["layers"] = t.layers;
    tj["hidden"] = t.hidden;
    tj["input_ids"] = t.inputIds;
    tj["input_words"] = t.inputWords;
    tj["unknown_words"] = t.unknownWords;
    tj["words_left_out"] = t.wordsLeftOut;
    tj["encoder_final"] = layers(t.encoderFinal);
    tj["encoder_top_h"] = t.encoderTopH;
    tj["decoder_initial"] = layers(t.decoderInitial);
    ordered_json steps = ordered_json::array();
    for (const auto& s : t.steps) {
        ordered_json top = ordered_json::array();
        for (const auto& k : s.topK)
            top.push_back({ { "id", k.id }, { "word", k.word }, { "p", k.probability } });
        ordered_json sj = { { "input_id", s.inputId }, { "input", s.inputWord }, { "chosen_id", s.chosenId },
            { "chosen", s.chosenWord }, { "top_k", top }, { "state_in", layers(s.stateIn) },
            { "state_out", layers(s.stateOut) },
            { "gates",
                { { "input", s.inputGate }, { "forget", s.forgetGate }, { "cell", s.cellGate },
                    { "output", s.outputGate } } },
            { "ms", s.milliseconds } };
        if (!s.attention.empty())
            sj["attention"] = s.attention;
        steps.push_back(std::move(sj));
    }
    tj["steps"] = steps;
    tj["checks"] = checksJson(t.checks);
    j["trace"] = tj;
    if (!r.beamTree.empty()) {
        ordered_json tree = ordered_json::array();
        for (const BeamNode& n : r.beamTree) {
            ordered_json nj = { { "parent", n.parent }, { "step", n.step }, { "id", n.id }, { "word", n.word },
                { "log_p", n.logProbability }, { "score", n.score }, { "kept", n.kept }, { "finished", n.finished },
                { "forced", n.forced }, { "chosen", n.chosen } };
            if (!n.h.empty())
                nj["state"] = { { "h", n.h }, { "c", n.c } };
            tree.push_back(std::move(nj));
        }
        j["beam_tree"] = std::move(tree);
    }
    return j;
}

std::string dumpJson(const nlohmann::ordered_json& j, int indent)
{
    // A prompt's words are the user's bytes: invalid UTF-8 becomes U+FFFD rather than an exception.
    return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string toJson(const Reply& r, int indent)
{
    return dumpJson(replyJson(r), indent);
}

nlohmann::ordered_json checksJson(const TraceChecks& c)
{
    return { { "handoff_equal", c.handoffEqual }, { "handoff_max_diff", c.handoffMaxDiff },
        { "state_carried", c.stateCarried }, { "carried_max_diff", c.carriedMaxDiff },
        { "teacher_forced_equal", c.teacherForcedEqual }, { "teacher_forced_max_diff", c.teacherForcedMaxDiff },
        { "teacher_forced_tolerance", c.teacherForcedTolerance }, { "gate_replay_max_diff", c.gateReplayMaxDiff } };
}

std::string describe(const TraceChecks& c)
{
    auto mark = [](bool ok) { return ok ? "ok" : "FAIL"; };
    std::ostringstream o;
    o << "handoff " << mark(c.handoffEqual) << " (max diff " << c.handoffMaxDiff << "), state carried "
      << mark(c.stateCarried) << " (max diff " << c.carriedMaxDiff << "), step-wise == teacher-forced "
      << mark(c.teacherForcedEqual) << " (max diff " << c.teacherForcedMaxDiff << ")";
    return o.str();
}

} // namespace chatbench
