// The model's numerics against independent references: one LSTM step written out by hand,
// the encoder handoff at the true last token whatever the padding, and batching with masks.

#include "batches.h"
#include "maskedlstm.h"
#include "model.h"
#include "projectedloss.h"

#include <QTest>

#include <cmath>
#include <set>

using namespace chatbench;

namespace {

ModelConfig tinyConfig()
{
    ModelConfig c;
    c.vocabSize = 9;
    c.embedDim = 3;
    c.hidden = 2;
    c.layers = 1;
    c.maxSourceLength = 10;
    c.maxTargetLength = 10;
    return c;
}

double sigmoid(double x)
{
    return 1.0 / (1.0 + std::exp(-x));
}

// Fills every parameter with a fixed, easily recomputed pattern.
void fillPattern(torch::nn::Module& m)
{
    torch::NoGradGuard g;
    int k = 0;
    for (auto& p : m.parameters()) {
        auto flat = p.view({ -1 });
        for (int64_t i = 0; i < flat.numel(); ++i, ++k)
            flat[i] = 0.3 * std::sin(0.7 * k + 0.1);
    }
}

std::vector<double> vec(const torch::Tensor& t)
{
    auto f = t.to(torch::kFloat64).contiguous().view({ -1 });
    return std::vector<double>(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
}

} // namespace

class TestModel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void lstmStepMatchesHandComputedReference();
    void handoffIsAtTrueLastToken();
    void attentionIgnoresPadding();
    void planCoversEveryExampleOnce();
    void collatePadsPerBatchWithMasks();
    void bucketingReducesPadding();
    void maskedLstmMatchesTorchLstm_data();
    void maskedLstmMatchesTorchLstm();
    void maskedModelTrainsLikeTorchModel();
    void projectedLossMatchesLinearCrossEntropy();
};

void TestModel::lstmStepMatchesHandComputedReference()
{
    Seq2Seq model(tinyConfig());
    fillPattern(*model);
    model->eval();
    torch::NoGradGuard noGrad;
    const int64_t H = 2, E = 3, token = 5;
    const std::vector<double> h0 = { 0.25, -0.5 }, c0 = { -0.125, 0.75 };
    auto h0t = torch::tensor({ h0[0], h0[1] }, torch::kFloat32).view({ 1, 1, H });
    auto c0t = torch::tensor({ c0[0], c0[1] }, torch::kFloat32).view({ 1, 1, H });
    EncoderOutput enc; // unused without attention
    DecoderOutput out = model->decode(torch::tensor({ { token } }), h0t, c0t, enc);

    // Reference: x = E[token]; z = W_ih x + b_ih + W_hh h + b_hh; gates in PyTorch order i, f, g, o.
    const auto emb = vec(model->decoderEmbedding->weight[token]);
    const auto Wih = vec(model->decoder->named_parameters()["weight_ih_l0"]); // (4H, E)
    const auto Whh = vec(model->decoder->named_parameters()["weight_hh_l0"]); // (4H, H)
    const auto bih = vec(model->decoder->named_parameters()["bias_ih_l0"]);
    const auto bhh = vec(model->decoder->named_parameters()["bias_hh_l0"]);
    std::vector<double> z(4 * H);
    for (int64_t r = 0; r < 4 * H; ++r) {
        double s = bih[r] + bhh[r];
        for (int64_t k = 0; k < E; ++k)
            s += Wih[r * E + k] * emb[k];
        for (int64_t k = 0; k < H; ++k)
            s += Whh[r * H + k] * h0[k];
        z[r] = s;
    }
    std::vector<double> h1(H), c1(H);
    for (int64_t j = 0; j < H; ++j) {
        const double i = sigmoid(z[j]), f = sigmoid(z[H + j]), g = std::tanh(z[2 * H + j]), o = sigmoid(z[3 * H + j]);
        c1[j] = f * c0[j] + i * g;
        h1[j] = o * std::tanh(c1[j]);
    }
    const auto hGot = vec(out.h), cGot = vec(out.c);
    for (int64_t j = 0; j < H; ++j) {
        QVERIFY2(
            std::abs(hGot[j] - h1[j]) < 1e-6, qPrintable(QString("h[%1] %2 vs %3").arg(j).arg(hGot[j]).arg(h1[j])));
        QVERIFY2(
            std::abs(cGot[j] - c1[j]) < 1e-6, qPrintable(QString("c[%1] %2 vs %3").arg(j).arg(cGot[j]).arg(c1[j])));
    }
    // The projection to the vocabulary: logits = W_out h + b_out.
    const auto Wout = vec(model->output->weight), bout = vec(model->output->bias), logits = vec(out.logits);
    for (int64_t v = 0; v < 9; ++v) {
        double s = bout[v];
        for (int64_t k = 0; k < H; ++k)
            s += Wout[v * H + k] * h1[k];
        QVERIFY(std::abs(logits[v] - s) < 1e-6);
    }
}

void TestModel::handoffIsAtTrueLastToken()
{
    torch::manual_seed(3);
    ModelConfig cfg = tinyConfig();
    cfg.hidden = 8;
    cfg.layers = 2;
    Seq2Seq model(cfg);
    model->eval();
    torch::NoGradGuard noGrad;
    // Alone, unpadded.
    auto alone = model->encode(torch::tensor({ { 5, 6, 7 } }), torch::tensor({ 3 }));
    // In a batch with a longer sequence: padded with two zeros, and placed second.
    auto batch = model->encode(torch::tensor({ { 4, 5, 6, 7, 8 }, { 5, 6, 7, 0, 0 } }), torch::tensor({ 5, 3 }));
    QVERIFY((alone.h.select(1, 0) - batch.h.select(1, 1)).abs().max().item<double>() < 1e-6);
    QVERIFY((alone.c.select(1, 0) - batch.c.select(1, 1)).abs().max().item<double>() < 1e-6);
    // Reference: the plain module run over the three real tokens only.
    auto emb = model->encoderEmbedding(torch::tensor({ { 5, 6, 7 } }));
    auto [out, state] = model->encoder->forward(emb);
    QVERIFY((std::get<0>(state) - alone.h).abs().max().item<double>() < 1e-6);
    QVERIFY((std::get<1>(state) - alone.c).abs().max().item<double>() < 1e-6);
    // The pitfall this guards against: running the padded row straight through nn::LSTM moves the state.
    auto [padOut, padState] = model->encoder->forward(model->encoderEmbedding(torch::tensor({ { 5, 6, 7, 0, 0 } })));
    QVERIFY((std::get<1>(padState) - alone.c).abs().max().item<double>() > 1e-3);
    // Encoder outputs past the length are zero.
    QCOMPARE(batch.outputs[1][3].abs().sum().item<double>(), 0.0);
    QCOMPARE(batch.mask[1][2].item<bool>(), true);
    QCOMPARE(batch.mask[1][3].item<bool>(), false);
}

void TestModel::attentionIgnoresPadding()
{
    torch::manual_seed(4);
    ModelConfig cfg = tinyConfig();
    cfg.hidden = 6;
    cfg.attention = true;
    Seq2Seq model(cfg);
    model->eval();
    torch::NoGradGuard noGrad;
    auto alone = model->encode(torch::tensor({ { 5, 6 } }), torch::tensor({ 2 }));
    auto padded = model->encode(torch::tensor({ { 5, 6, 0, 0 } }), torch::tensor({ 2 }));
    auto a = model->decode(torch::tensor({ { 2, 4 } }), alone.h, alone.c, alone);
    auto b = model->decode(torch::tensor({ { 2, 4 } }), padded.h, padded.c, padded);
    QVERIFY((a.logits - b.logits).abs().max().item<double>() < 1e-6);
    QCOMPARE(b.attention.size(2), int64_t(4));
    QCOMPARE(b.attention[0][0][2].item<double>(), 0.0); // no weight on padding
    QVERIFY(std::abs(b.attention[0][1].sum().item<double>() - 1.0) < 1e-6);
}

void TestModel::planCoversEveryExampleOnce()
{
    std::vector<Example> ex;
    for (int i = 0; i < 53; ++i)
        ex.push_back({ std::vector<int64_t>(1 + i % 7, 4), std::vector<int64_t>(3 + i % 5, 4) });
    for (bool bucketing : { true, false }) {
        const auto plan = planBatches(ex, 10, bucketing, 11);
        QCOMPARE(plan.size(), size_t(6));
        std::multiset<size_t> seen;
        for (const auto& b : plan) {
            QVERIFY(b.size() <= 10);
            seen.insert(b.begin(), b.end());
        }
        QCOMPARE(seen.size(), size_t(53));
        QCOMPARE(std::set<size_t>(seen.begin(), seen.end()).size(), size_t(53));
        QVERIFY(planBatches(ex, 10, bucketing, 11) == plan);
        QVERIFY(planBatches(ex, 10, bucketing, 12) != plan);
    }
}

void TestModel::collatePadsPerBatchWithMasks()
{
    std::vector<Example> ex = {
        { { 4, 5 }, { 2, 6, 7, 3 } }, { { 4 }, { 2, 6, 3 } },
        { std::vector<int64_t>(20, 4), std::vector<int64_t>(30, 6) }, // a long pair not in the batch
    };
    Batch b = collate(ex, { 0, 1 }, torch::kCPU);
    QCOMPARE(b.source.sizes().vec(), (std::vector<int64_t> { 2, 2 })); // this batch's longest prompt, not 20
    QCOMPARE(b.input.sizes().vec(), (std::vector<int64_t> { 2, 3 }));
    QCOMPARE(b.lengths[1].item<int64_t>(), int64_t(1));
    QCOMPARE(b.source[1][1].item<int64_t>(), int64_t(0));
    // Input drops the last token, target drops <start>.
    QCOMPARE(b.input[0][0].item<int64_t>(), int64_t(2));
    QCOMPARE(b.target[0][0].item<int64_t>(), int64_t(6));
    QCOMPARE(b.target[0][2].item<int64_t>(), int64_t(3));
    QCOMPARE(b.target[1][2].item<int64_t>(), int64_t(0));
    QCOMPARE(b.mask[1][1].item<bool>(), true);
    QCOMPARE(b.mask[1][2].item<bool>(), false);
    QCOMPARE(b.tokens, int64_t(5));
    QCOMPARE(b.mask.sum().item<int64_t>(), b.tokens);
}

void TestModel::bucketingReducesPadding()
{
    std::vector<Example> ex;
    for (int i = 0; i < 400; ++i)
        ex.push_back({ std::vector<int64_t>(1 + (i * 37) % 20, 4), std::vector<int64_t>(3 + (i * 11) % 30, 4) });
    auto padded = [&](bool bucketing) {
        int64_t cells = 0;
        for (const auto& idx : planBatches(ex, 16, bucketing, 1)) {
            Batch b = collate(ex, idx, torch::kCPU);
            cells += b.input.numel(); // decoder positions: the decoder and the projection run over them
        }
        return cells;
    };
    int64_t real = 0;
    for (const auto& e : ex)
        real += static_cast<int64_t>(e.target.size()) - 1;
    const int64_t withBuckets = padded(true), without = padded(false);
    QVERIFY2(withBuckets < without, qPrintable(QString("%1 vs %2").arg(withBuckets).arg(without)));
    QVERIFY(static_cast<double>(withBuckets) < 1.2 * static_cast<double>(real));
}

void TestModel::maskedLstmMatchesTorchLstm_data()
{
    QTest::addColumn<bool>("lengths");
    QTest::newRow("random lengths") << true;
    QTest::newRow("full length") << false;
}

void TestModel::maskedLstmMatchesTorchLstm()
{
    // The engine's LSTM layer against torch::nn::LSTM, forward and backward, on random lengths:
    // the reference runs on packed sequences, so its final state is each row's true last step.
    QFETCH(bool, lengths);
    torch::manual_seed(3);
    const int64_t B = 5, T = 7, I = 6, H = 4;
    torch::nn::LSTM ref(torch::nn::LSTMOptions(I, H).batch_first(true));
    auto len = lengths ? torch::tensor({ 7, 1, 4, 7, 2 }, torch::kInt64) : torch::full({ B }, T, torch::kInt64);
    auto x = torch::randn({ B, T, I });
    auto h0 = torch::randn({ 1, B, H }), c0 = torch::randn({ 1, B, H });
    auto gy = torch::randn({ B, T, H }), gh = torch::randn({ B, H }), gc = torch::randn({ B, H });

    auto xr = x.clone().requires_grad_(), hr = h0.clone().requires_grad_(), cr = c0.clone().requires_grad_();
    auto packed = torch::nn::utils::rnn::pack_padded_sequence(xr, len, /*batch_first=*/true, /*enforce_sorted=*/false);
    auto [outPacked, state] = ref->forward_with_packed_input(packed, std::make_tuple(hr, cr));
    auto yr = std::get<0>(torch::nn::utils::rnn::pad_packed_sequence(outPacked, true, 0.0, T));
    auto hT = std::get<0>(state)[0], cT = std::get<1>(state)[0];
    ((yr * gy).sum() + (hT * gh).sum() + (cT * gc).sum()).backward();

    auto p = ref->named_parameters();
    auto w = [&](const char* n) { return p[n].detach().clone().requires_grad_(); };
    auto wih = w("weight_ih_l0"), whh = w("weight_hh_l0"), bih = w("bias_ih_l0"), bhh = w("bias_hh_l0");
    auto xm = x.clone().requires_grad_(), hm = h0[0].clone().requires_grad_(), cm = c0[0].clone().requires_grad_();
    const MaskedLstmOutput out = maskedLstmLayer(xm, hm, cm, wih, whh, bih, bhh, lengths ? len : torch::Tensor());
    ((out.outputs * gy).sum() + (out.h * gh).sum() + (out.c * gc).sum()).backward();

    const double tol = 1e-5;
    auto close = [&](const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); };
    QVERIFY(close(out.outputs, yr) < tol);
    QVERIFY(close(out.h, hT) < tol);
    QVERIFY(close(out.c, cT) < tol);
    QVERIFY(close(xm.grad(), xr.grad()) < tol);
    QVERIFY(close(hm.grad(), hr.grad()[0]) < tol);
    QVERIFY(close(cm.grad(), cr.grad()[0]) < tol);
    QVERIFY(close(wih.grad(), p["weight_ih_l0"].grad()) < tol);
    QVERIFY(close(whh.grad(), p["weight_hh_l0"].grad()) < tol);
    QVERIFY(close(bih.grad(), p["bias_ih_l0"].grad()) < tol);
    QVERIFY(close(bhh.grad(), p["bias_hh_l0"].grad()) < tol);
    if (lengths) // a row of length 1 keeps its state from step 2 on, and its later inputs get no gradient
        QCOMPARE(xm.grad()[1].narrow(0, 1, T - 1).abs().max().item<double>(), 0.0);
}

void TestModel::maskedModelTrainsLikeTorchModel()
{
    // The whole model, 2 layers: loss and every parameter gradient agree between the engine's
    // LSTM (training on the CPU) and torch::nn::LSTM over the same padded batch.
    ModelConfig cfg = tinyConfig();
    cfg.layers = 2;
    std::vector<Example> ex
        = { { { 4, 5, 6 }, { 2, 7, 8, 3 } }, { { 5 }, { 2, 6, 3 } }, { { 5, 5, 6, 7, 8 }, { 2, 4, 4, 4, 4, 3 } } };
    Batch b = collate(ex, { 0, 1, 2 }, torch::kCPU);
    auto lossOf = [&](Seq2Seq& m) {
        EncoderOutput enc = m->encode(b.source, b.lengths);
        auto logits = m->decode(b.input, enc.h, enc.c, enc).logits;
        return torch::nn::functional::cross_entropy(logits.reshape({ -1, logits.size(-1) }), b.target.reshape({ -1 }),
            torch::nn::functional::CrossEntropyFuncOptions().ignore_index(0));
    };
    torch::manual_seed(5);
    Seq2Seq a(cfg), c(cfg);
    torch::NoGradGuard copy;
    for (auto& [name, t] : c->named_parameters().pairs())
        t.copy_(a->named_parameters()[name]);
    {
        torch::AutoGradMode on(true);
        a->setMaskedLstm(true);
        const double la = lossOf(a).item<double>();
        lossOf(a).backward();
        const double lc = lossOf(c).item<double>();
        lossOf(c).backward();
        QVERIFY(std::abs(la - lc) < 1e-5);
        for (auto& [name, t] : a->named_parameters().pairs())
            QVERIFY2((t.grad() - c->named_parameters()[name].grad()).abs().max().item<double>() < 1e-5, name.c_str());
    }
}

void TestModel::projectedLossMatchesLinearCrossEntropy()
{
    // 300 rows: two full chunks of 128 and a partial one.
    torch::manual_seed(11);
    const int64_t N = 300, H = 16, V = 37;
    auto h = torch::randn({ N, H }), w = torch::randn({ V, H }) * 0.3, b = torch::randn({ V });
    auto t = torch::randint(0, V, { N }, torch::kInt64);
    auto h1 = h.clone().requires_grad_(), w1 = w.clone().requires_grad_(), b1 = b.clone().requires_grad_();
    auto ref = torch::nn::functional::cross_entropy(torch::nn::functional::linear(h1, w1, b1), t,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    (ref * 0.5).backward(); // a non-unit incoming gradient, like the trainer's 1/tokens
    auto h2 = h.clone().requires_grad_(), w2 = w.clone().requires_grad_(), b2 = b.clone().requires_grad_();
    auto mine = projectedCrossEntropy(h2, w2, b2, t);
    (mine * 0.5).backward();
    QVERIFY(std::abs(mine.item<double>() - ref.item<double>()) < 1e-3 * std::abs(ref.item<double>()));
    QVERIFY((h2.grad() - h1.grad()).abs().max().item<double>() < 1e-5);
    QVERIFY((w2.grad() - w1.grad()).abs().max().item<double>() < 1e-4);
    QVERIFY((b2.grad() - b1.grad()).abs().max().item<double>() < 1e-4);
}

QTEST_GUILESS_MAIN(TestModel)
#include "tst_model.moc"
