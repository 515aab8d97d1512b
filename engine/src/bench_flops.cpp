// The FLOP model of bench.h: what one step of the seq2seq model costs in multiply-adds.
#include "chatbench/bench.h"

namespace chatbench {

double lstmFlops(int layers, int64_t input, int64_t hidden, int64_t batch, int64_t steps)
{
    double total = 0;
    for (int l = 0; l < layers; ++l) {
        const double in = l == 0 ? static_cast<double>(input) : static_cast<double>(hidden);
        total += 2.0 * 4.0 * static_cast<double>(hidden) * (in + static_cast<double>(hidden))
            * static_cast<double>(batch) * static_cast<double>(steps);
    }
    return total;
}

double seq2seqForwardFlops(const ModelConfig& m, int64_t B, int64_t S, int64_t T)
{
    const double H = m.hidden, V = static_cast<double>(m.vocabSize), b = static_cast<double>(B);
    double f = lstmFlops(m.layers, m.embedDim, m.hidden, B, S) + lstmFlops(m.layers, m.embedDim, m.hidden, B, T);
    f += 2.0 * H * V * b * static_cast<double>(T);
    if (m.attention) {
        f += 2.0 * H * H * b * static_cast<double>(S); // keys
        f += 2.0 * 2.0 * static_cast<double>(S) * H * b * static_cast<double>(T); // scores + context
        f += 2.0 * 2.0 * H * H * b * static_cast<double>(T); // combine
    }
    return f;
}

double seq2seqTrainFlops(const ModelConfig& m, int64_t B, int64_t S, int64_t T)
{
    return 3.0 * seq2seqForwardFlops(m, B, S, T);
}

} // namespace chatbench
