#include "tracedreply.h"

#include "chatbench/error.h"
#include "kernels.h"
#include "torchutil.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace chatbench {

namespace {

std::vector<LayerState> layerStates(const FastDecoder::Workspace& ws, int layers, int64_t H)
{
    std::vector<LayerState> out(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l) {
        const auto from = static_cast<ptrdiff_t>(l * H), to = static_cast<ptrdiff_t>((l + 1) * H);
        out[static_cast<size_t>(l)]
            = { { ws.h.begin() + from, ws.h.begin() + to }, { ws.c.begin() + from, ws.c.begin() + to } };
    }
    return out;
}

double maxDiff(const std::vector<float>& a, const std::vector<float>& b)
{
    double d = 0;
    for (size_t k = 0; k < a.size() && k < b.size(); ++k)
        d = std::max(d, std::abs(static_cast<double>(a[k]) - static_cast<double>(b[k])));
    return d;
}

double maxDiff(const std::vector<LayerState>& a, const std::vector<LayerState>& b)
{
    double d = 0;
    for (size_t l = 0; l < a.size() && l < b.size(); ++l)
        d = std::max({ d, maxDiff(a[l].h, b[l].h), maxDiff(a[l].c, b[l].c) });
    return d;
}

} // namespace

void throwIfCancelled(const DecodeOptions& opt)
{
    if (opt.cancel && opt.cancel->load())
        throw Error("reply cancelled");
}

int64_t sampleToken(const torch::Tensor& logits, const DecodeOptions& opt, std::mt19937_64& rng)
{
    auto probs = torch::softmax(logits.to(torch::kFloat64) / std::max(1e-6, opt.temperature), -1).cpu();
    std::vector<double> p(static_cast<size_t>(probs.numel()));
    std::copy_n(probs.data_ptr<double>(), p.size(), p.begin());
    if (opt.topK > 0 && static_cast<size_t>(opt.topK) < p.size()) {
        std::vector<double> sorted = p;
        std::nth_element(sorted.begin(), sorted.begin() + (opt.topK - 1), sorted.end(), std::greater<>());
        const double cut = sorted[static_cast<size_t>(opt.topK - 1)];
        int kept = 0;
        for (double& v : p) {
            if (v >= cut && kept < opt.topK)
                ++kept;
            else
                v = 0;
        }
    }
    p[Tokenizer::kPad] = 0;
    p[Tokenizer::kStart] = 0;
    std::discrete_distribution<int64_t> dist(p.begin(), p.end());
    return dist(rng);
}

void tracedReply(const FastDecoder& fast, Seq2SeqImpl& model, const Tokenizer& tok, const std::vector<int64_t>& source,
    const DecodeOptions& opt, int maxSteps, bool stopAtEnd, Reply& r)
{
    torch::NoGradGuard noGrad;
    const ReplyThreads threads; // at most FastDecoder::kMaxThreads while the reply runs
    StateTrace& tr = r.trace;
    const int L = fast.layers();
    const int64_t H = fast.hidden(), V = fast.vocabulary();
    FastDecoder::Workspace ws = fast.workspace();
    fast.encode(source, ws, &tr.encoderTopH);
    tr.encoderFinal = layerStates(ws, L, H);

    // The handoff: the decoder's initial state per layer.
    auto clear = [&] {
        std::fill(ws.h.begin(), ws.h.end(), 0.0f);
        std::fill(ws.c.begin(), ws.c.end(), 0.0f);
    };
    if (opt.handoff == HandoffMode::ZeroInit)
        clear();
    tr.decoderInitial = layerStates(ws, L, H);

    std::mt19937_64 rng(opt.seed);
    std::vector<float> gates(static_cast<size_t>(4 * H));
    std::vector<float> stepLogits; // (T × V), what each step chose from
    stepLogits.reserve(static_cast<size_t>(std::max(0, maxSteps) * V));
    std::vector<int64_t> inputs;
    std::vector<int64_t> best; // the top-k ids of a step, most likely first
    const auto k = static_cast<ptrdiff_t>(std::min<int64_t>(std::max(1, opt.traceTopK), V));
    int64_t input = Tokenizer::kStart;
    double logpSum = 0;
    for (int t = 0; t < maxSteps; ++t) {
        throwIfCancelled(opt);
        const auto t0 = std::chrono::steady_clock::now();
        if (opt.handoff == HandoffMode::ResetEachStep && t > 0)
            clear();
        DecoderStep step;
        step.stateIn = layerStates(ws, L, H);
        fast.decodeStep(input, ws, gates.data());
        step.stateOut = layerStates(ws, L, H);
        step.inputGate.assign(gates.begin(), gates.begin() + H);
        step.forgetGate.assign(gates.begin() + H, gates.begin() + 2 * H);
        step.cellGate.assign(gates.begin() + 2 * H, gates.begin() + 3 * H);
        step.outputGate.assign(gates.begin() + 3 * H, gates.end());

        float* l = ws.logits.data_ptr<float>();
        const int64_t next = t < static_cast<int>(opt.forcedPrefix.size()) ? opt.forcedPrefix[static_cast<size_t>(t)]
            : opt.method == DecodeMethod::Sample ? sampleToken(torch::from_blob(l, { V }, torch::kFloat32), opt, rng)
                                                 : greedyToken(l, V);
        // The log-softmax at temperature 1, log p(v) = l[v] − log Σ e^l, for the score and the
        // top-k: one vectorised pass for the normaliser, the rest only where read.
        const double lse = kernels::logSumExp(l, V);
        auto logp = [&](int64_t id) { return static_cast<float>(l[id] - lse); };
        logpSum += std::max(-69.0, static_cast<double>(logp(next))); // p >= 1e-30, as the general path
        // The k most likely (the logits' order), in one pass (ties: the lower id first).
        best.clear();
        for (int64_t v = 0; v < V; ++v) {
            if (static_cast<ptrdiff_t>(best.size()) == k && l[v] <= l[best.back()])
                continue;
            auto at = std::upper_bound(
                best.begin(), best.end(), l[v], [&](float value, int64_t id) { return value > l[id]; });
            best.insert(at, v);
            if (static_cast<ptrdiff_t>(best.size()) > k)
                best.pop_back();
        }
        for (int64_t id : best)
            step.topK.push_back({ id, tok.word(id), std::exp(logp(id)) });
        step.inputId = input;
        step.inputWord = tok.word(input);
        step.chosenId = next;
        step.chosenWord = tok.word(next);
        if (opt.recordLogits)
            step.logits.assign(l, l + V);
        stepLogits.insert(stepLogits.end(), l, l + V);
        inputs.push_back(input);
        step.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        tr.steps.push_back(std::move(step));
        if (next == Tokenizer::kEnd) {
            if (stopAtEnd)
                break;
        } else {
            r.ids.push_back(next);
        }
        input = next;
    }
    r.text = tok.decode(r.ids);
    r.logProbability = logpSum;
    r.score = tr.steps.empty() ? 0 : logpSum / static_cast<double>(tr.steps.size());

    // The three checks: the handoff and the carried state from the trace itself ...
    TraceChecks& ck = tr.checks;
    ck.handoffMaxDiff = maxDiff(tr.decoderInitial, tr.encoderFinal);
    ck.handoffEqual = ck.handoffMaxDiff == 0.0;
    ck.carriedMaxDiff = 0;
    for (size_t t = 1; t < tr.steps.size(); ++t)
        ck.carriedMaxDiff = std::max(ck.carriedMaxDiff, maxDiff(tr.steps[t].stateIn, tr.steps[t - 1].stateOut));
    ck.stateCarried = ck.carriedMaxDiff == 0.0;
    if (tr.steps.empty())
        return;
    // ... the step-wise logits against one teacher-forced pass of the decoder's own modules
    // (torch's LSTM, not the engine's layer nor this path's fused weights) from the encoder's
    // final state: what a correct decoding loop computes ...
    const auto T = static_cast<int64_t>(inputs.size());
    auto h0 = torch::empty({ L, 1, H }, torch::kFloat32), c0 = torch::empty({ L, 1, H }, torch::kFloat32);
    for (int l = 0; l < L; ++l) {
        const LayerState& e = tr.encoderFinal[static_cast<size_t>(l)];
        std::copy(e.h.begin(), e.h.end(), h0.data_ptr<float>() + l * H);
        std::copy(e.c.begin(), e.c.end(), c0.data_ptr<float>() + l * H);
    }
    auto in = torch::tensor(inputs, torch::kInt64);
    auto x = model.decoderEmbedding(in); // (T, E): layer 0's inputs
    auto top = std::get<0>(model.decoder->forward(x.unsqueeze(0), std::make_tuple(h0, c0))); // (1, T, H)
    auto reference = model.output(top[0]); // (T, V)
    ck.teacherForcedMaxDiff = maxAbsDiff(torch::from_blob(stepLogits.data(), { T, V }, torch::kFloat32), reference);
    ck.teacherForcedTolerance = TraceChecks::logitTolerance(reference.abs().max().item<double>());
    ck.teacherForcedEqual = ck.teacherForcedMaxDiff <= ck.teacherForcedTolerance;
    // ... and the gate replay: every step's gates written out from the modules' own weights
    // (PyTorch order i, f, g, o) with torch's own element functions, all T steps of a layer at
    // once from the recorded input states, against the recorded gates (top layer) and (h, c)
    // after the step (every layer).
    auto recorded = [&](auto pick) { // one recorded vector per step, as the rows of a (T, n) tensor
        const std::vector<float>& first = pick(tr.steps.front());
        const auto n = static_cast<int64_t>(first.size());
        auto out = torch::empty({ T, n }, torch::kFloat32);
        float* p = out.data_ptr<float>();
        for (int64_t t = 0; t < T; ++t)
            std::copy_n(pick(tr.steps[static_cast<size_t>(t)]).data(), n, p + t * n);
        return out;
    };
    auto params = model.decoder->named_parameters();
    double diff = 0;
    for (int l = 0; l < L; ++l) {
        const auto ls = static_cast<size_t>(l);
        const std::string k = std::to_string(l);
        using Step = const DecoderStep&;
        const auto hIn = recorded([&](Step s) -> const std::vector<float>& { return s.stateIn[ls].h; });
        const auto cIn = recorded([&](Step s) -> const std::vector<float>& { return s.stateIn[ls].c; });
        const auto hOut = recorded([&](Step s) -> const std::vector<float>& { return s.stateOut[ls].h; });
        const auto cOut = recorded([&](Step s) -> const std::vector<float>& { return s.stateOut[ls].c; });
        auto g = torch::addmm(params["bias_ih_l" + k], x, params["weight_ih_l" + k].t());
        g.addmm_(hIn, params["weight_hh_l" + k].t()).add_(params["bias_hh_l" + k]); // (T, 4H)
        const auto gates = g.chunk(4, /*dim=*/1);
        const auto i = torch::sigmoid(gates[0]), f = torch::sigmoid(gates[1]), cand = torch::tanh(gates[2]),
                   o = torch::sigmoid(gates[3]);
        const auto c = f * cIn + i * cand;
        diff = std::max({ diff, maxAbsDiff(c, cOut), maxAbsDiff(o * torch::tanh(c), hOut) });
        if (l == L - 1)
            diff = std::max(
                { diff, maxAbsDiff(i, recorded([](Step s) -> const std::vector<float>& { return s.inputGate; })),
                    maxAbsDiff(f, recorded([](Step s) -> const std::vector<float>& { return s.forgetGate; })),
                    maxAbsDiff(cand, recorded([](Step s) -> const std::vector<float>& { return s.cellGate; })),
                    maxAbsDiff(o, recorded([](Step s) -> const std::vector<float>& { return s.outputGate; })) });
        x = hOut; // the next layer reads this layer's recorded output
    }
    ck.gateReplayMaxDiff = diff;
}

} // namespace chatbench
