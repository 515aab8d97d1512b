#include "chatbench/explain.h"

#include "chatbench/error.h"
#include "chatbench/trainer.h"
#include "text.h"
#include "tracejson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace chatbench {

namespace {

constexpr size_t kBatch = 64; // prompts encoded at once

void throwIfCancelled(const std::atomic<bool>* cancel)
{
    if (cancel && cancel->load())
        throw Error("cancelled");
}

double norm(const std::vector<float>& v)
{
    double s = 0;
    for (float x : v)
        s += static_cast<double>(x) * x;
    return std::sqrt(s);
}

// The greedy replies to `sources` with `handoff`, in batches.
std::vector<Reply> greedyReplies(const Chatbot& bot, const std::vector<std::vector<int64_t>>& sources,
    const std::atomic<bool>* cancel, HandoffMode handoff)
{
    DecodeOptions opt;
    opt.cancel = cancel;
    opt.handoff = handoff;
    std::vector<Reply> out;
    for (size_t at = 0; at < sources.size(); at += kBatch) {
        const std::vector<std::vector<int64_t>> chunk(sources.begin() + static_cast<ptrdiff_t>(at),
            sources.begin() + static_cast<ptrdiff_t>(std::min(sources.size(), at + kBatch)));
        for (Reply& r : bot.replyBatchIds(chunk, opt))
            out.push_back(std::move(r));
    }
    return out;
}

} // namespace

const char* stateMetricName(StateMetric m)
{
    return m == StateMetric::L2 ? "l2" : "cosine";
}

std::optional<StateMetric> parseStateMetric(const std::string& name)
{
    if (name == "cosine")
        return StateMetric::Cosine;
    if (name == "l2")
        return StateMetric::L2;
    return std::nullopt;
}

std::vector<float> flatState(const std::vector<LayerState>& layers)
{
    std::vector<float> v;
    for (const LayerState& l : layers) {
        v.insert(v.end(), l.h.begin(), l.h.end());
        v.insert(v.end(), l.c.begin(), l.c.end());
    }
    return v;
}

double l2Distance(const std::vector<float>& a, const std::vector<float>& b)
{
    double s = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        s += d * d;
    }
    return std::sqrt(s);
}

double cosineSimilarity(const std::vector<float>& a, const std::vector<float>& b)
{
    double dot = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
        dot += static_cast<double>(a[i]) * b[i];
    const double n = norm(a) * norm(b);
    return n > 0 ? dot / n : 0;
}

// ---- what if ------------------------------------------------------------------------------

std::vector<int64_t> forcedPrefix(const Reply& original, int step, int64_t token, const Tokenizer& tok)
{
    const auto& steps = original.trace.steps;
    if (step < 0 || static_cast<size_t>(step) >= steps.size())
        throw Error("step " + std::to_string(step) + " is not a step of the reply (it has "
            + std::to_string(steps.size()) + ", from 0)");
    if (token < 0 || token >= tok.size())
        throw Error("token " + std::to_string(token) + " is outside the vocabulary");
    if (token == Tokenizer::kPad || token == Tokenizer::kStart)
        throw Error("a reply cannot be forced to " + tok.word(token));
    std::vector<int64_t> prefix;
    for (int t = 0; t < step; ++t)
        prefix.push_back(steps[static_cast<size_t>(t)].chosenId);
    prefix.push_back(token);
    return prefix;
}

int64_t tokenToForce(const Tokenizer& tok, const std::string& word)
{
    // The special words by their names, in any case: <end> and <unk> are words a reply can hold;
    // padding and the start word are not (without this, "<START>" would be tokenised into the
    // word "start").
    const auto names = [&](int64_t id) { return text::asciiLower(word) == text::asciiLower(tok.word(id)); };
    if (names(Tokenizer::kEnd))
        return Tokenizer::kEnd;
    if (names(Tokenizer::kUnk))
        return Tokenizer::kUnk;
    if (names(Tokenizer::kPad) || names(Tokenizer::kStart))
        throw Error("cannot force \"" + printable(word) + "\": a reply never holds "
            + (names(Tokenizer::kPad) ? "padding" : "the decoder's start word") + " (" + tok.word(Tokenizer::kEnd)
            + " and " + tok.word(Tokenizer::kUnk) + " can be forced)");
    const Encoded e = tok.encode(word);
    if (e.ids.size() != 1 || !e.unknown.empty() || e.ids[0] == Tokenizer::kUnk)
        throw Error("cannot force \"" + printable(word) + "\": it is not one word of the model's vocabulary");
    return e.ids[0];
}

Branch whatIf(
    const Chatbot& bot, const std::string& text, const Reply& original, int step, int64_t token, DecodeOptions opt)
{
    Branch b;
    b.step = step;
    b.forcedId = token;
    b.forcedWord = bot.tokenizer().word(token);
    opt.forcedPrefix = forcedPrefix(original, step, token, bot.tokenizer());
    opt.trace = true;
    b.reply = bot.reply(text, opt);
    return b;
}

// ---- nearest training prompts ---------------------------------------------------------------

std::vector<Pair> trainingPairs(const Chatbot& bot)
{
    const TrainConfig& cfg = bot.config();
    if (cfg.corpus.empty())
        throw Error("this model's config names no corpus (an imported model): there are no training prompts to search");
    Corpus corpus = loadCorpus(cfg.corpus, corpusLoadOptions(cfg));
    // Pairs the model never saw would be shown as what it learnt from.
    if (const uint64_t trained = bot.corpusFingerprint();
        trained != 0 && !sameCorpusFingerprint(trained, corpusFingerprint(corpus.pairs))) {
        corpus = corpusReadAsEarlier(cfg.corpus, cfg, trained); // texts with a CR or U+FEFF escape, as read then
        if (corpus.pairs.empty())
            throw Error(
                cfg.corpus, 0, "has changed since the model trained on it: its prompts are not the training ones");
    }
    std::vector<Pair> out;
    for (Pair& p : splitPairs(corpus.pairs, cfg.validationFraction, cfg.seed).train)
        if (!bot.tokenizer().encode(p.prompt).ids.empty() && !bot.tokenizer().encode(p.response).ids.empty())
            out.push_back(std::move(p));
    return out;
}

PromptIndex PromptIndex::build(const Chatbot& bot, std::vector<Pair> pairs, const std::atomic<bool>* cancel)
{
    const auto t0 = std::chrono::steady_clock::now();
    PromptIndex index;
    index.m_pairs = std::move(pairs);
    index.m_step = bot.step();
    const size_t n = index.m_pairs.size();
    for (size_t at = 0; at < n; at += kBatch) {
        throwIfCancelled(cancel);
        std::vector<std::vector<int64_t>> sources;
        for (size_t i = at; i < std::min(n, at + kBatch); ++i)
            sources.push_back(bot.sourceIds(index.m_pairs[i].prompt));
        for (const auto& state : bot.encoderFinalStates(sources)) {
            const std::vector<float> flat = flatState(state);
            index.m_dimension = flat.size();
            index.m_states.insert(index.m_states.end(), flat.begin(), flat.end());
            index.m_norms.push_back(norm(flat));
        }
    }
    index.m_buildMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return index;
}

std::vector<Neighbour> PromptIndex::nearest(const std::vector<float>& query, int k, StateMetric metric) const
{
    if (query.size() != m_dimension && !m_pairs.empty())
        throw Error("a state of " + std::to_string(query.size()) + " numbers cannot be compared with an index of "
            + std::to_string(m_dimension));
    const size_t n = m_pairs.size();
    const double qn = norm(query);
    const std::vector<double> q(query.begin(), query.end());
    std::vector<double> l2(n), cosine(n);
    // In double, with eight independent sums per row so the scan runs at memory speed.
    constexpr size_t kLanes = 8;
    for (size_t i = 0; i < n; ++i) {
        const float* s = state(i);
        double dot[kLanes] = {}, d2[kLanes] = {};
        size_t j = 0;
        for (; j + kLanes <= m_dimension; j += kLanes)
            for (size_t k = 0; k < kLanes; ++k) {
                const double v = s[j + k], d = q[j + k] - v;
                dot[k] += q[j + k] * v;
                d2[k] += d * d;
            }
        double dotSum = 0, d2Sum = 0;
        for (size_t k = 0; k < kLanes; ++k) {
            dotSum += dot[k];
            d2Sum += d2[k];
        }
        for (; j < m_dimension; ++j) {
            const double v = s[j], d = q[j] - v;
            dotSum += q[j] * v;
            d2Sum += d * d;
        }
        l2[i] = std::sqrt(d2Sum);
        cosine[i] = qn > 0 && m_norms[i] > 0 ? dotSum / (qn * m_norms[i]) : 0;
    }
    // Nearest first; a NaN (a diverged model's state) ranks last.
    std::vector<double> key(n);
    for (size_t i = 0; i < n; ++i) {
        const double k = metric == StateMetric::L2 ? l2[i] : -cosine[i];
        key[i] = std::isnan(k) ? INFINITY : k;
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t { 0 });
    const size_t take = std::min(n, static_cast<size_t>(std::max(0, k)));
    std::partial_sort(
        order.begin(), order.begin() + static_cast<ptrdiff_t>(take), order.end(), [&](size_t a, size_t b) {
            if (key[a] != key[b])
                return key[a] < key[b];
            return a < b;
        });
    std::vector<Neighbour> out;
    for (size_t r = 0; r < take; ++r) {
        const size_t i = order[r];
        const Pair& p = m_pairs[i];
        out.push_back({ i, p.prompt, p.response, p.file, p.line, l2[i], cosine[i] });
    }
    return out;
}

// ---- which words moved the state ------------------------------------------------------------

std::vector<Occlusion> occlude(
    const Chatbot& bot, const std::string& text, const std::atomic<bool>* cancel, HandoffMode handoff)
{
    const std::vector<int64_t> ids = bot.sourceIds(text);
    std::vector<std::vector<int64_t>> sources { ids };
    for (size_t i = 0; i < ids.size(); ++i) {
        std::vector<int64_t> v = ids;
        v.erase(v.begin() + static_cast<ptrdiff_t>(i));
        if (v.empty())
            v.push_back(Tokenizer::kUnk);
        sources.push_back(std::move(v));
    }
    const std::vector<Reply> replies = greedyReplies(bot, sources, cancel, handoff);
    const std::vector<float> full = flatState(replies[0].trace.encoderFinal);
    const double fullNorm = norm(full);
    std::vector<Occlusion> out;
    for (size_t i = 0; i < ids.size(); ++i) {
        const Reply& r = replies[i + 1];
        Occlusion o;
        o.position = static_cast<int>(i);
        o.word = bot.tokenizer().word(ids[i]);
        o.stateChange = l2Distance(flatState(r.trace.encoderFinal), full);
        o.relativeChange = fullNorm > 0 ? o.stateChange / fullNorm : 0;
        o.reply = r.text;
        o.replyChanged = r.text != replies[0].text;
        out.push_back(std::move(o));
    }
    return out;
}

// ---- two questions --------------------------------------------------------------------------

QuestionComparison compareQuestions(const Chatbot& bot, const std::string& a, const std::string& b)
{
    QuestionComparison q;
    q.questions[0] = a;
    q.questions[1] = b;
    DecodeOptions opt;
    const std::vector<Reply> handed = bot.replyBatch({ a, b }, opt);
    opt.handoff = HandoffMode::ZeroInit;
    const std::vector<Reply> zero = bot.replyBatch({ a, b }, opt);
    for (int k = 0; k < 2; ++k) {
        q.encoderFinal[k] = handed[static_cast<size_t>(k)].trace.encoderFinal;
        q.reply[k] = handed[static_cast<size_t>(k)].text;
        q.zeroInitReply[k] = zero[static_cast<size_t>(k)].text;
    }
    const std::vector<float> sa = flatState(q.encoderFinal[0]), sb = flatState(q.encoderFinal[1]);
    q.l2 = l2Distance(sa, sb);
    q.cosine = cosineSimilarity(sa, sb);
    for (size_t l = 0; l < q.encoderFinal[0].size(); ++l)
        q.layerL2.push_back(l2Distance(flatState({ q.encoderFinal[0][l] }), flatState({ q.encoderFinal[1][l] })));
    q.repliesDiffer = q.reply[0] != q.reply[1];
    q.zeroInitRepliesDiffer = q.zeroInitReply[0] != q.zeroInitReply[1];
    return q;
}

// ---- all of it ------------------------------------------------------------------------------

Explanation explain(
    const Chatbot& bot, const std::string& text, DecodeOptions opt, const ExplainOptions& ex, const PromptIndex* index)
{
    if (ex.neighbours < 0)
        throw Error("the number of neighbours must be >= 0");
    const Tokenizer& tok = bot.tokenizer();
    // Words to force first: a typo is an error before any work is done.
    std::vector<std::pair<int, int64_t>> force;
    for (const auto& [step, word] : ex.force)
        force.emplace_back(step, tokenToForce(tok, word));
    Explanation e;
    e.question = text;
    opt.trace = true;
    e.reply = bot.reply(text, opt);
    e.occlusion = occlude(bot, text, opt.cancel, opt.handoff);
    if (!e.reply.trace.steps.empty()) {
        const std::vector<double> g
            = bot.gradientTimesInput(e.reply.trace.inputIds, e.reply.trace.steps.front().chosenId, opt.handoff);
        for (size_t i = 0; i < g.size() && i < e.occlusion.size(); ++i)
            e.occlusion[i].gradientTimesInput = g[i];
    }
    e.metric = ex.metric;
    if (ex.neighbours > 0) {
        if (!index) {
            e.neighboursNote = "no training prompts are indexed";
        } else if (index->step() != bot.step()) {
            e.neighboursNote = "the index is of the weights of step " + std::to_string(index->step()) + ", not "
                + std::to_string(bot.step());
        } else {
            e.neighbours = index->nearest(flatState(e.reply.trace.encoderFinal), ex.neighbours, ex.metric);
            e.indexedPrompts = index->size();
            e.indexBuildMilliseconds = index->buildMilliseconds();
            // Each response as the model would write it: its words, cut where training cut them.
            const auto maxResponse = static_cast<size_t>(std::max(0, bot.config().model.maxTargetLength - 2));
            for (Neighbour& n : e.neighbours) {
                std::vector<int64_t> ids = tok.encode(n.response).ids;
                if (ids.size() > maxResponse)
                    ids.resize(maxResponse);
                n.responseIsReply = tok.decode(ids) == e.reply.text;
            }
            e.memorised = !e.neighbours.empty() && e.neighbours.front().responseIsReply;
        }
    }
    for (const auto& [step, id] : force)
        e.branches.push_back(whatIf(bot, text, e.reply, step, id, opt));
    if (ex.compareWith)
        e.comparison = compareQuestions(bot, text, *ex.compareWith);
    return e;
}

std::string toJson(const Explanation& e, int indent)
{
    using nlohmann::ordered_json;
    ordered_json j;
    j["question"] = e.question;
    j["reply"] = replyJson(e.reply);
    ordered_json occ = ordered_json::array();
    for (const Occlusion& o : e.occlusion)
        occ.push_back({ { "position", o.position }, { "word", o.word }, { "state_change", o.stateChange },
            { "relative_change", o.relativeChange }, { "reply", o.reply }, { "reply_changed", o.replyChanged },
            { "grad_x_input", o.gradientTimesInput } });
    j["occlusion"] = std::move(occ);
    ordered_json nb = ordered_json::array();
    for (const Neighbour& n : e.neighbours)
        nb.push_back({ { "index", n.index }, { "prompt", n.prompt }, { "response", n.response }, { "file", n.file },
            { "line", n.line }, { "l2", n.l2 }, { "cosine", n.cosine }, { "response_is_reply", n.responseIsReply } });
    j["neighbours"] = { { "metric", stateMetricName(e.metric) }, { "indexed_prompts", e.indexedPrompts },
        { "index_build_ms", e.indexBuildMilliseconds }, { "memorised", e.memorised }, { "note", e.neighboursNote },
        { "nearest", std::move(nb) } };
    ordered_json br = ordered_json::array();
    for (const Branch& b : e.branches)
        br.push_back({ { "step", b.step }, { "forced_id", b.forcedId }, { "forced", b.forcedWord },
            { "reply", replyJson(b.reply) } });
    j["branches"] = std::move(br);
    if (e.comparison) {
        const QuestionComparison& q = *e.comparison;
        ordered_json sides = ordered_json::array();
        for (int k = 0; k < 2; ++k) {
            ordered_json layers = ordered_json::array();
            for (const LayerState& l : q.encoderFinal[k])
                layers.push_back({ { "h", l.h }, { "c", l.c } });
            sides.push_back({ { "question", q.questions[k] }, { "encoder_final", std::move(layers) },
                { "reply", q.reply[k] }, { "zero_init_reply", q.zeroInitReply[k] } });
        }
        j["comparison"]
            = { { "questions", std::move(sides) }, { "l2", q.l2 }, { "cosine", q.cosine }, { "layer_l2", q.layerL2 },
                  { "replies_differ", q.repliesDiffer }, { "zero_init_replies_differ", q.zeroInitRepliesDiffer } };
    }
    return dumpJson(j, indent);
}

} // namespace chatbench
