#include "fastdecode.h"

#include "chatbench/error.h"
#include "chatbench/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace chatbench {

namespace {

torch::Tensor cpuCopy(const torch::Tensor& t)
{
    return t.detach().to(torch::kCPU, torch::kFloat32).contiguous().clone();
}

float sigmoid(float x)
{
    return 1.0f / (1.0f + std::exp(-x));
}

} // namespace

std::vector<FastGreedy::Layer> FastGreedy::layers(torch::nn::LSTM& lstm, int count)
{
    auto params = lstm->named_parameters();
    std::vector<Layer> out;
    for (int l = 0; l < count; ++l) {
        const std::string k = "_l" + std::to_string(l);
        Layer layer;
        const auto wih = cpuCopy(params["weight_ih" + k]); // (4H, I)
        const auto whh = cpuCopy(params["weight_hh" + k]); // (4H, H)
        layer.w = torch::cat({ wih, whh }, /*dim=*/1).contiguous(); // (4H, I + H)
        layer.b = cpuCopy(params["bias_ih" + k]) + cpuCopy(params["bias_hh" + k]); // (4H)
        layer.input = wih.size(1);
        out.push_back(std::move(layer));
    }
    return out;
}

FastGreedy::FastGreedy(Seq2SeqImpl& model)
{
    const ModelConfig& cfg = model.config();
    if (cfg.attention)
        throw Error("the fast greedy path has no attention; use the general decoder");
    m_hidden = cfg.hidden;
    m_layers = cfg.layers;
    m_encoderEmbedding = cpuCopy(model.encoderEmbedding->weight);
    m_decoderEmbedding = cpuCopy(model.decoderEmbedding->weight);
    m_encoder = layers(model.encoder, cfg.layers);
    m_decoder = layers(model.decoder, cfg.layers);
    m_outW = cpuCopy(model.output->weight);
    m_outB = cpuCopy(model.output->bias);
}

void FastGreedy::step(
    const std::vector<Layer>& stack, const float* x, float* h, float* c, torch::Tensor& xh, torch::Tensor& gates) const
{
    const int64_t H = m_hidden;
    for (size_t l = 0; l < stack.size(); ++l) {
        const Layer& layer = stack[l];
        float* hl = h + static_cast<int64_t>(l) * H;
        float* cl = c + static_cast<int64_t>(l) * H;
        // xh = [x; h_l] so both kernels are one product.
        auto in = xh.narrow(0, 0, layer.input + H);
        float* p = in.data_ptr<float>();
        std::copy_n(x, layer.input, p);
        std::copy_n(hl, H, p + layer.input);
        at::addmv_out(gates, layer.b, layer.w, in); // (4H)
        const float* g = gates.data_ptr<float>();
        for (int64_t k = 0; k < H; ++k) {
            const float i = sigmoid(g[k]);
            const float f = sigmoid(g[H + k]);
            const float cand = std::tanh(g[2 * H + k]);
            const float o = sigmoid(g[3 * H + k]);
            cl[k] = f * cl[k] + i * cand;
            hl[k] = o * std::tanh(cl[k]);
        }
        x = hl; // the next layer reads this layer's new h
    }
}

std::vector<int64_t> FastGreedy::reply(
    const std::vector<int64_t>& source, int maxSteps, bool stopAtEnd, double* score) const
{
    if (source.empty())
        throw Error("the prompt has no words");
    torch::NoGradGuard noGrad;
    const int64_t H = m_hidden, V = m_outW.size(0);
    const int64_t widest = std::max(m_encoderEmbedding.size(1), H) + H;
    auto xh = torch::empty({ widest }, torch::kFloat32);
    auto gates = torch::empty({ 4 * H }, torch::kFloat32);
    auto logits = torch::empty({ V }, torch::kFloat32);
    std::vector<float> h(static_cast<size_t>(m_layers * H), 0.0f), c(h.size(), 0.0f);

    // Encoder: from zeros over the real tokens only; its final (h, c) is the handoff.
    const int64_t E = m_encoderEmbedding.size(1);
    const float* encEmb = m_encoderEmbedding.data_ptr<float>();
    for (int64_t id : source)
        step(m_encoder, encEmb + id * E, h.data(), c.data(), xh, gates);

    // Decoder: starts from the encoder's (h, c) and carries its own.
    const float* decEmb = m_decoderEmbedding.data_ptr<float>();
    const float* top = h.data() + static_cast<int64_t>(m_layers - 1) * H;
    auto topView = torch::from_blob(const_cast<float*>(top), { H }, torch::kFloat32);
    std::vector<int64_t> out;
    int64_t input = Tokenizer::kStart;
    double logpSum = 0;
    int steps = 0;
    for (int t = 0; t < maxSteps; ++t) {
        step(m_decoder, decEmb + input * E, h.data(), c.data(), xh, gates);
        at::addmv_out(logits, m_outB, m_outW, topView); // (V)
        const float* l = logits.data_ptr<float>();
        int64_t best = -1;
        float bestValue = -INFINITY, maxValue = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            maxValue = std::max(maxValue, l[v]);
            if (v != Tokenizer::kPad && v != Tokenizer::kStart && (best < 0 || l[v] > bestValue)) {
                best = v;
                bestValue = l[v];
            }
        }
        if (score) {
            double sum = 0;
            for (int64_t v = 0; v < V; ++v)
                sum += std::exp(static_cast<double>(l[v] - maxValue));
            logpSum += static_cast<double>(bestValue - maxValue) - std::log(sum);
        }
        ++steps;
        if (best == Tokenizer::kEnd && stopAtEnd)
            break;
        out.push_back(best);
        input = best;
    }
    if (score)
        *score = steps > 0 ? logpSum / steps : 0;
    return out;
}

} // namespace chatbench
