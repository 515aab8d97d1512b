#include "batches.h"

#include <algorithm>
#include <functional>
#include <random>

namespace chatbench {

namespace {
void shuffle(std::vector<size_t>& v, std::mt19937_64& rng)
{
    for (size_t i = v.size(); i > 1; --i)
        std::swap(v[i - 1], v[rng() % i]);
}
} // namespace

std::vector<Example> makeExamples(
    const std::vector<Pair>& pairs, const Tokenizer& tok, const ModelConfig& cfg, int64_t* skipped)
{
    std::vector<Example> out;
    out.reserve(pairs.size());
    int64_t skip = 0;
    const size_t maxSrc = static_cast<size_t>(cfg.maxSourceLength);
    const size_t maxResp = static_cast<size_t>(cfg.maxTargetLength - 2);
    for (const Pair& p : pairs) {
        auto src = tok.encode(p.prompt).ids;
        auto resp = tok.encode(p.response).ids;
        if (src.empty() || resp.empty()) {
            ++skip;
            continue;
        }
        if (src.size() > maxSrc)
            src.resize(maxSrc);
        if (resp.size() > maxResp)
            resp.resize(maxResp);
        Example e;
        e.source = std::move(src);
        e.target.reserve(resp.size() + 2);
        e.target.push_back(Tokenizer::kStart);
        e.target.insert(e.target.end(), resp.begin(), resp.end());
        e.target.push_back(Tokenizer::kEnd);
        out.push_back(std::move(e));
    }
    if (skipped)
        *skipped = skip;
    return out;
}

std::vector<std::vector<size_t>> planBatches(
    const std::vector<Example>& examples, int batchSize, bool bucketing, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<size_t> idx(examples.size());
    for (size_t i = 0; i < idx.size(); ++i)
        idx[i] = i;
    shuffle(idx, rng);
    const size_t B = static_cast<size_t>(std::max(1, batchSize));
    std::vector<std::vector<size_t>> batches;
    if (bucketing) {
        const size_t pool = B * 50;
        for (size_t start = 0; start < idx.size(); start += pool) {
            const size_t end = std::min(idx.size(), start + pool);
            std::stable_sort(
                idx.begin() + static_cast<long>(start), idx.begin() + static_cast<long>(end), [&](size_t a, size_t b) {
                    const auto& ea = examples[a];
                    const auto& eb = examples[b];
                    // Responses first: the decoder and the projection to the vocabulary run over
                    // the padded response length and cost most; the packed encoder skips padding.
                    return ea.target.size() != eb.target.size() ? ea.target.size() < eb.target.size()
                                                                : ea.source.size() < eb.source.size();
                });
        }
    }
    for (size_t start = 0; start < idx.size(); start += B)
        batches.emplace_back(
            idx.begin() + static_cast<long>(start), idx.begin() + static_cast<long>(std::min(idx.size(), start + B)));
    if (bucketing) {
        std::vector<size_t> order(batches.size());
        for (size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        shuffle(order, rng);
        std::vector<std::vector<size_t>> shuffled;
        shuffled.reserve(batches.size());
        for (size_t i : order)
            shuffled.push_back(std::move(batches[i]));
        batches = std::move(shuffled);
    }
    return batches;
}

Batch collate(const std::vector<Example>& examples, const std::vector<size_t>& indices, const torch::Device& device)
{
    const int64_t B = static_cast<int64_t>(indices.size());
    int64_t S = 1, T = 1;
    for (size_t i : indices) {
        S = std::max<int64_t>(S, static_cast<int64_t>(examples[i].source.size()));
        T = std::max<int64_t>(T, static_cast<int64_t>(examples[i].target.size()) - 1);
    }
    auto src = torch::zeros({ B, S }, torch::kInt64);
    auto len = torch::zeros({ B }, torch::kInt64);
    auto in = torch::zeros({ B, T }, torch::kInt64);
    auto tgt = torch::zeros({ B, T }, torch::kInt64);
    auto s = src.accessor<int64_t, 2>();
    auto l = len.accessor<int64_t, 1>();
    auto ia = in.accessor<int64_t, 2>();
    auto ta = tgt.accessor<int64_t, 2>();
    int64_t tokens = 0;
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[indices[static_cast<size_t>(b)]];
        for (size_t k = 0; k < e.source.size(); ++k)
            s[b][static_cast<int64_t>(k)] = e.source[k];
        l[b] = static_cast<int64_t>(e.source.size());
        for (size_t k = 0; k + 1 < e.target.size(); ++k) {
            ia[b][static_cast<int64_t>(k)] = e.target[k];
            ta[b][static_cast<int64_t>(k)] = e.target[k + 1];
        }
        tokens += static_cast<int64_t>(e.target.size()) - 1;
    }
    Batch batch;
    batch.lengths = len;
    batch.source = src.to(device);
    batch.input = in.to(device);
    batch.target = tgt.to(device);
    batch.mask = batch.target.ne(Tokenizer::kPad);
    batch.tokens = tokens;
    return batch;
}

namespace {

// The rows `pick` makes of each (B, ·) tensor, with the padding trimmed to their own longest
// prompt and response.
Batch trimmedRows(const Batch& batch, const std::function<torch::Tensor(const torch::Tensor&)>& pick)
{
    Batch part;
    part.lengths = pick(batch.lengths);
    const int64_t S = std::max<int64_t>(1, part.lengths.max().item<int64_t>());
    part.mask = pick(batch.mask);
    const auto perRow = part.mask.sum(1);
    part.tokens = perRow.sum().item<int64_t>();
    // Targets are left-aligned, so a row's real tokens are its first ones.
    const int64_t T = std::max<int64_t>(1, perRow.max().item<int64_t>());
    part.mask = part.mask.slice(1, 0, T);
    part.source = pick(batch.source).slice(1, 0, S);
    part.input = pick(batch.input).slice(1, 0, T);
    part.target = pick(batch.target).slice(1, 0, T);
    return part;
}

} // namespace

Batch rowSlice(const Batch& batch, int64_t begin, int64_t end)
{
    return trimmedRows(batch, [&](const torch::Tensor& t) { return t.slice(0, begin, end); });
}

Batch rowStride(const Batch& batch, int64_t first, int64_t step)
{
    return trimmedRows(batch, [&](const torch::Tensor& t) { return t.slice(0, first, std::nullopt, step); });
}

} // namespace chatbench
