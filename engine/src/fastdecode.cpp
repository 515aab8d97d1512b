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

std::vector<FastDecoder::Layer> FastDecoder::layers(torch::nn::LSTM& lstm, int count)
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

FastDecoder::FastDecoder(Seq2SeqImpl& model)
{
    const ModelConfig& cfg = model.config();
    if (cfg.attention)
        throw Error("the fast decoder has no attention; use the general decoder");
    m_hidden = cfg.hidden;
    m_layers = cfg.layers;
    m_encoderEmbedding = cpuCopy(model.encoderEmbedding->weight);
    m_decoderEmbedding = cpuCopy(model.decoderEmbedding->weight);
    m_encoder = layers(model.encoder, cfg.layers);
    m_decoder = layers(model.decoder, cfg.layers);
    m_outW = cpuCopy(model.output->weight);
    m_outB = cpuCopy(model.output->bias);
}

FastDecoder::Workspace FastDecoder::workspace() const
{
    const int64_t H = m_hidden;
    const int64_t widest = std::max(m_encoderEmbedding.size(1), H) + H;
    Workspace ws;
    ws.h.assign(static_cast<size_t>(m_layers * H), 0.0f);
    ws.c.assign(ws.h.size(), 0.0f);
    ws.logits = torch::empty({ vocabulary() }, torch::kFloat32);
    ws.xh = torch::empty({ widest }, torch::kFloat32);
    ws.gates = torch::empty({ 4 * H }, torch::kFloat32);
    return ws;
}

void FastDecoder::step(const std::vector<Layer>& stack, const float* x, Workspace& ws, float* gatesOut) const
{
    const int64_t H = m_hidden;
    for (size_t l = 0; l < stack.size(); ++l) {
        const Layer& layer = stack[l];
        float* hl = ws.h.data() + static_cast<int64_t>(l) * H;
        float* cl = ws.c.data() + static_cast<int64_t>(l) * H;
        // xh = [x; h_l] so both kernels are one product.
        auto in = ws.xh.narrow(0, 0, layer.input + H);
        float* p = in.data_ptr<float>();
        std::copy_n(x, layer.input, p);
        std::copy_n(hl, H, p + layer.input);
        at::addmv_out(ws.gates, layer.b, layer.w, in); // (4H)
        const float* g = ws.gates.data_ptr<float>();
        float* out = l + 1 == stack.size() ? gatesOut : nullptr;
        for (int64_t k = 0; k < H; ++k) {
            const float i = sigmoid(g[k]);
            const float f = sigmoid(g[H + k]);
            const float cand = std::tanh(g[2 * H + k]);
            const float o = sigmoid(g[3 * H + k]);
            cl[k] = f * cl[k] + i * cand;
            hl[k] = o * std::tanh(cl[k]);
            if (out) {
                out[k] = i;
                out[H + k] = f;
                out[2 * H + k] = cand;
                out[3 * H + k] = o;
            }
        }
        x = hl; // the next layer reads this layer's new h
    }
}

void FastDecoder::encode(const std::vector<int64_t>& source, Workspace& ws, std::vector<std::vector<float>>* topH) const
{
    if (source.empty())
        throw Error("the prompt has no words");
    torch::NoGradGuard noGrad;
    std::fill(ws.h.begin(), ws.h.end(), 0.0f);
    std::fill(ws.c.begin(), ws.c.end(), 0.0f);
    const int64_t E = m_encoderEmbedding.size(1), V = m_encoderEmbedding.size(0);
    const float* emb = m_encoderEmbedding.data_ptr<float>();
    const float* top = ws.h.data() + static_cast<int64_t>(m_layers - 1) * m_hidden;
    for (int64_t id : source) {
        if (id < 0 || id >= V)
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
        step(m_encoder, emb + id * E, ws, nullptr);
        if (topH)
            topH->emplace_back(top, top + m_hidden);
    }
}

void FastDecoder::decodeStep(int64_t input, Workspace& ws, float* gates) const
{
    torch::NoGradGuard noGrad;
    const int64_t E = m_decoderEmbedding.size(1), H = m_hidden;
    if (input < 0 || input >= m_decoderEmbedding.size(0))
        throw Error("token id " + std::to_string(input) + " is outside the vocabulary");
    step(m_decoder, m_decoderEmbedding.data_ptr<float>() + input * E, ws, gates);
    float* top = ws.h.data() + static_cast<int64_t>(m_layers - 1) * H;
    at::addmv_out(ws.logits, m_outB, m_outW, torch::from_blob(top, { H }, torch::kFloat32)); // (V)
}

int64_t greedyToken(const float* l, int64_t V)
{
    int64_t best = -1;
    for (int64_t v = 0; v < V; ++v)
        if (v != Tokenizer::kPad && v != Tokenizer::kStart && (best < 0 || l[v] > l[best]))
            best = v;
    return best;
}

std::vector<int64_t> FastDecoder::reply(
    const std::vector<int64_t>& source, int maxSteps, bool stopAtEnd, double* score) const
{
    Workspace ws = workspace();
    // Encoder: from zeros over the real tokens only; its final (h, c) is the handoff.
    encode(source, ws);
    // Decoder: starts from the encoder's (h, c) and carries its own.
    const int64_t V = vocabulary();
    std::vector<int64_t> out;
    int64_t input = Tokenizer::kStart;
    double logpSum = 0;
    int steps = 0;
    for (int t = 0; t < maxSteps; ++t) {
        decodeStep(input, ws);
        const float* l = ws.logits.data_ptr<float>();
        const int64_t best = greedyToken(l, V);
        if (score) {
            const float maxValue = *std::max_element(l, l + V);
            double sum = 0;
            for (int64_t v = 0; v < V; ++v)
                sum += std::exp(static_cast<double>(l[v] - maxValue));
            logpSum += static_cast<double>(l[best] - maxValue) - std::log(sum);
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
