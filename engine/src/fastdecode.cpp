#include "fastdecode.h"

#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "kernels.h"

#include <algorithm>
#include <string>

namespace chatbench {

namespace {

torch::Tensor cpuCopy(const torch::Tensor& t)
{
    return t.detach().to(torch::kCPU, torch::kFloat32).contiguous().clone();
}

// Panels per thread at least: a product shared out more finely costs more in handing out than
// it saves (a panel of the seed preset's products is 51 KB).
constexpr int64_t kMinBytesPerThread = 32 << 10;

} // namespace

PanelMatrix::PanelMatrix(const torch::Tensor& w)
    : m_rows(w.size(0))
    , m_cols(w.size(1))
{
    const auto rowMajor = cpuCopy(w);
    m_panels = torch::empty({ kernels::panelFloats(m_rows, m_cols) }, torch::kFloat32);
    kernels::packPanels(rowMajor.data_ptr<float>(), m_rows, m_cols, m_panels.data_ptr<float>());
}

void PanelMatrix::product(const float* x, const float* b, float* y) const
{
    const int64_t panels = (m_rows + kernels::kPanelRows - 1) / kernels::kPanelRows;
    const int64_t panelBytes = kernels::kPanelRows * m_cols * static_cast<int64_t>(sizeof(float));
    const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / panelBytes);
    const float* data = m_panels.data_ptr<float>();
    at::parallel_for(0, panels, grain, [&](int64_t first, int64_t last) {
        kernels::panelMatVec(
            data, m_rows, m_cols, x, b, y, first * kernels::kPanelRows, std::min(last * kernels::kPanelRows, m_rows));
    });
}

std::vector<FastDecoder::Layer> FastDecoder::layers(
    torch::nn::LSTM& lstm, int count, const torch::Tensor& embedding, int64_t maxTableBytes)
{
    auto params = lstm->named_parameters();
    std::vector<Layer> out;
    for (int l = 0; l < count; ++l) {
        const std::string k = "_l" + std::to_string(l);
        Layer layer;
        const auto wih = cpuCopy(params["weight_ih" + k]); // (4H, I)
        const auto whh = cpuCopy(params["weight_hh" + k]); // (4H, H)
        layer.b = cpuCopy(params["bias_ih" + k]) + cpuCopy(params["bias_hh" + k]); // (4H)
        layer.input = wih.size(1);
        const int64_t tableBytes = embedding.size(0) * wih.size(0) * static_cast<int64_t>(sizeof(float));
        if (l == 0 && tableBytes <= maxTableBytes) {
            layer.table = at::addmm(layer.b, embedding, wih.t()).contiguous(); // (V, 4H)
            layer.w = PanelMatrix(whh);
        } else {
            layer.w = PanelMatrix(torch::cat({ wih, whh }, /*dim=*/1)); // (4H, I + H)
        }
        out.push_back(std::move(layer));
    }
    return out;
}

FastDecoder::FastDecoder(Seq2SeqImpl& model, int64_t maxTableBytes)
{
    const ModelConfig& cfg = model.config();
    if (cfg.attention)
        throw Error("the fast decoder has no attention; use the general decoder");
    torch::NoGradGuard noGrad;
    m_hidden = cfg.hidden;
    m_layers = cfg.layers;
    m_encoderEmbedding = cpuCopy(model.encoderEmbedding->weight);
    m_decoderEmbedding = cpuCopy(model.decoderEmbedding->weight);
    m_encoder = layers(model.encoder, cfg.layers, m_encoderEmbedding, maxTableBytes);
    m_decoder = layers(model.decoder, cfg.layers, m_decoderEmbedding, maxTableBytes);
    m_out = PanelMatrix(model.output->weight);
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
    ws.cNew.assign(static_cast<size_t>(H), 0.0f);
    ws.tanhC.assign(static_cast<size_t>(H), 0.0f);
    return ws;
}

void FastDecoder::step(
    const std::vector<Layer>& stack, const torch::Tensor& embedding, int64_t id, Workspace& ws, float* gatesOut) const
{
    const int64_t H = m_hidden;
    const float* x = nullptr; // this layer's input (below layer 0: the layer beneath's new h)
    float* g = ws.gates.data_ptr<float>();
    for (size_t l = 0; l < stack.size(); ++l) {
        const Layer& layer = stack[l];
        float* hl = ws.h.data() + static_cast<int64_t>(l) * H;
        float* cl = ws.c.data() + static_cast<int64_t>(l) * H;
        if (layer.table.defined()) {
            // The token's row of the input table plus the recurrent product.
            layer.w.product(hl, layer.table.data_ptr<float>() + id * 4 * H, g);
        } else {
            // xh = [x; h_l] so both kernels are one product.
            float* p = ws.xh.data_ptr<float>();
            std::copy_n(l == 0 ? embedding.data_ptr<float>() + id * layer.input : x, layer.input, p);
            std::copy_n(hl, H, p + layer.input);
            layer.w.product(p, layer.b.data_ptr<float>(), g); // (4H)
        }
        kernels::lstmForwardStep(1, H, g, cl, ws.cNew.data(), ws.tanhC.data(), hl);
        std::copy(ws.cNew.begin(), ws.cNew.end(), cl);
        if (gatesOut && l + 1 == stack.size())
            std::copy_n(g, 4 * H, gatesOut);
        x = hl;
    }
}

void FastDecoder::encode(const std::vector<int64_t>& source, Workspace& ws, std::vector<std::vector<float>>* topH) const
{
    if (source.empty())
        throw Error("the prompt has no words");
    torch::NoGradGuard noGrad;
    std::fill(ws.h.begin(), ws.h.end(), 0.0f);
    std::fill(ws.c.begin(), ws.c.end(), 0.0f);
    const int64_t V = m_encoderEmbedding.size(0);
    const float* top = ws.h.data() + static_cast<int64_t>(m_layers - 1) * m_hidden;
    for (int64_t id : source) {
        if (id < 0 || id >= V)
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
        step(m_encoder, m_encoderEmbedding, id, ws, nullptr);
        if (topH)
            topH->emplace_back(top, top + m_hidden);
    }
}

void FastDecoder::decodeStep(int64_t input, Workspace& ws, float* gates) const
{
    torch::NoGradGuard noGrad;
    const int64_t H = m_hidden;
    if (input < 0 || input >= m_decoderEmbedding.size(0))
        throw Error("token id " + std::to_string(input) + " is outside the vocabulary");
    step(m_decoder, m_decoderEmbedding, input, ws, gates);
    float* top = ws.h.data() + static_cast<int64_t>(m_layers - 1) * H;
    m_out.product(top, m_outB.data_ptr<float>(), ws.logits.data_ptr<float>()); // (V)
}

int64_t greedyToken(const float* l, int64_t V)
{
    int64_t best = -1;
    for (int64_t v = 0; v < V; ++v)
        if (v != Tokenizer::kPad && v != Tokenizer::kStart && (best < 0 || l[v] > l[best]))
            best = v;
    return best;
}

int FastDecoder::replyThreads()
{
    return std::min(at::get_num_threads(), kMaxThreads);
}

std::vector<int64_t> FastDecoder::reply(
    const std::vector<int64_t>& source, int maxSteps, bool stopAtEnd, double* score) const
{
    const ReplyThreads threads; // at most kMaxThreads while the reply runs
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
        if (score)
            logpSum += static_cast<double>(l[best]) - kernels::logSumExp(l, V);
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
