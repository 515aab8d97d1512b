#include "model.h"

namespace chatbench {

namespace rnn = torch::nn::utils::rnn;

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

EncoderOutput Seq2SeqImpl::encode(const torch::Tensor& src, const torch::Tensor& lengths)
{
    EncoderOutput enc;
    auto x = dropout(encoderEmbedding(src)); // (B, S, E)
    // Packed input: the LSTM stops at each sequence's own length, so h_n/c_n are the states at
    // the true last token and no padding step ever touches them.
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
    dec.logits = output(dec.top); // (B, T, V)
    return dec;
}

DecoderOutput Seq2SeqImpl::decodeHidden(
    const torch::Tensor& input, const torch::Tensor& h0, const torch::Tensor& c0, const EncoderOutput& enc)
{
    DecoderOutput dec;
    auto x = dropout(decoderEmbedding(input)); // (B, T, E)
    auto [out, state] = decoder->forward(x, std::make_tuple(h0, c0)); // out (B, T, H)
    dec.h = std::get<0>(state);
    dec.c = std::get<1>(state);
    auto top = out;
    if (m_cfg.attention) {
        auto keys = attentionKey(enc.outputs); // (B, S, H)
        auto scores = torch::bmm(out, keys.transpose(1, 2)); // (B, T, S)
        scores = scores.masked_fill(~enc.mask.unsqueeze(1), -1e9);
        dec.attention = torch::softmax(scores, /*dim=*/-1); // (B, T, S)
        auto context = torch::bmm(dec.attention.to(enc.outputs.scalar_type()), enc.outputs); // (B, T, H)
        top = torch::tanh(
            attentionCombine(torch::cat({ out, context.to(out.scalar_type()) }, /*dim=*/-1))); // (B, T, H)
    }
    dec.top = dropout(top); // (B, T, H)
    return dec;
}

} // namespace chatbench
