#include "model.h"

#include "maskedlstm.h"
#include "sparselookup.h"

#include <limits>
#include <string>

namespace chatbench {

namespace rnn = torch::nn::utils::rnn;

int64_t parameterCount(const ModelConfig& cfg)
{
    const int64_t V = cfg.vocabSize, E = cfg.embedDim, H = cfg.hidden;
    int64_t n = V * E * (cfg.sharedEmbedding ? 1 : 2);
    for (int l = 0; l < cfg.layers; ++l)
        n += 2 * (4 * H * ((l == 0 ? E : H) + H) + 8 * H); // encoder and decoder: weights and both biases
    if (cfg.attention)
        n += H * H + 2 * H * H + H;
    return n + H * V + V;
}

Seq2SeqImpl::Seq2SeqImpl(const ModelConfig& cfg)
    : m_cfg(cfg)
{
    const int64_t V = cfg.vocabSize, E = cfg.embedDim, H = cfg.hidden;
    const double lstmDropout = cfg.layers > 1 ? cfg.dropout : 0.0;
    encoderEmbedding
        = register_module("encoder_embedding", torch::nn::Embedding(torch::nn::EmbeddingOptions(V, E).padding_idx(0)));
    decoderEmbedding = cfg.sharedEmbedding
        ? encoderEmbedding
        : register_module("decoder_embedding", torch::nn::Embedding(torch::nn::EmbeddingOptions(V, E).padding_idx(0)));
    encoder = register_module("encoder",
        torch::nn::LSTM(torch::nn::LSTMOptions(E, H).num_layers(cfg.layers).dropout(lstmDropout).batch_first(true)));
    decoder = register_module("decoder",
        torch::nn::LSTM(torch::nn::LSTMOptions(E, H).num_layers(cfg.layers).dropout(lstmDropout).batch_first(true)));
    if (cfg.attention) {
        attentionKey = register_module("attention_key", torch::nn::Linear(torch::nn::LinearOptions(H, H).bias(false)));
        attentionCombine = register_module("attention_combine", torch::nn::Linear(2 * H, H));
    }
    output = register_module("output", torch::nn::Linear(H, V));
    dropout = register_module("dropout", torch::nn::Dropout(cfg.dropout));
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Seq2SeqImpl::runMasked(torch::nn::LSTM& lstm,
    torch::nn::Embedding& embedding, const torch::Tensor& ids, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& lengths)
{
    auto params = lstm->named_parameters(/*recurse=*/false);
    std::vector<torch::Tensor> hs, cs;
    // The first layer looks its inputs up itself where nothing stands between it and the
    // embedding (no dropout) and the embedding's gradient, if it takes one, may be sparse.
    const auto& weight = embedding->weight;
    const bool lookup = (m_cfg.dropout == 0 || !is_training()) && weight.device().is_cpu()
        && weight.scalar_type() == torch::kFloat32
        && (m_sparseEmbedding || !torch::GradMode::is_enabled() || !weight.requires_grad());
    torch::Tensor in = lookup ? torch::Tensor() : dropout(embed(embedding, ids));
    for (int l = 0; l < m_cfg.layers; ++l) {
        const std::string k = "_l" + std::to_string(l);
        if (l > 0 && m_cfg.dropout > 0 && is_training()) // what nn::LSTM's dropout does between layers
            in = torch::dropout(in, m_cfg.dropout, /*train=*/true);
        const LayerInput layerIn = l == 0 && lookup
            ? LayerInput { weight, ids.to(torch::kCPU), embedding->options.padding_idx().value_or(-1) }
            : LayerInput { in, torch::Tensor(), -1 };
        MaskedLstmOutput out = maskedLstmLayer(layerIn, h0[l], c0[l], params["weight_ih" + k], params["weight_hh" + k],
            params["bias_ih" + k], params["bias_hh" + k], lengths, m_gemmType);
        hs.push_back(out.h);
        cs.push_back(out.c);
        in = out.outputs;
    }
    return { in, torch::stack(hs), torch::stack(cs) }; // (B, T, H), (L, B, H), (L, B, H)
}

torch::Tensor Seq2SeqImpl::embed(torch::nn::Embedding& embedding, const torch::Tensor& ids)
{
    if (m_sparseEmbedding && torch::GradMode::is_enabled() && embedding->weight.requires_grad())
        return sparseGradLookup(embedding->weight, ids, embedding->options.padding_idx().value_or(-1));
    return embedding(ids);
}

EncoderOutput Seq2SeqImpl::encode(const torch::Tensor& src, const torch::Tensor& lengths)
{
    EncoderOutput enc;
    if (m_maskedLstm) {
        const auto zeros
            = torch::zeros({ m_cfg.layers, src.size(0), m_cfg.hidden }, encoderEmbedding->weight.options());
        auto [out, h, c] = runMasked(encoder, encoderEmbedding, src, zeros, zeros, lengths.to(torch::kCPU));
        enc.outputs = out;
        enc.h = h;
        enc.c = c;
        auto steps = torch::arange(src.size(1), torch::TensorOptions().device(src.device())).unsqueeze(0); // (1, S)
        enc.mask = steps < lengths.to(src.device()).unsqueeze(1); // (B, S)
        return enc;
    }
    // Packed input: the LSTM stops at each sequence's own length, so h_n/c_n are the states at
    // the true last token and no padding step ever touches them.
    auto x = dropout(embed(encoderEmbedding, src)); // (B, S, E)
    auto packed = rnn::pack_padded_sequence(x, lengths.to(torch::kCPU), /*batch_first=*/true, /*enforce_sorted=*/false);
    auto [outPacked, state] = encoder->forward_with_packed_input(packed);
    enc.outputs = std::get<0>(rnn::pad_packed_sequence(outPacked, /*batch_first=*/true, /*padding_value=*/0.0,
        /*total_length=*/src.size(1))); // (B, S, H)
    enc.h = std::get<0>(state); // (L, B, H)
    enc.c = std::get<1>(state); // (L, B, H)
    auto steps = torch::arange(src.size(1), torch::TensorOptions().device(src.device())).unsqueeze(0); // (1, S)
    enc.mask = steps < lengths.to(src.device()).unsqueeze(1); // (B, S)
    return enc;
}

DecoderOutput Seq2SeqImpl::decode(
    const torch::Tensor& input, const torch::Tensor& h0, const torch::Tensor& c0, const EncoderOutput& enc)
{
    DecoderOutput dec = decodeHidden(input, h0, c0, enc);
    // As rows: the engine's layer hands out a time-major buffer seen batch-first, and matmul on
    // such a (B, T, H) view under bf16 autocast becomes a batched product over a copy of the
    // weight per row (45 MB a step at B = 50); the rows make it one product.
    const auto& top = dec.top;
    dec.logits = output(top.reshape({ -1, top.size(-1) }))
                     .view({ top.size(0), top.size(1), output->weight.size(0) }); // (B, T, V)
    return dec;
}

DecoderOutput Seq2SeqImpl::decodeHidden(
    const torch::Tensor& input, const torch::Tensor& h0, const torch::Tensor& c0, const EncoderOutput& enc)
{
    DecoderOutput dec;
    torch::Tensor out; // (B, T, H)
    // One step at a time outside training (replies), nn::LSTM: the engine's layer prepares its
    // weights per call, which pays over a whole sequence, not per token.
    if (m_maskedLstm && (is_training() || input.size(1) > 1)) {
        // Padding after a response's end never reaches a real position (the decoder runs
        // forward in time), so no mask is needed; the final state of a padded row is unused.
        std::tie(out, dec.h, dec.c) = runMasked(decoder, decoderEmbedding, input, h0, c0, torch::Tensor());
    } else {
        auto x = dropout(embed(decoderEmbedding, input)); // (B, T, E)
        auto [o, state] = decoder->forward(x, std::make_tuple(h0, c0));
        out = o;
        dec.h = std::get<0>(state);
        dec.c = std::get<1>(state);
    }
    auto top = out;
    if (m_cfg.attention) {
        auto keys = attentionKey(enc.outputs); // (B, S, H)
        // Scored in fp32 whatever autocast made of the product: padding is filled with fp32's
        // lowest value, which half (max 65504) and bf16 cannot hold, and exp() of it is exactly 0.
        auto scores = torch::bmm(out, keys.transpose(1, 2)).to(torch::kFloat32); // (B, T, S)
        scores = scores.masked_fill(~enc.mask.unsqueeze(1), std::numeric_limits<float>::lowest());
        dec.attention = torch::softmax(scores, /*dim=*/-1); // (B, T, S) fp32
        auto context = torch::bmm(dec.attention.to(enc.outputs.scalar_type()), enc.outputs); // (B, T, H)
        top = torch::tanh(
            attentionCombine(torch::cat({ out, context.to(out.scalar_type()) }, /*dim=*/-1))); // (B, T, H)
    }
    dec.top = dropout(top); // (B, T, H)
    return dec;
}

} // namespace chatbench
