// The model's numerics against independent references: one LSTM step written out by hand,
// the encoder handoff at the true last token whatever the padding, and batching with masks.

#include "batches.h"
#include "bench_probes.h"
#include "chatbench/doctor.h"
#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "checkpoint.h"
#include "cpugemm.h"
#include "fastdecode.h"
#include "kernels.h"
#include "laneteam.h"
#include "maskedlstm.h"
#include "model.h"
#include "projectedloss.h"
#include "snapshot.h"
#include "sparselookup.h"
#include "torchutil.h"
#include "trainstep.h"

#include <caffe2/serialize/inline_container.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

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

// tinyConfig with Luong attention, 6 units, seeded, in eval mode.
Seq2Seq attentionModel()
{
    torch::manual_seed(4);
    ModelConfig cfg = tinyConfig();
    cfg.hidden = 6;
    cfg.attention = true;
    Seq2Seq model(cfg);
    model->eval();
    return model;
}

// Three short pairs as ids of tinyConfig's vocabulary (9 words).
std::vector<Example> tinyExamples()
{
    return { { { 4, 5, 6 }, { 2, 7, 8, 3 } }, { { 5, 4 }, { 2, 8, 3 } }, { { 6 }, { 2, 7, 7, 8, 3 } } };
}

TrainConfig tinyTraining()
{
    TrainConfig cfg = preset("quick");
    cfg.model = tinyConfig();
    cfg.model.hidden = 5;
    cfg.model.dropout = 0;
    cfg.seed = 7;
    return cfg;
}

// A run folder of the tiny training model with its first checkpoint (step 0) saved, for the
// checkpoint tests.
struct SavedRun {
    QTemporaryDir dir;
    std::string run = dir.path().toStdString();
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    RunState st;
    SavedRun() { saveCheckpoint(run, s.model, *s.optimizer, st, 2); }
};

// Loads a checkpoint the fuzz harness found (fuzz/regressions/checkpoint/`kept`) as the run's
// ckpt-00000009.pt, without a checksum (a run from before them): the error's words ("" when it
// loads), and in `ms` the time it took.
QString refusalOfFinding(SavedRun& saved, const char* kept, qint64& ms)
{
    const QString found = QString(CHATBENCH_SOURCE_DIR "/fuzz/regressions/checkpoint/") + kept;
    RunState bad = saved.st;
    bad.checkpoint = "ckpt-00000009.pt";
    bad.haveCrc = false;
    if (!QFile::copy(found, QString::fromStdString(saved.run + "/" + bad.checkpoint)))
        return "cannot copy " + found;
    QElapsedTimer clock;
    clock.start();
    try {
        loadCheckpoint(saved.run, bad, saved.s.model, saved.s.optimizer.get());
    } catch (const Error& e) {
        ms = clock.elapsed();
        return QString::fromStdString(e.what());
    }
    ms = clock.elapsed();
    return {};
}

// n pairs of tinyConfig's vocabulary with prompts of 1–maxPrompt and responses of
// 1–maxResponse words.
std::vector<Example> variedExamples(int n, int maxPrompt = 4, int maxResponse = 5)
{
    std::vector<Example> out;
    for (int i = 0; i < n; ++i) {
        Example e;
        for (int k = 0; k <= i % maxPrompt; ++k)
            e.source.push_back(4 + (i + k) % 5);
        e.target.push_back(2);
        for (int k = 0; k <= (i * 3) % maxResponse; ++k)
            e.target.push_back(4 + (i * 2 + k) % 5);
        e.target.push_back(3);
        out.push_back(e);
    }
    return out;
}

std::vector<size_t> range(size_t begin, size_t end)
{
    std::vector<size_t> out;
    for (size_t i = begin; i < end; ++i)
        out.push_back(i);
    return out;
}

// Parallel regions that would start an OpenMP team of more than one thread on a watched thread,
// counted by GOMP_parallel below.
std::atomic<std::thread::id> g_watchedThread {};
std::atomic<int> g_teamsOnWatchedThread { 0 };

} // namespace

// OpenMP's entry for `#pragma omp parallel` (libgomp's ABI; LLVM's and Intel's runtimes provide it
// too): this definition in the test program comes before the runtime's, so every parallel region
// of LibTorch passes here and then on to the runtime's own.
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags)
{
    using Entry = void (*)(void (*)(void*), void*, unsigned, unsigned);
    static const auto next = reinterpret_cast<Entry>(::dlsym(RTLD_NEXT, "GOMP_parallel"));
    static const auto maxThreads = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (std::this_thread::get_id() == g_watchedThread.load()) {
        const unsigned team = threads != 0 ? threads : static_cast<unsigned>(maxThreads ? maxThreads() : 1);
        if (team > 1)
            ++g_teamsOnWatchedThread;
    }
    next(fn, data, threads, flags);
}

namespace {

// What a CUDA allocator throws when a request does not fit.
[[noreturn]] void throwOutOfMemory(int64_t rows)
{
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (simulated for ", rows, " pairs)");
    std::abort(); // not reached
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params)
{
    std::vector<torch::Tensor> out;
    for (const auto& p : params)
        out.push_back(p.detach().clone());
    return out;
}

bool sameTensors(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b)
{
    for (size_t i = 0; i < a.size(); ++i)
        if (!torch::equal(a[i], b[i]))
            return false;
    return a.size() == b.size();
}

// Two steppers' weights agree element-wise within `tolerance`.
bool weightsWithin(Stepper& a, Stepper& b, double tolerance)
{
    const auto x = copies(a.model->parameters()), y = copies(b.model->parameters());
    for (size_t i = 0; i < x.size(); ++i)
        if ((x[i] - y[i]).abs().max().item<double>() >= tolerance)
            return false;
    return x.size() == y.size();
}

std::vector<double> vec(const torch::Tensor& t)
{
    auto f = t.to(torch::kFloat64).contiguous().view({ -1 });
    return std::vector<double>(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
}

// Whether two batches hold the same tensors and token count.
bool sameBatch(const Batch& a, const Batch& b)
{
    return torch::equal(a.source, b.source) && torch::equal(a.lengths, b.lengths) && torch::equal(a.input, b.input)
        && torch::equal(a.target, b.target) && torch::equal(a.mask, b.mask) && a.tokens == b.tokens;
}

} // namespace

class TestModel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void lstmStepMatchesHandComputedReference();
    void fastDecoderMatchesTheModules_data();
    void fastDecoderMatchesTheModules();
    void repliesCapTheirThreads();
    void logSumExpMatchesDouble();
    void sumSquaresMatchesDouble();
    void cellElementsMatchDoubleAtEveryWidth();
    void maxAbsDiffIsTheTensorExpression();
    void panelProductsMatchDouble();
    void handoffIsAtTrueLastToken();
    void attentionIgnoresPadding();
    void attentionWorksInHalfPrecision();
    void planCoversEveryExampleOnce();
    void collatePadsPerBatchWithMasks();
    void bucketingReducesPadding();
    void maskedLstmMatchesTorchLstm_data();
    void maskedLstmMatchesTorchLstm();
    void maskedLstmPassesEmptyRowsThrough();
    void maskedLstmLooksUpItsOwnInputs_data();
    void maskedLstmLooksUpItsOwnInputs();
    void maskedLstmOutputsWithoutLengthsAreTimeMajor();
    void maskedModelTrainsLikeTorchModel_data();
    void maskedModelTrainsLikeTorchModel();
    void projectedLossMatchesLinearCrossEntropy_data();
    void projectedLossMatchesLinearCrossEntropy();
    void softmaxRowsInBf16AreTheFp32RowsRounded();
    void lstmStepsInBf16AreTheFp32StepsRounded();
    void stepBf16WeightsAreMadeOnceAndMatch();
    void projectedLossOverRowsIsTheLossOfThoseRows_data();
    void projectedLossOverRowsIsTheLossOfThoseRows();
    void projectedScoreMatchesLinearCrossEntropy_data();
    void projectedScoreMatchesLinearCrossEntropy();
    void wideProductWritesWholeRowsInFp32();
    void bf16RowsAndPairsAreAtensRounding();
    void gatheredBf16RowsAreAtensRounding();
    void bf16ProductsSumInFp32_data();
    void bf16ProductsSumInFp32();
    void packedRecurrentProductMatchesMm();
    void bf16RecurrentProductSumsInFp32();
    void bf16TrainingTracksFp32_data();
    void bf16TrainingTracksFp32();
    void lossScalingSkipsOverflowedSteps();
    void lossScaleDoublesAfter2000GoodSteps();
    void rowSliceIsTheBatchOfThoseRows();
    void onCoresSharesTheThreadsAndRestoresThem();
    void stepInPartsMatchesOnePass_data();
    void stepInPartsMatchesOnePass();
    void stepInPartsLeavesTheCallersTeamIdle_data();
    void stepInPartsLeavesTheCallersTeamIdle();
    void sparseLookupMatchesEmbedding();
    void sparseEmbeddingStepMatchesTorchRmsprop_data();
    void sparseEmbeddingStepMatchesTorchRmsprop();
    void laneTeamRunsEachLaneOncePerRound();
    void gradientTimesInputMatchesTheEmbeddingGradient();
    void aModelTooLargeForMemoryIsRefused();
    void outOfMemoryBacksOffToSmallerPasses();
    void outOfMemoryAtOnePairIsAnError();
    void cpuAllocationFailureBacksOffAndIsInWords();
    void otherErrorsPassThroughTheBackOff();
    void checkpointKeepsTheGeneratorState();
    void checkpointPicklesAskingForTooMuchAreRefused();
    void checkpointRecordsDeclaringTooMuchAreRefused();
    void checkpointTensorsOfAnotherKindAreRefused();
    void allFiniteFindsEveryNonFiniteValue();
    void nonFiniteWeightsAreNeverSaved();
    void oversizedCheckpointIsRefusedUnread();
    void pruningKeepsTheRunsOwnCheckpoints();
    void stepSeedTouchesOnlyTheCpuGenerator();
    void parityVerdict();
    void gpuUuidAsNvmlNamesIt();
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

void TestModel::fastDecoderMatchesTheModules_data()
{
    QTest::addColumn<int>("layers");
    QTest::addColumn<bool>("tabled");
    QTest::newRow("1 layer, input table") << 1 << true;
    QTest::newRow("1 layer, W_ih read every step") << 1 << false;
    QTest::newRow("2 layers, input table") << 2 << true;
    QTest::newRow("2 layers, W_ih read every step") << 2 << false;
}

void TestModel::fastDecoderMatchesTheModules()
{
    // The batch-1 path (layer 0's input product from a table or from [W_ih | W_hh], vectorised
    // gates, the score's log-sum-exp) against the modules: the encoder's final state, every
    // step's logits of a teacher-forced pass, the greedy choices and their mean log-probability.
    QFETCH(int, layers);
    QFETCH(bool, tabled);
    torch::manual_seed(11);
    ModelConfig cfg = tinyConfig();
    cfg.vocabSize = 40;
    cfg.embedDim = 7;
    cfg.hidden = 12;
    cfg.layers = layers;
    Seq2Seq model(cfg);
    model->eval();
    torch::NoGradGuard noGrad;
    const FastDecoder fast(*model, tabled ? FastDecoder::kMaxTableBytes : 0);
    QCOMPARE(fast.tabled(), tabled);

    const std::vector<int64_t> source = { 5, 9, 4, 33, 7 };
    FastDecoder::Workspace ws = fast.workspace();
    fast.encode(source, ws);
    const EncoderOutput enc
        = model->encode(torch::tensor(source).unsqueeze(0), torch::tensor({ static_cast<int64_t>(source.size()) }));
    const int64_t n = layers * cfg.hidden;
    QVERIFY(maxAbsDiff(torch::from_blob(ws.h.data(), { n }), enc.h.reshape({ -1 })) < 1e-5);
    QVERIFY(maxAbsDiff(torch::from_blob(ws.c.data(), { n }), enc.c.reshape({ -1 })) < 1e-5);

    const std::vector<int64_t> inputs = { Tokenizer::kStart, 17, 8, 8, 30, 3, 39 };
    const auto reference = model->decode(torch::tensor(inputs).unsqueeze(0), enc.h, enc.c, enc).logits[0]; // (T, V)
    for (size_t t = 0; t < inputs.size(); ++t) {
        fast.decodeStep(inputs[t], ws);
        QVERIFY2(maxAbsDiff(ws.logits, reference[static_cast<int64_t>(t)]) < 1e-5, qPrintable(QString::number(t)));
    }

    double score = 0;
    const std::vector<int64_t> ids = fast.reply(source, 8, /*stopAtEnd=*/false, &score);
    QCOMPARE(ids.size(), size_t { 8 });
    std::vector<int64_t> fed = { Tokenizer::kStart };
    fed.insert(fed.end(), ids.begin(), ids.end() - 1);
    const auto fedLogits
        = model->decode(torch::tensor(fed).unsqueeze(0), enc.h, enc.c, enc).logits[0].to(torch::kFloat64);
    const auto logp = torch::log_softmax(fedLogits, -1);
    auto choosable = fedLogits.clone(); // <pad> and <start> are in the normaliser but never chosen
    choosable.select(1, Tokenizer::kPad).fill_(-1e300);
    choosable.select(1, Tokenizer::kStart).fill_(-1e300);
    double expected = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
        QCOMPARE(ids[t], choosable[static_cast<int64_t>(t)].argmax().item<int64_t>());
        expected += logp[static_cast<int64_t>(t)][ids[t]].item<double>();
    }
    QVERIFY(std::abs(score - expected / static_cast<double>(ids.size())) < 1e-5);
}

void TestModel::repliesCapTheirThreads()
{
    // A batch-1 reply runs on at most kMaxThreads threads, gives the same tokens as on one, and
    // leaves the caller's setting as it was (training after a chat keeps every thread).
    torch::manual_seed(5);
    ModelConfig cfg = tinyConfig();
    cfg.vocabSize = 40;
    Seq2Seq model(cfg);
    model->eval();
    const FastDecoder fast(*model);
    const std::vector<int64_t> source = { 5, 9, 4 };
    const int before = at::get_num_threads();
    torch::set_num_threads(1);
    QCOMPARE(FastDecoder::replyThreads(), 1);
    const auto one = fast.reply(source, 10, /*stopAtEnd=*/false);
    torch::set_num_threads(FastDecoder::kMaxThreads + 4);
    QCOMPARE(FastDecoder::replyThreads(), FastDecoder::kMaxThreads);
    QCOMPARE(fast.reply(source, 10, /*stopAtEnd=*/false), one);
    QCOMPARE(at::get_num_threads(), FastDecoder::kMaxThreads + 4);
    torch::set_num_threads(before);
}

void TestModel::logSumExpMatchesDouble()
{
    // The score's normaliser against torch's logsumexp in double, over lengths that leave every
    // remainder of the 16 lanes, logits from −90 to 90 and one very negative outlier.
    torch::manual_seed(3);
    for (int64_t V : { 1, 15, 16, 17, 2287, 5003 }) {
        auto z = (torch::rand({ V }) * 180 - 90).to(torch::kFloat32);
        z[0] = -1e4f;
        const double expected = torch::logsumexp(z.to(torch::kFloat64), 0).item<double>();
        const double got = kernels::logSumExp(z.data_ptr<float>(), V);
        QVERIFY2(std::abs(got - expected) <= 1e-6 * std::max(1.0, std::abs(expected)), qPrintable(QString::number(V)));
    }
}

void TestModel::sumSquaresMatchesDouble()
{
    // Gradient clipping's sum of squares against a sum in double, over lengths that leave every
    // remainder of the 64 partial sums and of the 4096-float blocks; the same floats give the same
    // sum every time.
    torch::manual_seed(5);
    for (int64_t n : { 0, 1, 63, 64, 65, 4095, 4096, 4097, 4096 * 3 + 129, 100003 }) {
        const auto x = torch::randn({ n }) * 1e-2;
        const double expected = x.to(torch::kFloat64).square().sum().item<double>();
        const double got = kernels::sumSquares(x.data_ptr<float>(), n);
        QVERIFY2(std::abs(got - expected) <= 1e-6 * expected, qPrintable(QString::number(n)));
        QCOMPARE(kernels::sumSquares(x.data_ptr<float>(), n), got);
    }
    // Big values stay finite: each float partial sums at most 64 squares, the rest is in double.
    std::vector<float> big(4096, 1e18f);
    const double square = static_cast<double>(1e18f) * static_cast<double>(1e18f);
    QVERIFY(std::abs(kernels::sumSquares(big.data(), 4096) - 4096 * square) <= 1e-6 * 4096 * square);
}

void TestModel::allFiniteFindsEveryNonFiniteValue()
{
    // The save's and the load's finiteness check: NaN, ±inf and nothing else, at every place of a
    // block of 4096 and of the tail after the last whole block; the largest and smallest floats
    // (and subnormals) are finite.
    for (int64_t n : { 1, 7, 4096, 4097, 4096 * 2 + 131 }) {
        std::vector<float> x(static_cast<size_t>(n), 0.5f);
        x[0] = std::numeric_limits<float>::max();
        x[static_cast<size_t>(n / 2)] = -std::numeric_limits<float>::max();
        x[static_cast<size_t>(n - 1)] = std::numeric_limits<float>::denorm_min();
        QVERIFY2(kernels::allFinite(x.data(), n), qPrintable(QString::number(n)));
        for (const float bad : { std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                 std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity() })
            for (int64_t at : { int64_t(0), n / 3, n - 1 }) {
                std::vector<float> y = x;
                y[static_cast<size_t>(at)] = bad;
                QVERIFY2(
                    !kernels::allFinite(y.data(), n), qPrintable(QString("%1 at %2 of %3").arg(bad).arg(at).arg(n)));
                QVERIFY(kernels::allFinite(y.data(), at)); // the values before it
            }
    }
    QVERIFY(kernels::allFinite(nullptr, 0));
}

void TestModel::cellElementsMatchDoubleAtEveryWidth()
{
    // The cell's element loops (sigmoid of i, f, o; tanh of g and of c; c and h) against the
    // same formulas in double, at the edges of their exp (±0, the −87 clamp, ±∞, NaN) and at
    // random values, for widths that leave every remainder of the 16- and 8-float lanes; and each
    // value as the scalar tail computes it (H = 1) bit for bit, whichever lane it lands in.
    const std::vector<float> edges = { 0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 43.4f, -43.4f, 43.5f, -43.5f, 43.6f,
        -43.6f, 86.99f, -86.99f, 87.0f, -87.0f, 87.01f, -87.01f, 88.0f, -88.0f, 1e30f, -1e30f, HUGE_VALF, -HUGE_VALF,
        std::nanf(""), -std::nanf("") };
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-12.0f, 12.0f);
    auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    for (int64_t H : { 1, 7, 8, 9, 15, 16, 17, 24, 33, 200 }) {
        const int64_t B = 3;
        std::vector<float> acts(static_cast<size_t>(B * 4 * H)), cPrev(static_cast<size_t>(B * H));
        size_t e = static_cast<size_t>(H); // a different edge in each lane position per width
        for (float& a : acts)
            a = rng() % 3 == 0 ? edges[e++ % edges.size()] : uniform(rng);
        // A state that is already infinite or NaN is left out (0 · ∞ is the state's, not the cell's).
        for (float& c : cPrev) {
            c = rng() % 5 == 0 ? std::clamp(edges[e++ % edges.size()], -1e30f, 1e30f) : uniform(rng);
            c = std::isnan(c) ? 0.0f : c;
        }
        std::vector<float> out = acts, c(cPrev.size()), tanhC(cPrev.size()), h(cPrev.size());
        kernels::lstmForwardStep(B, H, out.data(), cPrev.data(), c.data(), tanhC.data(), h.data());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t k = 0; k < H; ++k) {
                const auto at = [&](int gate) { return static_cast<size_t>(b * 4 * H + gate * H + k); };
                const auto row = static_cast<size_t>(b * H + k);
                const QString where = QStringLiteral("H=%1 b=%2 k=%3").arg(H).arg(b).arg(k);
                // The same element alone: the scalar tail of a width-1 call.
                float one[4] = { acts[at(0)], acts[at(1)], acts[at(2)], acts[at(3)] };
                float c1 = 0, t1 = 0, h1 = 0;
                kernels::lstmForwardStep(1, 1, one, &cPrev[row], &c1, &t1, &h1);
                const float lanes[7] = { out[at(0)], out[at(1)], out[at(2)], out[at(3)], c[row], tanhC[row], h[row] };
                const float alone[7] = { one[0], one[1], one[2], one[3], c1, t1, h1 };
                for (int v = 0; v < 7; ++v)
                    QVERIFY2(std::memcmp(&lanes[v], &alone[v], sizeof(float)) == 0
                            || (std::isnan(lanes[v]) && std::isnan(alone[v])),
                        qPrintable(where
                            + QStringLiteral(" value %1: %2 in lanes, %3 alone")
                                  .arg(v)
                                  .arg(static_cast<double>(lanes[v]), 0, 'g', 9)
                                  .arg(static_cast<double>(alone[v]), 0, 'g', 9)));
                // Against double.
                const double i = sigmoid(acts[at(0)]), f = sigmoid(acts[at(1)]), g = std::tanh(double { acts[at(2)] }),
                             o = sigmoid(acts[at(3)]);
                const double cell = f * cPrev[row] + i * g, t = std::tanh(cell);
                const double expected[7] = { i, f, g, o, cell, t, o * t };
                for (int v = 0; v < 7; ++v) {
                    if (std::isnan(expected[v])) {
                        QVERIFY2(std::isnan(lanes[v]), qPrintable(where + QStringLiteral(" value %1 not NaN").arg(v)));
                        continue;
                    }
                    const double tol = 1e-6 * std::max(1.0, std::abs(expected[v]));
                    QVERIFY2(std::abs(static_cast<double>(lanes[v]) - expected[v]) <= tol
                            || (std::isinf(expected[v]) && lanes[v] == static_cast<float>(expected[v])),
                        qPrintable(where
                            + QStringLiteral(" value %1: %2 against %3")
                                  .arg(v)
                                  .arg(static_cast<double>(lanes[v]), 0, 'g', 9)
                                  .arg(expected[v], 0, 'g', 9)));
                }
            }
    }
}

void TestModel::maxAbsDiffIsTheTensorExpression()
{
    // The checks' comparison (one pass in double for two fp32 CPU tensors of one shape) against
    // the tensor expression it stands for; a NaN on either side is the answer; other shapes,
    // layouts and types take the expression itself.
    torch::manual_seed(13);
    auto expression = [](const torch::Tensor& a, const torch::Tensor& b) {
        return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
    };
    const auto a = torch::randn({ 20, 2287 }) * 50, b = a + torch::randn({ 20, 2287 }) * 1e-6;
    QCOMPARE(maxAbsDiff(a, b), expression(a, b));
    QCOMPARE(maxAbsDiff(a, a), 0.0);
    for (const auto& at : { std::pair<int64_t, int64_t> { 0, 0 }, { 7, 1000 }, { 19, 2286 } }) {
        auto withNan = b.clone();
        withNan[at.first][at.second] = std::nanf("");
        QVERIFY(std::isnan(maxAbsDiff(a, withNan)));
        QVERIFY(std::isnan(maxAbsDiff(withNan, a)));
    }
    const auto t = a.t(), u = b.t().contiguous(); // a transposed view: the expression's path
    QCOMPARE(maxAbsDiff(t, u), expression(t, u));
    const auto row = b[3]; // broadcast against every row
    QCOMPARE(maxAbsDiff(a, row), expression(a, row));
    QCOMPARE(maxAbsDiff(a.to(torch::kFloat64), b), expression(a, b));
    QCOMPARE(maxAbsDiff(torch::empty({ 0 }), torch::empty({ 0 })), 0.0);
}

void TestModel::panelProductsMatchDouble()
{
    // The batch-1 matrix-vector product over panels, against the product in double: shapes that
    // leave every remainder of the 64-row panels and their 8-row lanes, a bias or the output's
    // own values as the addend, and the panels split between threads in every way the
    // decoder can (the same floats whichever thread sums a row).
    torch::manual_seed(9);
    for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>> { { 1, 1 }, { 7, 5 }, { 8, 3 }, { 9, 200 },
             { 63, 17 }, { 64, 64 }, { 65, 1 }, { 130, 33 }, { 2287, 200 } }) {
        const QString shape = QStringLiteral("%1 x %2").arg(m).arg(n);
        const auto w = torch::randn({ m, n });
        const auto x = torch::randn({ n });
        const auto b = torch::randn({ m });
        const auto expected = at::addmv(b.to(torch::kFloat64), w.to(torch::kFloat64), x.to(torch::kFloat64));
        const auto bound = (w.abs().to(torch::kFloat64).mv(x.abs().to(torch::kFloat64)) + b.abs()) * 1e-6; // rounding
        const PanelMatrix panels(w);
        QCOMPARE(panels.rows(), m);
        QCOMPARE(panels.cols(), n);

        auto withBias = torch::full({ m }, std::nanf(""));
        panels.product(x.data_ptr<float>(), b.data_ptr<float>(), withBias.data_ptr<float>());
        QVERIFY2(((withBias.to(torch::kFloat64) - expected).abs() <= bound).all().item<bool>(), qPrintable(shape));

        auto inPlace = b.clone(); // b == nullptr: y's own values are the addend
        panels.product(x.data_ptr<float>(), nullptr, inPlace.data_ptr<float>());
        QVERIFY2(torch::equal(inPlace, withBias), qPrintable(shape));

        const int before = at::get_num_threads();
        for (int threads : { 1, 2, 3, 8 }) {
            torch::set_num_threads(threads);
            auto y = torch::empty({ m });
            panels.product(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>());
            QVERIFY2(torch::equal(y, withBias), qPrintable(shape + QStringLiteral(", %1 threads").arg(threads)));
        }
        torch::set_num_threads(before);
        // Any split along panel bounds, as at::parallel_for hands them out.
        auto pieces = torch::empty({ m });
        const auto packed = torch::empty({ kernels::panelFloats(m, n) });
        kernels::packPanels(w.data_ptr<float>(), m, n, packed.data_ptr<float>());
        for (int64_t first = 0; first < m; first += kernels::kPanelRows)
            kernels::panelMatVec(packed.data_ptr<float>(), m, n, x.data_ptr<float>(), b.data_ptr<float>(),
                pieces.data_ptr<float>(), first, std::min(first + kernels::kPanelRows, m));
        QVERIFY2(torch::equal(pieces, withBias), qPrintable(shape));
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
    Seq2Seq model = attentionModel();
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

// fp16 autocast on a GPU makes the attention scores half; filling padding with -1e9 threw there.
// The CPU runs the same code on a model converted to half.
void TestModel::attentionWorksInHalfPrecision()
{
    Seq2Seq model = attentionModel();
    torch::NoGradGuard noGrad;
    auto src = torch::tensor({ { 5, 6, 0, 0 }, { 3, 4, 7, 8 } });
    auto lengths = torch::tensor({ 2, 4 });
    auto input = torch::tensor({ { 2, 4 }, { 2, 5 } });
    auto encFull = model->encode(src, lengths);
    auto full = model->decode(input, encFull.h, encFull.c, encFull);

    model->to(torch::kHalf);
    auto enc = model->encode(src, lengths);
    QCOMPARE(enc.outputs.scalar_type(), torch::kHalf);
    DecoderOutput half;
    try {
        half = model->decode(input, enc.h, enc.c, enc);
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
    QVERIFY(torch::isfinite(half.logits).all().item<bool>());
    QCOMPARE(half.attention[0][0][2].item<double>(), 0.0); // padding gets no weight
    QCOMPARE(half.attention[0][1][3].item<double>(), 0.0);
    QVERIFY(std::abs(half.attention[1][1].sum().item<double>() - 1.0) < 1e-3);
    // The same answer as in fp32, to half's precision.
    QVERIFY((half.logits.to(torch::kFloat32) - full.logits).abs().max().item<double>() < 2e-2);
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

// bf16 products (operands rounded to 8 significant bits, 2^-9 relative, fp32 sums) against the
// fp32 reference: each rounding moves a gate by ~0.2%, and the state carries it through the
// steps. The worst case measured on maskedLstmMatchesTorchLstm is 1.1e-2 (dW_ih, full length);
// the error is printed on failure.
constexpr double kBf16Tolerance = 3e-2;

void TestModel::maskedLstmMatchesTorchLstm_data()
{
    QTest::addColumn<bool>("lengths");
    QTest::addColumn<bool>("bf16");
    QTest::newRow("random lengths") << true << false;
    QTest::newRow("full length") << false << false;
    QTest::newRow("random lengths, bf16 products") << true << true;
    QTest::newRow("full length, bf16 products") << false << true;
}

void TestModel::maskedLstmMatchesTorchLstm()
{
    // The engine's LSTM layer against torch::nn::LSTM, forward and backward, on random lengths:
    // the reference runs on packed sequences, so its final state is each row's true last step.
    QFETCH(bool, lengths);
    QFETCH(bool, bf16);
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
    const auto gemm = bf16 ? torch::kBFloat16 : torch::kFloat32;
    const MaskedLstmOutput out = maskedLstmLayer(xm, hm, cm, wih, whh, bih, bhh, lengths ? len : torch::Tensor(), gemm);
    ((out.outputs * gy).sum() + (out.h * gh).sum() + (out.c * gc).sum()).backward();
    for (const auto& t : { out.outputs, out.h, out.c, xm.grad(), wih.grad(), whh.grad(), bih.grad() })
        QCOMPARE(t.scalar_type(), torch::kFloat32); // fp32 state and gradients whatever the products

    const double tol = bf16 ? kBf16Tolerance : 1e-5;
    auto close = [&](const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); };
    const std::pair<const char*, double> errors[] = { { "outputs", close(out.outputs, yr) }, { "h", close(out.h, hT) },
        { "c", close(out.c, cT) }, { "dx", close(xm.grad(), xr.grad()) }, { "dh0", close(hm.grad(), hr.grad()[0]) },
        { "dc0", close(cm.grad(), cr.grad()[0]) }, { "dWih", close(wih.grad(), p["weight_ih_l0"].grad()) },
        { "dWhh", close(whh.grad(), p["weight_hh_l0"].grad()) }, { "dbih", close(bih.grad(), p["bias_ih_l0"].grad()) },
        { "dbhh", close(bhh.grad(), p["bias_hh_l0"].grad()) } };
    for (const auto& [what, error] : errors)
        QVERIFY2(error < tol, qPrintable(QString("%1 off by %2").arg(what).arg(error)));
    if (bf16) // the products did run on bf16 operands: not the fp32 result
        QVERIFY(close(out.outputs, yr) > 1e-6);
    if (lengths) // a row of length 1 keeps its state from step 2 on, and its later inputs get no gradient
        QCOMPARE(xm.grad()[1].narrow(0, 1, T - 1).abs().max().item<double>(), 0.0);
}

void TestModel::maskedLstmPassesEmptyRowsThrough()
{
    // A row of length 0 (torch's packing refuses those, so no reference there): no output, its
    // final state is its initial one, and the gradients of the final state reach the initial
    // state unchanged. The other rows are what they are in a batch without it.
    torch::manual_seed(8);
    const int64_t T = 4, I = 3, H = 5;
    torch::nn::LSTM ref(torch::nn::LSTMOptions(I, H).batch_first(true));
    auto p = ref->named_parameters();
    auto run = [&](const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0, const torch::Tensor& len,
                   const torch::Tensor& gy, const torch::Tensor& gh, const torch::Tensor& gc) {
        auto xm = x.clone().requires_grad_(), hm = h0.clone().requires_grad_(), cm = c0.clone().requires_grad_();
        const MaskedLstmOutput out
            = maskedLstmLayer(xm, hm, cm, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], len);
        ((out.outputs * gy).sum() + (out.h * gh).sum() + (out.c * gc).sum()).backward();
        return std::vector<torch::Tensor> { out.outputs.detach(), out.h.detach(), out.c.detach(), xm.grad(), hm.grad(),
            cm.grad() };
    };
    auto x = torch::randn({ 3, T, I }), h0 = torch::randn({ 3, H }), c0 = torch::randn({ 3, H });
    auto gy = torch::randn({ 3, T, H }), gh = torch::randn({ 3, H }), gc = torch::randn({ 3, H });
    const auto all = run(x, h0, c0, torch::tensor({ 4, 0, 2 }, torch::kInt64), gy, gh, gc);
    QCOMPARE(all[0][1].abs().max().item<double>(), 0.0); // no output
    QVERIFY(torch::equal(all[1][1], h0[1]) && torch::equal(all[2][1], c0[1])); // final = initial
    QCOMPARE(all[3][1].abs().max().item<double>(), 0.0); // its inputs get no gradient
    QVERIFY(torch::equal(all[4][1], gh[1]) && torch::equal(all[5][1], gc[1])); // passed straight through
    const auto rows = torch::tensor({ 0, 2 }, torch::kInt64);
    const auto two = run(x.index_select(0, rows), h0.index_select(0, rows), c0.index_select(0, rows),
        torch::tensor({ 4, 2 }, torch::kInt64), gy.index_select(0, rows), gh.index_select(0, rows),
        gc.index_select(0, rows));
    for (size_t k = 0; k < all.size(); ++k)
        QVERIFY2(
            (all[k].index_select(0, rows) - two[k]).abs().max().item<double>() < 1e-6, qPrintable(QString::number(k)));
}

void TestModel::maskedLstmLooksUpItsOwnInputs_data()
{
    maskedLstmMatchesTorchLstm_data();
}

// The layer gathering its inputs from an embedding's weight gives the numbers of the layer fed
// the lookup (sparseGradLookup, whose gradient is sparse too), bit for bit: outputs, final states
// and every gradient, the weight's rows summed in the same order.
void TestModel::maskedLstmLooksUpItsOwnInputs()
{
    QFETCH(bool, lengths);
    QFETCH(bool, bf16);
    torch::manual_seed(12);
    const int64_t V = 30, B = 5, T = 6, I = 8, H = 4;
    torch::nn::LSTM ref(torch::nn::LSTMOptions(I, H).batch_first(true));
    auto p = ref->named_parameters();
    // Repeated ids, the padding row inside and after each length, the last row.
    auto ids = torch::tensor(
        { 3, 7, 3, 0, 0, 0, 29, 1, 1, 1, 1, 5, 7, 7, 0, 2, 0, 0, 9, 3, 29, 3, 0, 0, 4, 0, 0, 0, 0, 0 }, torch::kInt64)
                   .view({ B, T });
    auto len = lengths ? torch::tensor({ 3, 6, 4, 5, 1 }, torch::kInt64) : torch::Tensor();
    auto h0 = torch::randn({ B, H }), c0 = torch::randn({ B, H });
    auto gy = torch::randn({ B, T, H }), gh = torch::randn({ B, H }), gc = torch::randn({ B, H });
    const auto table = torch::randn({ V, I });
    const auto gemm = bf16 ? torch::kBFloat16 : torch::kFloat32;
    auto run = [&](bool lookup) {
        auto w = table.clone().requires_grad_();
        auto wih = p["weight_ih_l0"].detach().clone().requires_grad_();
        const MaskedLstmOutput out = lookup ? maskedLstmLayer(LayerInput { w, ids, 0 }, h0, c0, wih, p["weight_hh_l0"],
                                         p["bias_ih_l0"], p["bias_hh_l0"], len, gemm)
                                            : maskedLstmLayer(sparseGradLookup(w, ids, 0), h0, c0, wih,
                                                p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], len, gemm);
        ((out.outputs * gy).sum() + (out.h * gh).sum() + (out.c * gc).sum()).backward();
        return std::vector<torch::Tensor> { out.outputs.detach(), out.h.detach(), out.c.detach(), w.grad(),
            wih.grad() };
    };
    const auto ours = run(true), theirs = run(false);
    QVERIFY(ours[3].is_sparse() && theirs[3].is_sparse()); // (the accumulated copies drop the coalesced mark)
    QVERIFY(torch::equal(ours[3]._indices(), theirs[3]._indices())); // the padding row left out, as there
    QCOMPARE((ours[3]._indices() == 0).sum().item<int64_t>(), int64_t(0));
    QVERIFY(torch::equal(ours[3]._values(), theirs[3]._values()));
    for (size_t k : { 0, 1, 2, 4 })
        QVERIFY2(torch::equal(ours[k], theirs[k]), qPrintable(QString::number(k)));
    // An id past the weight's rows is an error, not a read outside it.
    auto w = table.clone().requires_grad_();
    bool refused = false;
    try {
        maskedLstmLayer(LayerInput { w, torch::full({ B, T }, V, torch::kInt64), 0 }, h0, c0, p["weight_ih_l0"],
            p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], len, gemm);
    } catch (const c10::Error& e) {
        refused = std::string(e.what()).find("outside the embedding") != std::string::npos;
    }
    QVERIFY(refused);
}

// Without lengths the outputs are the layer's states seen batch-first (no copy); a second
// layer reads them there, and every gradient comes out as from contiguous inputs.
void TestModel::maskedLstmOutputsWithoutLengthsAreTimeMajor()
{
    torch::manual_seed(13);
    const int64_t B = 3, T = 5, I = 4, H = 6;
    torch::nn::LSTM ref(torch::nn::LSTMOptions(I, H).num_layers(2).batch_first(true));
    auto p = ref->named_parameters();
    auto x = torch::randn({ B, T, I }), gy = torch::randn({ B, T, H });
    auto h0 = torch::zeros({ B, H });
    auto run = [&](bool copyBetween) {
        auto xm = x.clone().requires_grad_();
        const auto one = maskedLstmLayer(
            xm, h0, h0, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], torch::Tensor());
        const auto between = copyBetween ? one.outputs.contiguous() : one.outputs;
        const auto two = maskedLstmLayer(
            between, h0, h0, p["weight_ih_l1"], p["weight_hh_l1"], p["bias_ih_l1"], p["bias_hh_l1"], torch::Tensor());
        (two.outputs * gy).sum().backward();
        return std::vector<torch::Tensor> { one.outputs.detach(), two.outputs.detach(), xm.grad() };
    };
    const auto view = run(false), copied = run(true);
    QVERIFY(!view[0].is_contiguous() && view[0].transpose(0, 1).is_contiguous()); // time-major, not copied
    for (size_t k = 0; k < view.size(); ++k)
        QVERIFY2(torch::equal(view[k], copied[k]), qPrintable(QString::number(k)));
    // And against torch::nn::LSTM's two layers.
    auto xr = x.clone().requires_grad_();
    auto [yr, state] = ref->forward(xr);
    (yr * gy).sum().backward();
    QVERIFY((view[1] - yr).abs().max().item<double>() < 1e-5);
    QVERIFY((view[2] - xr.grad()).abs().max().item<double>() < 1e-5);
}

// The rows of a test run once with fp32 products and once with bf16 ones (column "bf16").
static void precisionRows()
{
    QTest::addColumn<bool>("bf16");
    QTest::newRow("fp32") << false;
    QTest::newRow("bf16 products") << true;
}

void TestModel::maskedModelTrainsLikeTorchModel_data()
{
    precisionRows();
}

void TestModel::maskedModelTrainsLikeTorchModel()
{
    QFETCH(bool, bf16);
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
        a->setMaskedLstm(true, bf16 ? torch::kBFloat16 : torch::kFloat32);
        const double la = lossOf(a).item<double>();
        lossOf(a).backward();
        const double lc = lossOf(c).item<double>();
        lossOf(c).backward();
        // bf16: the tiny model's gates and gradients are small, so the rounding is too (measured
        // ≤ 7e-5 on the gradients, 2e-5 on the loss).
        const double tol = bf16 ? 1e-3 : 1e-5;
        QVERIFY2(std::abs(la - lc) < tol, qPrintable(QString("loss %1 vs %2").arg(la).arg(lc)));
        for (auto& [name, t] : a->named_parameters().pairs()) {
            const double error = (t.grad() - c->named_parameters()[name].grad()).abs().max().item<double>();
            QVERIFY2(error < tol, qPrintable(QString("%1 off by %2").arg(name.c_str()).arg(error)));
        }
    }
}

void TestModel::projectedLossMatchesLinearCrossEntropy_data()
{
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<double>(
        "spread"); // the weight scale: logits of a few units, or of ±100 and more (exps below 1e-38)
    QTest::newRow("fp32") << false << 0.3;
    QTest::newRow("fp32, wide logits") << false << 12.0;
    QTest::newRow("bf16 products") << true << 0.3;
    // 70 000 words: the rows' p − onehot kept for the weight gradient fill their 16 MiB after one
    // chunk, so its product is made in three parts and added up.
    QTest::newRow("bf16 products, 70 000 words") << true << 0.3;
}

void TestModel::projectedLossMatchesLinearCrossEntropy()
{
    // 300 rows: two full chunks of 128 and a partial one.
    QFETCH(bool, bf16);
    QFETCH(double, spread);
    torch::manual_seed(11);
    const int64_t N = 300, H = 16, V = QString(QTest::currentDataTag()).contains("70 000") ? 70000 : 37;
    auto h = torch::randn({ N, H }), w = torch::randn({ V, H }) * spread, b = torch::randn({ V });
    auto t = torch::randint(0, V, { N }, torch::kInt64);
    auto h1 = h.clone().requires_grad_(), w1 = w.clone().requires_grad_(), b1 = b.clone().requires_grad_();
    auto ref = torch::nn::functional::cross_entropy(torch::nn::functional::linear(h1, w1, b1), t,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    (ref * 0.5).backward(); // a non-unit incoming gradient, like the trainer's 1/tokens
    auto h2 = h.clone().requires_grad_(), w2 = w.clone().requires_grad_(), b2 = b.clone().requires_grad_();
    auto mine = projectedCrossEntropy(h2, w2, b2, t, bf16 ? torch::kBFloat16 : torch::kFloat32);
    (mine * 0.5).backward();
    // bf16: the operands rounded to 8 significant bits (2^-9 relative) move the logits by ~1e-2
    // here, and the softmax and the sums over 300 rows carry that into the gradients (measured:
    // loss 8e-6 relative, dH 1.8e-3, dW 1.7e-2, db 1.05e-2); fp32 agrees to rounding.
    const double lossTol = bf16 ? 1e-4 : 1e-3, dhTol = bf16 ? 1e-2 : 1e-5, dwTol = bf16 ? 5e-2 : 1e-4;
    const double lossError = std::abs(mine.item<double>() - ref.item<double>()) / std::abs(ref.item<double>());
    const double dh = (h2.grad() - h1.grad()).abs().max().item<double>();
    const double dw = (w2.grad() - w1.grad()).abs().max().item<double>();
    const double db = (b2.grad() - b1.grad()).abs().max().item<double>();
    const QString got = QString("loss rel. %1, dH %2, dW %3, db %4").arg(lossError).arg(dh).arg(dw).arg(db);
    QVERIFY2(lossError < lossTol, qPrintable(got));
    QVERIFY2(dh < dhTol, qPrintable(got));
    QVERIFY2(dw < dwTol, qPrintable(got));
    QVERIFY2(db < (bf16 ? 3e-2 : 1e-4), qPrintable(got));
    if (bf16) // the products did run on bf16 operands
        QVERIFY2(dh > 1e-6, qPrintable(got));
}

void TestModel::projectedLossOverRowsIsTheLossOfThoseRows_data()
{
    precisionRows();
}

void TestModel::projectedLossOverRowsIsTheLossOfThoseRows()
{
    // The training step's loss gathers the real positions' rows itself: the same floats as the
    // loss over index_select's copy of them (the same products of the same rows), and the
    // gradient lands in the named rows of the states, every other row zero. 300 of 420 rows in a
    // shuffled order: two full chunks of 128 and a partial one.
    QFETCH(bool, bf16);
    const auto type = bf16 ? torch::kBFloat16 : torch::kFloat32;
    torch::manual_seed(16);
    const int64_t M = 420, N = 300, H = 16, V = 37;
    const auto states = torch::randn({ M, H }), w = torch::randn({ V, H }) * 0.3, b = torch::randn({ V });
    const auto rows = torch::randperm(M, torch::kInt64).narrow(0, 0, N).contiguous();
    const auto t = torch::randint(0, V, { N }, torch::kInt64);
    auto s1 = states.clone().requires_grad_(), w1 = w.clone().requires_grad_(), b1 = b.clone().requires_grad_();
    auto ref = projectedCrossEntropy(s1.index_select(0, rows), w1, b1, t, type);
    (ref * 0.5).backward();
    auto s2 = states.clone().requires_grad_(), w2 = w.clone().requires_grad_(), b2 = b.clone().requires_grad_();
    auto mine = projectedCrossEntropy(s2, rows, w2, b2, t, type);
    (mine * 0.5).backward();
    QCOMPARE(mine.item<double>(), ref.item<double>());
    QVERIFY(torch::equal(s2.grad(), s1.grad()));
    QVERIFY(torch::equal(w2.grad(), w1.grad()));
    QVERIFY(torch::equal(b2.grad(), b1.grad()));
    auto unnamed = torch::ones({ M }, torch::kBool);
    unnamed.index_fill_(0, rows, false);
    QVERIFY(unnamed.sum().item<int64_t>() == M - N);
    QCOMPARE(s2.grad().index({ unnamed }).abs().sum().item<double>(), 0.0);
    QVERIFY(s2.grad().index_select(0, rows).abs().sum().item<double>() > 0);
    // A row named twice, or one past the states, is refused.
    auto twice = rows.clone();
    twice[5] = twice[9].item<int64_t>();
    QVERIFY_THROWS_EXCEPTION(c10::Error, projectedCrossEntropy(states, twice, w, b, t, type));
    auto outside = rows.clone();
    outside[0] = M;
    QVERIFY_THROWS_EXCEPTION(c10::Error, projectedCrossEntropy(states, outside, w, b, t, type));
}

void TestModel::projectedScoreMatchesLinearCrossEntropy_data()
{
    precisionRows();
}

void TestModel::projectedScoreMatchesLinearCrossEntropy()
{
    // Validation's score: the summed loss and the argmax hits of linear + cross_entropy, over 300
    // rows (two chunks of 128 and a partial one). Words 3 and 4 share their weights and bias, so
    // their logits tie: argmax takes word 3, a hit for rows whose target is 3 and none for 4.
    QFETCH(bool, bf16);
    torch::manual_seed(15);
    const int64_t N = 300, H = 40, V = 37;
    auto h = torch::randn({ N, H }), w = torch::randn({ V, H }), b = torch::randn({ V });
    w[4].copy_(w[3]);
    b[3] = 50.0f; // words 3 and 4 the largest logits of every row
    b[4] = 50.0f;
    auto t = torch::randint(0, V, { N }, torch::kInt64);
    t.narrow(0, 0, 40).fill_(3);
    t.narrow(0, 40, 40).fill_(4);
    // The reference from the operands the products take (bf16: rounded first), in double.
    const auto hr = bf16 ? h.to(torch::kBFloat16).to(torch::kFloat32) : h;
    const auto wr = bf16 ? w.to(torch::kBFloat16).to(torch::kFloat32) : w;
    const auto logits
        = torch::nn::functional::linear(hr.to(torch::kDouble), wr.to(torch::kDouble), b.to(torch::kDouble));
    const double ref = torch::nn::functional::cross_entropy(
        logits, t, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                           .item<double>();
    const int64_t refHits = (logits.argmax(-1) == t).sum().item<int64_t>();
    QCOMPARE((logits.argmax(-1).narrow(0, 0, 80) == 3).sum().item<int64_t>(), int64_t(80));
    int64_t hits = 0;
    const double mine
        = projectedCrossEntropyScore(h, w, b, t, bf16 ? torch::kBFloat16 : torch::kFloat32, &hits).item<double>();
    QVERIFY2(std::abs(mine - ref) < 1e-5 * std::abs(ref), qPrintable(QString("%1 against %2").arg(mine).arg(ref)));
    QCOMPARE(hits, refHits);
    QVERIFY(hits >= 40);
}

void TestModel::softmaxRowsInBf16AreTheFp32RowsRounded()
{
    // The bf16 training path takes the rows' softmax − onehot straight from the row kernel in bf16:
    // bit for bit what the fp32 rows become through ATen's conversion, with the same loss and
    // column sums. Rows of large and small logits (ties and tiny probabilities to round), a row
    // with a NaN logit (NaN stays NaN), 2287 words as the seed corpus has.
    torch::manual_seed(5);
    const int64_t n = 9, V = 2287;
    auto z = torch::randn({ n, V }) * torch::tensor({ 1.0f, 4.0f, 30.0f, 0.01f, 1.0f, 8.0f, 100.0f, 2.0f, 1.0f }).view({ n, 1 });
    z[4][17] = std::numeric_limits<float>::quiet_NaN();
    const auto bias = torch::randn({ V });
    auto target = torch::randint(0, V, { n }, torch::kInt64);
    target[2] = 0;
    target[3] = V - 1;
    auto z32 = z.clone(), zScratch = z.clone();
    auto col32 = torch::zeros({ V }), col16 = torch::zeros({ V });
    auto zb = torch::empty({ n, V }, torch::kBFloat16);
    const double loss32 = kernels::softmaxCrossEntropyRows(
        n, V, V, z32.data_ptr<float>(), bias.data_ptr<float>(), target.data_ptr<int64_t>(), col32.data_ptr<float>());
    const double loss16 = kernels::softmaxCrossEntropyRows(n, V, V, zScratch.data_ptr<float>(), bias.data_ptr<float>(),
        target.data_ptr<int64_t>(), col16.data_ptr<float>(), reinterpret_cast<uint16_t*>(zb.data_ptr()));
    QVERIFY(std::isnan(loss32) && std::isnan(loss16)); // the NaN row's loss
    const auto rounded = z32.to(torch::kBFloat16);
    // A NaN stays a NaN (ATen's vector conversion writes 0xFFFF for it, this kernel 0x7FC0).
    QVERIFY(torch::equal(zb.isnan(), rounded.isnan()));
    QVERIFY(zb[4].isnan().all().item<bool>());
    const auto differ = (zb.view(torch::kInt16) != rounded.view(torch::kInt16)).logical_and(rounded.isnan().logical_not());
    if (differ.any().item<bool>()) {
        const auto where = differ.nonzero()[0];
        const int64_t r = where[0].item<int64_t>(), v = where[1].item<int64_t>();
        QFAIL(qPrintable(QString("row %1, word %2: %3 (fp32 %4) against ATen's %5 (%6 differ)")
                             .arg(r).arg(v).arg(zb.view(torch::kInt16)[r][v].item<int>() & 0xFFFF, 0, 16)
                             .arg(z32[r][v].item<float>()).arg(rounded.view(torch::kInt16)[r][v].item<int>() & 0xFFFF, 0, 16)
                             .arg(differ.sum().item<int64_t>())));
    }
    QVERIFY(torch::equal(col16.isnan(), col32.isnan()));
    QVERIFY(torch::equal(col16.nan_to_num(0.0), col32.nan_to_num(0.0)));
    double lossFinite32 = 0, lossFinite16 = 0;
    for (int64_t r : { 0, 1, 2, 3, 5, 6, 7, 8 }) { // the finite rows alone, one at a time
        auto a = z.narrow(0, r, 1).clone(), b = z.narrow(0, r, 1).clone();
        auto c1 = torch::zeros({ V }), c2 = torch::zeros({ V });
        auto out = torch::empty({ 1, V }, torch::kBFloat16);
        lossFinite32 += kernels::softmaxCrossEntropyRows(
            1, V, V, a.data_ptr<float>(), bias.data_ptr<float>(), target.data_ptr<int64_t>() + r, c1.data_ptr<float>());
        lossFinite16 += kernels::softmaxCrossEntropyRows(1, V, V, b.data_ptr<float>(), bias.data_ptr<float>(),
            target.data_ptr<int64_t>() + r, c2.data_ptr<float>(), reinterpret_cast<uint16_t*>(out.data_ptr()));
        QVERIFY(torch::equal(out.view(torch::kInt16), a.to(torch::kBFloat16).view(torch::kInt16)));
        QVERIFY(torch::equal(c2, c1)); // the column sums (the bias gradient), finite here
    }
    QVERIFY(std::isfinite(lossFinite32));
    QCOMPARE(lossFinite16, lossFinite32);
}

void TestModel::lstmStepsInBf16AreTheFp32StepsRounded()
{
    // The bf16 layer takes each step's h (forward) and dgates (backward) in bf16 from the element
    // loops: the fp32 results are unchanged by asking, and the bf16 copies are those results
    // through ATen's conversion, bit for bit. 200 units as the seed model has, 37 as an odd width.
    torch::manual_seed(8);
    for (const int64_t H : { 200, 37 }) {
        const int64_t B = 5;
        const auto acts = torch::randn({ B, 4 * H }) * 3, cPrev = torch::randn({ B, H });
        auto a1 = acts.clone(), a2 = acts.clone();
        auto c1 = torch::empty({ B, H }), c2 = c1.clone(), t1 = c1.clone(), t2 = c1.clone(), h1 = c1.clone(),
             h2 = c1.clone();
        auto hB = torch::empty({ B, H }, torch::kBFloat16);
        kernels::lstmForwardStep(B, H, a1.data_ptr<float>(), cPrev.data_ptr<float>(), c1.data_ptr<float>(),
            t1.data_ptr<float>(), h1.data_ptr<float>());
        kernels::lstmForwardStep(B, H, a2.data_ptr<float>(), cPrev.data_ptr<float>(), c2.data_ptr<float>(),
            t2.data_ptr<float>(), h2.data_ptr<float>(), reinterpret_cast<uint16_t*>(hB.data_ptr()));
        QVERIFY(torch::equal(a1, a2) && torch::equal(c1, c2) && torch::equal(t1, t2) && torch::equal(h1, h2));
        QVERIFY(torch::equal(hB.view(torch::kInt16), h1.to(torch::kBFloat16).view(torch::kInt16)));

        const auto dOut = torch::randn({ B, H });
        auto dh1 = torch::randn({ B, H }), dh2 = dh1.clone(), dc1 = torch::randn({ B, H }), dc2 = dc1.clone();
        auto d1 = torch::empty({ B, 4 * H }), d2 = d1.clone();
        auto dB = torch::empty({ B, 4 * H }, torch::kBFloat16);
        kernels::lstmBackwardStep(B, H, dh1.data_ptr<float>(), dOut.data_ptr<float>(), dc1.data_ptr<float>(),
            a1.data_ptr<float>(), t1.data_ptr<float>(), cPrev.data_ptr<float>(), d1.data_ptr<float>());
        kernels::lstmBackwardStep(B, H, dh2.data_ptr<float>(), dOut.data_ptr<float>(), dc2.data_ptr<float>(),
            a1.data_ptr<float>(), t1.data_ptr<float>(), cPrev.data_ptr<float>(), d2.data_ptr<float>(),
            reinterpret_cast<uint16_t*>(dB.data_ptr()));
        QVERIFY(torch::equal(d1, d2) && torch::equal(dh1, dh2) && torch::equal(dc1, dc2));
        QVERIFY(torch::equal(dB.view(torch::kInt16), d1.to(torch::kBFloat16).view(torch::kInt16)));
        QVERIFY(!torch::equal(dB.to(torch::kFloat32), d1)); // rounded: not the fp32 values themselves
    }
}

void TestModel::stepBf16WeightsAreMadeOnceAndMatch()
{
    // A bf16 training step's lanes share the weights' bf16 forms: each made once (one task each,
    // run by the caller's cores), handed out while the step's object lives and to nobody else, and
    // products through them are the same bits as through forms each caller makes.
    torch::manual_seed(12);
    const auto plainW = torch::randn({ 64, 30 }), recurrentW = torch::randn({ 40, 10 }), other = torch::randn({ 64, 30 });
    const auto a = torch::randn({ 7, 10 }).to(torch::kBFloat16), b = torch::randn({ 7, 40 }).to(torch::kBFloat16);
    auto products = [&] {
        const RecurrentProductBf16 forward(recurrentW, /*transposed=*/true), backward(recurrentW, /*transposed=*/false);
        auto c1 = torch::zeros({ 7, 40 }), c2 = torch::zeros({ 7, 10 });
        forward.accumulate(c1, a);
        backward.accumulate(c2, b);
        return std::pair { c1, c2 };
    };
    const auto [alone1, alone2] = products();
    std::vector<int> runs;
    {
        const StepBf16Weights step(
            { plainW }, { recurrentW }, {}, [&](int64_t tasks, const std::function<void(int64_t)>& task) {
                runs.assign(static_cast<size_t>(tasks), 0);
                for (int64_t k = tasks - 1; k >= 0; --k) { // any order
                    task(k);
                    ++runs[static_cast<size_t>(k)];
                }
            });
        // The recurrent weight laid out twice for the micro-kernel, else as a bf16 copy.
        QCOMPARE(runs.size(), size_t(bf16MicroKernel() ? 3 : 2));
        QCOMPARE(step.find(recurrentW, 1).defined(), bf16MicroKernel());
        QCOMPARE(step.find(recurrentW, 2).defined(), bf16MicroKernel());
        QCOMPARE(step.find(recurrentW, 0).defined(), !bf16MicroKernel());
        QVERIFY(std::all_of(runs.begin(), runs.end(), [](int n) { return n == 1; }));
        const auto w1 = bf16Weight(plainW), w2 = bf16Weight(plainW);
        QCOMPARE(w1.data_ptr(), w2.data_ptr()); // the step's copy, not a new one per call
        QVERIFY(torch::equal(w1.view(torch::kInt16), plainW.to(torch::kBFloat16).view(torch::kInt16)));
        const auto o1 = bf16Weight(other), o2 = bf16Weight(other);
        QVERIFY(o1.data_ptr() != o2.data_ptr()); // not the step's: made per call
        {
            // A second training's step in the same process (the window's Compare while it trains):
            // both steps' forms are found while both live, and the first's after the second ends.
            const StepBf16Weights second(
                { other }, {}, {}, [](int64_t tasks, const std::function<void(int64_t)>& task) {
                    for (int64_t k = 0; k < tasks; ++k)
                        task(k);
                });
            const auto s1 = bf16Weight(other), s2 = bf16Weight(other);
            QCOMPARE(s1.data_ptr(), s2.data_ptr());
            QCOMPARE(bf16Weight(plainW).data_ptr(), w1.data_ptr());
        }
        QCOMPARE(bf16Weight(plainW).data_ptr(), w1.data_ptr());
        QVERIFY(!step.find(plainW.narrow(0, 0, 32), 0).defined()); // a view of it is not it
        const auto [shared1, shared2] = products();
        QVERIFY(torch::equal(shared1, alone1) && torch::equal(shared2, alone2));
    }
    const auto after1 = bf16Weight(plainW), after2 = bf16Weight(plainW);
    QVERIFY(after1.data_ptr() != after2.data_ptr()); // the step is over
}

void TestModel::wideProductWritesWholeRowsInFp32()
{
    // The output projection's bf16 forward product: bf16 operands summed in fp32 into rows that
    // may be wider than the vocabulary (whole AMX tiles), the extra columns written as zeros; the
    // same bits from the step's laid-out weight as from one laid out per call; one row, and a
    // slice of wider rows, as well as a block.
    torch::manual_seed(13);
    const int64_t N = 37, K = 70; // whole tiles of 16 pairs and 3 pairs more, 2 tiles of rows and 5 more
    const auto w = torch::randn({ N, K });
    const auto wb = w.to(torch::kBFloat16).to(torch::kFloat32);
    const auto wide = torch::randn({ 9, K + 6 }).to(torch::kBFloat16);
    for (const auto& a : { torch::randn({ 7, K }).to(torch::kBFloat16), torch::randn({ 1, K }).to(torch::kBFloat16),
             wide.narrow(1, 3, K) }) {
        const WideProductBf16 alone(w);
        QCOMPARE(alone.packed(), bf16MicroKernel());
        QVERIFY(alone.width() >= N);
        auto c = torch::full({ a.size(0), alone.width() }, std::numeric_limits<float>::quiet_NaN());
        alone.product(a, c);
        const auto ref = at::mm(a.to(torch::kDouble), wb.to(torch::kDouble).t());
        const double err = (c.narrow(1, 0, N).to(torch::kDouble) - ref).abs().max().item<double>();
        QVERIFY2(err < 1e-5 * std::max(1.0, ref.abs().max().item<double>()), qPrintable(QString::number(err)));
        if (alone.width() > N)
            QVERIFY(torch::equal(c.narrow(1, N, alone.width() - N), torch::zeros({ a.size(0), alone.width() - N })));
        const StepBf16Weights step({}, {}, { w }, [](int64_t tasks, const std::function<void(int64_t)>& task) {
            for (int64_t k = 0; k < tasks; ++k)
                task(k);
        });
        QCOMPARE(step.find(w, 1).defined(), bf16MicroKernel());
        QVERIFY(step.find(w, 0).defined()); // the backward product's copy
        const WideProductBf16 shared(w);
        QCOMPARE(shared.width(), alone.width());
        auto c2 = torch::full_like(c, std::numeric_limits<float>::quiet_NaN());
        shared.product(a, c2);
        QVERIFY(torch::equal(c2, c));
    }
}

void TestModel::bf16RowsAndPairsAreAtensRounding()
{
    // One pass gives both bf16 forms of a weight: its rows as ATen's conversion rounds them, and
    // the micro-kernel's pairs of wᵀ with zero columns after the last row; NaN stays NaN, infinities
    // and values that round up into the next binade included. Shapes with whole 16 × 16 tiles,
    // partial ones, and none.
    torch::manual_seed(14);
    for (const auto& [N, K, np] :
        { std::tuple<int64_t, int64_t, int64_t> { 37, 70, 48 }, { 32, 64, 32 }, { 5, 6, 16 }, { 40, 200, 41 } }) {
        auto w = torch::randn({ N, K }) * 3;
        w[0][0] = std::numeric_limits<float>::quiet_NaN();
        w[N - 1][K - 1] = -std::numeric_limits<float>::infinity();
        w[1][K / 2] = std::nextafter(2.0f, 0.0f); // just under 2: rounds up to 2
        auto rows = torch::full({ N, K }, -1.0f).to(torch::kBFloat16);
        auto pairs = torch::full({ K / 2, np, 2 }, -1.0f).to(torch::kBFloat16);
        kernels::bf16RowsAndPairs(w.data_ptr<float>(), N, K, np, reinterpret_cast<uint16_t*>(rows.data_ptr()),
            reinterpret_cast<uint16_t*>(pairs.data_ptr()));
        const auto ref = w.to(torch::kBFloat16);
        const auto finite = ref.isnan().logical_not();
        QVERIFY(torch::equal(rows.isnan(), ref.isnan()));
        QVERIFY(torch::equal(rows.masked_fill(finite.logical_not(), 0).view(torch::kInt16),
            ref.masked_fill(finite.logical_not(), 0).view(torch::kInt16)));
        // pairs[k / 2][n][k % 2] = w[n][k]: wᵀ (K, np) viewed as (K/2, 2, np), the pair's members adjacent
        auto refPairs = torch::zeros({ K, np }, torch::kBFloat16);
        refPairs.narrow(1, 0, N).copy_(ref.t());
        refPairs = refPairs.view({ K / 2, 2, np }).permute({ 0, 2, 1 });
        QVERIFY(torch::equal(pairs.isnan(), refPairs.isnan()));
        QVERIFY(torch::equal(pairs.masked_fill(pairs.isnan(), 0).view(torch::kInt16),
            refPairs.masked_fill(refPairs.isnan(), 0).contiguous().view(torch::kInt16)));
    }
}

void TestModel::gatheredBf16RowsAreAtensRounding()
{
    // The LSTM's bf16 input rows, gathered and rounded in one pass, are index_select then ATen's
    // conversion bit for bit, at widths with and without a vector tail, rows repeated and in any order.
    torch::manual_seed(15);
    for (int64_t width : { 1, 15, 16, 200, 203 }) {
        auto x = torch::randn({ 9, width }) * 3;
        x[2][0] = std::numeric_limits<float>::quiet_NaN();
        x[4][width - 1] = std::numeric_limits<float>::infinity();
        x[7][width / 2] = std::nextafter(2.0f, 0.0f);
        const auto rows = torch::tensor({ 7, 2, 2, 0, 8, 4 }, torch::kInt64);
        auto out = torch::full({ rows.numel(), width }, -1.0f).to(torch::kBFloat16);
        kernels::gatherBf16Rows(x.data_ptr<float>(), width, rows.data_ptr<int64_t>(), rows.numel(),
            reinterpret_cast<uint16_t*>(out.data_ptr()));
        const auto ref = x.index_select(0, rows).to(torch::kBFloat16);
        QVERIFY(torch::equal(out.isnan(), ref.isnan()));
        QVERIFY(torch::equal(out.masked_fill(out.isnan(), 0).view(torch::kInt16),
            ref.masked_fill(ref.isnan(), 0).view(torch::kInt16)));
    }
}

void TestModel::bf16ProductsSumInFp32_data()
{
    QTest::addColumn<bool>("transA");
    QTest::addColumn<bool>("transB");
    QTest::addColumn<int>("layout"); // 0 whole tensors, 1 row slices of wider rows, 2 transposed views
    QTest::addColumn<float>("beta");
    QTest::addColumn<int64_t>("M");
    const char* layouts[] = { "whole", "row slices", "transposed views" };
    for (int64_t M : { 37, 1 })
        for (int layout = 0; layout < 3; ++layout)
            for (float beta : { 0.0f, 1.0f })
                for (int t = 0; t < 4; ++t)
                    QTest::addRow("%s%s, %s, beta %g, M %d", t & 1 ? "aT" : "a", t & 2 ? " bT" : " b", layouts[layout],
                        double(beta), int(M))
                        << bool(t & 1) << bool(t & 2) << layout << beta << M;
}

void TestModel::bf16ProductsSumInFp32()
{
    // c = beta·c + op(a)·op(b) against the same sums in double from the bf16-rounded operands:
    // the products and sums are fp32's, so through MKL they agree to fp32 rounding over K = 300
    // terms, far closer than a result rounded to bf16 (2^-9 relative) would; through oneDNN each
    // product is rounded to bf16 once, and within that of the sum.
    QFETCH(bool, transA);
    QFETCH(bool, transB);
    QFETCH(int, layout);
    QFETCH(float, beta);
    QFETCH(int64_t, M);
#if defined(__x86_64__)
    QVERIFY2(mklBf16Gemm(), "LibTorch's MKL bf16 GEMM was not found: the products fall back to ATen");
    QVERIFY(bf16GemmPath() != Bf16Gemm::Fp32);
#endif
    torch::manual_seed(17);
    const int64_t K = 300, N = 53;
    auto make = [&](int64_t rows, int64_t cols) { // a (rows, cols) bf16 operand in the row's layout
        if (layout == 1) // a slice of a tensor with wider rows
            return torch::randn({ rows + 3, cols + 5 }).narrow(0, 2, rows).narrow(1, 1, cols).to(torch::kBFloat16);
        if (layout == 2) { // stored the other way round: the transpose of a slice of (cols, rows + 4)
            auto stored = torch::randn({ cols, rows + 4 }).to(torch::kBFloat16).narrow(1, 2, rows);
            return stored.t(); // strides (1, rows + 4)
        }
        return torch::randn({ rows, cols }).to(torch::kBFloat16);
    };
    const auto a = make(transA ? K : M, transA ? M : K), b = make(transB ? N : K, transB ? K : N);
    if (layout == 2)
        QCOMPARE(a.stride(0), int64_t { 1 });
    auto cFull = torch::randn({ M, N + 7 });
    const auto before = cFull.clone();
    auto c = layout == 1 ? cFull.narrow(1, 3, N) : cFull.narrow(1, 0, N).clone();
    if (beta == 0.0f) // written whole, never read: the callers hand over uninitialised memory
        c.fill_(std::numeric_limits<float>::quiet_NaN());
    const auto c0 = beta == 0.0f ? torch::zeros_like(c, torch::kFloat64) : c.to(torch::kFloat64);
    const auto opA = (transA ? a.t() : a).to(torch::kFloat64), opB = (transB ? b.t() : b).to(torch::kFloat64);
    const auto prod = at::mm(opA, opB);
    const auto ref = c0 * beta + prod;
    gemmBf16(a, transA, b, transB, beta, c);
    const double scale = ref.abs().max().item<double>();
    const double error = (c.to(torch::kFloat64) - ref).abs().max().item<double>();
    const double rounding = bf16GemmPath() == Bf16Gemm::OneDnn ? std::ldexp(prod.abs().max().item<double>(), -8) : 0.0;
    QVERIFY2(error < 1e-5 * scale + rounding, qPrintable(QString("off by %1 of %2").arg(error).arg(scale)));
    if (bf16GemmPath() == Bf16Gemm::Mkl) // unrounded: closer than bf16 could be
        QVERIFY(error < std::ldexp(prod.abs().max().item<double>(), -12));
    if (layout == 1) { // the columns beside the view are untouched
        QVERIFY(torch::equal(cFull.narrow(1, 0, 3), before.narrow(1, 0, 3)));
        QVERIFY(torch::equal(cFull.narrow(1, 3 + N, 4), before.narrow(1, 3 + N, 4)));
    }
}

void TestModel::packedRecurrentProductMatchesMm()
{
    // c += a · wᵀ (forward pass) and c += a · w (backward pass) with the weight packed once and
    // used for several steps of up to M rows, against at::mm in double.
    torch::manual_seed(19);
    const int64_t M = 50, K = 200, N = 800;
    for (bool transposed : { true, false }) {
        const auto w = transposed ? torch::randn({ N, K }) : torch::randn({ K, N });
        const RecurrentProduct product(w, transposed, M);
#if defined(__x86_64__)
        QVERIFY2(product.packed(), "LibTorch's MKL packed GEMM was not found: the products fall back to ATen");
#endif
        // Steps of the packed layout run fewer rows as sequences end: 50, 50, 37, 1.
        for (const int64_t rows : { M, M, int64_t(37), int64_t(1) }) {
            const auto a = torch::randn({ rows, K });
            auto c = torch::randn({ rows, N });
            const auto ref
                = c.to(torch::kFloat64) + at::mm(a.to(torch::kFloat64), (transposed ? w.t() : w).to(torch::kFloat64));
            product.accumulate(c, a);
            const double error = (c.to(torch::kFloat64) - ref).abs().max().item<double>();
            QVERIFY2(error < 1e-4,
                qPrintable(QString("transposed %1, %2 rows: off by %3").arg(transposed).arg(rows).arg(error)));
        }
    }
}

void TestModel::bf16RecurrentProductSumsInFp32()
{
    // c += a · wᵀ (forward pass) and c += a · w (backward pass) on bf16 operands, the weight laid
    // out once for steps of up to 50 rows, into whole rows and into a slice of wider rows, against
    // the same sums in double from the bf16-rounded operands. Through oneDNN's micro-kernel (a
    // CPU with AVX512-BF16 that is not Intel's, or an Intel CPU with AMX-BF16; even K) the fp32
    // sums land unrounded: far closer than a product rounded to bf16 (2^-8 relative) would be.
    // Otherwise it is gemmBf16's contract. Between steps, a bf16 GEMM of another shape runs in
    // the same thread, as the trainer's passes do: on AMX it reconfigures and releases the tiles,
    // which the next step must not take as still its own.
    torch::manual_seed(23);
    const auto flags = cpuBf16Flags();
    const auto has = [&](const char* flag) { return std::find(flags.begin(), flags.end(), flag) != flags.end(); };
    const bool microKernel = cpuIsIntel() ? has("amx_bf16") && bf16GemmPath() == Bf16Gemm::Mkl
                                          : has("avx512_bf16") && bf16GemmPath() == Bf16Gemm::OneDnn;
    QCOMPARE(bf16MicroKernel(), microKernel);
    const auto otherA = torch::randn({ 64, 96 }).to(torch::kBFloat16), otherB = torch::randn({ 96, 48 }).to(torch::kBFloat16);
    auto otherC = torch::empty({ 64, 48 });
    for (const auto& [K, N] : { std::pair<int64_t, int64_t> { 200, 800 }, { 800, 200 }, { 300, 53 }, { 7, 20 } })
        for (bool transposed : { true, false }) {
            const auto w = transposed ? torch::randn({ N, K }) : torch::randn({ K, N });
            const RecurrentProductBf16 product(w, transposed);
            QCOMPARE(product.packed(), bf16MicroKernel() && K % 2 == 0);
            const auto opW = (transposed ? w.t() : w).to(torch::kBFloat16).to(torch::kFloat64);
            for (const int64_t rows : { int64_t(50), int64_t(37), int64_t(1) })
                for (bool slice : { false, true }) {
                    const auto a = torch::randn({ rows, K + 4 }).to(torch::kBFloat16).narrow(1, slice ? 3 : 0, K);
                    auto cFull = torch::randn({ rows, N + 5 });
                    const auto before = cFull.clone();
                    auto c = slice ? cFull.narrow(1, 2, N) : cFull.narrow(1, 0, N).contiguous();
                    const auto prod = at::mm(a.to(torch::kFloat64), opW);
                    const auto ref = c.to(torch::kFloat64) + prod;
                    gemmBf16(otherA, false, otherB, false, 0.0f, otherC);
                    product.accumulate(c, slice ? a : a.contiguous());
                    const double error = (c.to(torch::kFloat64) - ref).abs().max().item<double>();
                    const double scale = prod.abs().max().item<double>();
                    const double bound = product.packed() || bf16GemmPath() != Bf16Gemm::OneDnn
                        ? 1e-5 * ref.abs().max().item<double>()
                        : 1e-5 * ref.abs().max().item<double>() + std::ldexp(scale, -8);
                    QVERIFY2(error < bound,
                        qPrintable(QString("K %1, N %2, transposed %3, %4 rows, slice %5: off by %6 of %7")
                                       .arg(K)
                                       .arg(N)
                                       .arg(transposed)
                                       .arg(rows)
                                       .arg(slice)
                                       .arg(error)
                                       .arg(scale)));
                    if (product.packed()) // unrounded: closer than bf16 could be
                        QVERIFY(error < std::ldexp(scale, -12));
                    if (slice) { // the columns beside the view are untouched
                        QVERIFY(torch::equal(cFull.narrow(1, 0, 2), before.narrow(1, 0, 2)));
                        QVERIFY(torch::equal(cFull.narrow(1, 2 + N, 3), before.narrow(1, 2 + N, 3)));
                    }
                }
        }
}

void TestModel::bf16TrainingTracksFp32_data()
{
    QTest::addColumn<bool>("attention");
    QTest::newRow("seq2seq") << false;
    QTest::newRow("with attention") << true; // autocast makes the attention's output bf16
}

void TestModel::bf16TrainingTracksFp32()
{
    QFETCH(bool, attention);
    // The trainer's own step in bf16 (the engine's layer and loss on bf16 operands, fp32 master
    // weights and optimizer) against fp32, twenty steps from the same weights: the losses stay
    // within 1% (measured ≤ 0.009%) and the weights stay fp32.
    const auto examples = tinyExamples();
    const Batch batch = collate(examples, { 0, 1, 2 }, torch::kCPU);
    TrainConfig cfg = tinyTraining();
    cfg.model.attention = attention;
    Stepper f = makeStepper(cfg, torch::kCPU, Precision::FP32);
    Stepper b = makeStepper(cfg, torch::kCPU, Precision::BF16);
    QCOMPARE(b.model->gemmType(), torch::kBFloat16);
    QVERIFY(sameTensors(copies(f.model->parameters()), copies(b.model->parameters())));
    double first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
        const StepOutcome lf = trainStep(f, batch), lb = trainStep(b, batch);
        QVERIFY(lf.applied && lb.applied);
        QVERIFY2(std::abs(lb.loss - lf.loss) < 1e-2 * lf.loss,
            qPrintable(QString("step %1: bf16 %2, fp32 %3").arg(step).arg(lb.loss).arg(lf.loss)));
        if (step == 0) // the bf16 products did run: not fp32's loss to the bit
            QVERIFY(lb.loss != lf.loss);
        (step == 0 ? first : last) = lb.loss;
    }
    QVERIFY2(last < 0.95 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last))); // it learns
    for (const auto& p : b.model->parameters())
        QCOMPARE(p.scalar_type(), torch::kFloat32);
}

// fp16 training overflows at too large a loss scale; the CPU stands in with an fp32 model, loss
// scaling switched on and a scale beyond fp32's range, so the gradients overflow.
void TestModel::lossScalingSkipsOverflowedSteps()
{
    const auto examples = tinyExamples();
    const Batch batch = collate(examples, { 0, 1, 2 }, torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    s.lossScaling = true;
    s.lossScale = 1e39;
    s.goodSteps = 17;
    const auto before = copies(s.model->parameters());
    const StepOutcome skipped = trainStep(s, batch);
    QVERIFY(!skipped.applied);
    QCOMPARE(s.lossScale, 5e38); // halved
    QCOMPARE(s.goodSteps, int64_t(0));
    QVERIFY(sameTensors(before, copies(s.model->parameters()))); // weights untouched

    // The epoch's loss counts applied steps only (a skipped step's loss may be infinite).
    double sum = 0;
    int64_t tokens = 0;
    StepOutcome overflowed = skipped;
    overflowed.lossSum = INFINITY;
    countStep(sum, tokens, overflowed, batch.tokens);
    QCOMPARE(sum, 0.0);
    QCOMPARE(tokens, int64_t(0));

    s.lossScale = 1024;
    const StepOutcome good = trainStep(s, batch);
    QVERIFY(good.applied);
    QVERIFY(std::isfinite(good.lossSum));
    QVERIFY(!sameTensors(before, copies(s.model->parameters())));
    QCOMPARE(s.goodSteps, int64_t(1));
    countStep(sum, tokens, good, batch.tokens);
    QCOMPARE(sum, good.lossSum);
    QCOMPARE(tokens, batch.tokens);

    // A scaled step updates the weights as an unscaled one does (the scale is a power of two).
    Stepper plain = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    const StepOutcome unscaled = trainStep(plain, batch);
    QCOMPARE(unscaled.lossSum, good.lossSum);
    QVERIFY(weightsWithin(s, plain, 1e-6));
}

void TestModel::lossScaleDoublesAfter2000GoodSteps()
{
    const auto examples = tinyExamples();
    const Batch batch = collate(examples, { 0, 1, 2 }, torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    s.lossScaling = true;
    s.lossScale = 512;
    s.goodSteps = 1998; // as restored from state.json after a resume
    QVERIFY(trainStep(s, batch).applied);
    QCOMPARE(s.lossScale, 512.0);
    QVERIFY(trainStep(s, batch).applied);
    QCOMPARE(s.lossScale, 1024.0); // the 2000th good step in a row

    // The counter travels in state.json: a resumed run doubles at the same step.
    QTemporaryDir dir;
    RunState st;
    st.checkpoint = checkpointName(0);
    st.lossScale = 512;
    st.lossScaleGoodSteps = 1999;
    saveState(dir.path().toStdString(), st);
    const RunState back = loadState(dir.path().toStdString());
    QCOMPARE(back.lossScaleGoodSteps, int64_t(1999));
    QCOMPARE(back.lossScale, 512.0);
}

// Resuming continues the training device's random stream from the checkpoint (on a GPU, where the
// generator is not reseeded each step, that is what makes dropout repeat); the CPU stands in.
void TestModel::rowSliceIsTheBatchOfThoseRows()
{
    // Independent reference: collating just those examples.
    const auto ex = variedExamples(7);
    const Batch whole = collate(ex, range(0, 7), torch::kCPU);
    for (auto [begin, end] : { std::pair<int64_t, int64_t> { 0, 7 }, { 2, 5 }, { 6, 7 }, { 0, 1 } })
        QVERIFY(sameBatch(rowSlice(whole, begin, end),
            collate(ex, range(static_cast<size_t>(begin), static_cast<size_t>(end)), torch::kCPU)));
    for (auto [first, step] : { std::pair<size_t, size_t> { 0, 2 }, { 1, 2 }, { 2, 3 }, { 6, 4 } }) {
        std::vector<size_t> rows;
        for (size_t r = first; r < 7; r += step)
            rows.push_back(r);
        QVERIFY(sameBatch(
            rowStride(whole, static_cast<int64_t>(first), static_cast<int64_t>(step)), collate(ex, rows, torch::kCPU)));
    }
}

void TestModel::onCoresSharesTheThreadsAndRestoresThem()
{
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    const int threadsBefore = at::get_num_threads();
    using MaxThreads = int (*)();
    const auto mklThreads = reinterpret_cast<MaxThreads>(::dlsym(RTLD_DEFAULT, "MKL_Get_Max_Threads"));
    // Each task runs once, with the caller's threads shared out among the lanes (lane j takes
    // tasks j, j + 2, …; 3 threads: 2 for lane 0, 1 for lane 1), and the caller's OpenMP and
    // MKL settings are back afterwards.
    for (int threads : { 2, 3, 4 }) {
        at::set_num_threads(threads);
        const int mklBefore = mklThreads ? mklThreads() : 0;
        std::vector<std::atomic<int>> runs(7);
        std::vector<int> threadsSeen(7, 0), mklSeen(7, 0);
        onCores(s, 7, 2, [&](int64_t k) {
            ++runs[static_cast<size_t>(k)];
            threadsSeen[static_cast<size_t>(k)] = at::get_num_threads();
            mklSeen[static_cast<size_t>(k)] = mklThreads ? mklThreads() : 0;
        });
        for (size_t k = 0; k < runs.size(); ++k) {
            const int share = threads / 2 + (k % 2 < static_cast<size_t>(threads % 2) ? 1 : 0);
            QCOMPARE(runs[k].load(), 1);
            QCOMPARE(threadsSeen[k], share);
            if (mklThreads)
                QCOMPARE(mklSeen[k], share);
        }
        QCOMPARE(at::get_num_threads(), threads);
        if (mklThreads)
            QCOMPARE(mklThreads(), mklBefore);
    }
    at::set_num_threads(2);

    // Every task runs; the first failing task's error (in task order) comes out after all ended.
    std::atomic<int> ran { 0 };
    try {
        onCores(s, 5, 2, [&](int64_t k) {
            ++ran;
            if (k == 3 || k == 4)
                throw chatbench::Error("task " + std::to_string(k));
        });
        QFAIL("no error");
    } catch (const chatbench::Error& e) {
        QCOMPARE(QString(e.what()), QString("task 3"));
    }
    QCOMPARE(ran.load(), 5);

    // Validation spreads its batches over the cores, at most one per batch; one thread: one pass.
    QCOMPARE(evaluationCores(s, 5), int64_t(2));
    QCOMPARE(evaluationCores(s, 1), int64_t(1));
    at::set_num_threads(1);
    QCOMPARE(evaluationCores(s, 5), int64_t(1));
    at::set_num_threads(threadsBefore);
}

void TestModel::stepInPartsMatchesOnePass_data()
{
    QTest::addColumn<QString>("optimizer"); // rmsprop: the fused clip + update; others through torch::optim
    QTest::addColumn<int>("layers");
    QTest::addColumn<bool>("bf16"); // every product on bf16 operands
    QTest::addColumn<bool>("wide"); // E = 48, H = 96, 32 pairs of up to 10 and 16 words
    QTest::addColumn<bool>("attention");
    QTest::newRow("adam") << "adam" << 1 << false << false << false;
    QTest::newRow("rmsprop-clip") << "rmsprop" << 1 << false << false << false;
    QTest::newRow("adam-two-layers") << "adam" << 2 << false << false << false;
    QTest::newRow("adam-bf16") << "adam" << 1 << true << false << false;
    // Parameters of many 4096-element blocks, so that each lane sums, squares and updates a share
    // of every large one.
    QTest::newRow("rmsprop-clip-wider") << "rmsprop" << 1 << false << true << false;
    QTest::newRow("rmsprop-wider-bf16") << "rmsprop" << 1 << true << true << false;
    // SGD (Adam and RMSprop turn rounding-level gradients into full steps): attention's weight
    // gradients come out of autograd as views.
    QTest::newRow("sgd-attention-wider") << "sgd" << 1 << false << true << true;
}

// A CPU step on two cores runs the batch as two row slices side by side (every other row each);
// its update is the one-pass update up to rounding, and the same every time.
void TestModel::stepInPartsMatchesOnePass()
{
    QFETCH(QString, optimizer);
    QFETCH(int, layers);
    QFETCH(bool, bf16);
    QFETCH(bool, wide);
    QFETCH(bool, attention);
    TrainConfig cfg = tinyTraining();
    cfg.model.layers = layers;
    std::vector<Example> ex = variedExamples(21);
    if (wide) {
        cfg.model.embedDim = 48;
        cfg.model.hidden = 96;
        cfg.model.maxTargetLength = 20;
        ex = variedExamples(32, 10, 15);
    }
    cfg.model.attention = attention;
    if (optimizer == "sgd") {
        cfg.optimizer = OptimizerKind::SGD;
        cfg.learningRate = 0.1;
    } else if (optimizer == "rmsprop") {
        cfg.optimizer = OptimizerKind::RMSprop;
        cfg.learningRate = 1e-3;
        cfg.clipNorm = 0.05; // small enough to clip
    }
    const Batch batch = collate(ex, range(0, ex.size()), torch::kCPU);
    const int threadsBefore = at::get_num_threads();
    auto stepWith = [&](int threads) {
        at::set_num_threads(threads);
        Stepper s = makeStepper(cfg, torch::kCPU, bf16 ? Precision::BF16 : Precision::FP32);
        const int64_t parts = stepParts(s, batch);
        std::vector<double> losses;
        for (int i = 0; i < 3; ++i)
            losses.push_back(trainStep(s, batch).lossSum);
        return std::make_tuple(std::move(s), parts, losses);
    };
    auto [one, onePart, oneLoss] = stepWith(1);
    auto [two, twoParts, twoLoss] = stepWith(2);
    auto [again, againParts, againLoss] = stepWith(2);
    auto [three, threeParts, threeLoss] = stepWith(3);
    at::set_num_threads(threadsBefore);
    QCOMPARE(onePart, int64_t(1));
    QCOMPARE(twoParts, int64_t(2));
    QCOMPARE(threeParts, std::min<int64_t>(3, batch.source.size(0) / 8)); // at least 8 rows a slice
    // Through oneDNN each bf16 product is rounded to bf16, and the slices' weight gradients are two
    // such products summed instead of one: the same up to bf16's rounding, not fp32's (measured
    // 1.4e-5 in the loss and 4.2e-5 in the weights).
    const double tolerance = bf16 && bf16GemmPath() == Bf16Gemm::OneDnn ? 1e-4 : 1e-5;
    for (size_t i = 0; i < oneLoss.size(); ++i) {
        QVERIFY2(std::abs(twoLoss[i] - oneLoss[i]) < tolerance * std::abs(oneLoss[i]),
            qPrintable(QString("step %1: %2 vs %3").arg(i).arg(twoLoss[i]).arg(oneLoss[i])));
        QCOMPARE(againLoss[i], twoLoss[i]); // bit for bit
    }
    // (RMSprop moves an element by about lr whatever its gradient's size, so there the bf16
    // rounding of a near-zero gradient decides a whole step: only the losses compare.)
    if (!(bf16 && optimizer == "rmsprop" && bf16GemmPath() == Bf16Gemm::OneDnn))
        QVERIFY(weightsWithin(one, two, tolerance));
    QVERIFY(sameTensors(copies(two.model->parameters()), copies(again.model->parameters())));
    // The gradients are the parameters' own tensors, as backward() leaves them: the optimizer's
    // zero_grad detaches them in place, which a view refuses. Dense, but for the embeddings'
    // under RMSprop (the engine's own update walks their sparse rows).
    for (const auto& p : two.model->parameters()) {
        if (!p.grad().defined())
            continue;
        const bool table
            = p.is_same(two.model->encoderEmbedding->weight) || p.is_same(two.model->decoderEmbedding->weight);
        QCOMPARE(p.grad().is_sparse(), table && optimizer == "rmsprop");
        QVERIFY(!p.grad().is_view() && (p.grad().is_sparse() || p.grad().is_contiguous()));
    }
    two.optimizer->zero_grad(/*set_to_none=*/false);

    // A step that draws random numbers (dropout, scheduled sampling) stays in one pass: slices
    // would race for them.
    TrainConfig noisy = cfg;
    noisy.model.dropout = 0.1;
    at::set_num_threads(2);
    const Stepper d = makeStepper(noisy, torch::kCPU, Precision::FP32);
    QCOMPARE(stepParts(d, batch), int64_t(1));
    TrainConfig sampled = cfg;
    sampled.teacherForcing = 0.5;
    const Stepper t = makeStepper(sampled, torch::kCPU, Precision::FP32);
    QCOMPARE(stepParts(t, batch), int64_t(1));
    at::set_num_threads(threadsBefore);
}

void TestModel::stepInPartsLeavesTheCallersTeamIdle_data()
{
    QTest::addColumn<bool>("bf16");
    QTest::newRow("fp32") << false;
    QTest::newRow("bf16") << true;
}

// On two cores a step runs as two lanes, one of them on the caller's thread with its OpenMP
// count set to one. A parallel region on the caller's thread between the lanes (a large fill
// of the embeddings' sparse gradient did it) starts its two-thread team, whose worker then spins
// on a core for milliseconds after the region, while the next lanes want both cores: measured
// 14% of an epoch on a 2-core EPYC. So none may run in such a step.
void TestModel::stepInPartsLeavesTheCallersTeamIdle()
{
    QFETCH(bool, bf16);
    // Words enough for the sparse gradient's rows to exceed ATen's grain (32 768 floats): 32
    // pairs of 12 + 14 words from 1 000, E = 128.
    TrainConfig cfg = tinyTraining();
    cfg.model.vocabSize = 1000;
    cfg.model.embedDim = 128;
    cfg.model.hidden = 16;
    cfg.model.maxSourceLength = 12;
    cfg.model.maxTargetLength = 16;
    cfg.optimizer = OptimizerKind::RMSprop; // the engine's own update: sparse embedding gradients
    cfg.learningRate = 1e-3;
    cfg.clipNorm = 5;
    std::vector<Example> ex;
    for (int i = 0; i < 32; ++i) {
        Example e;
        for (int k = 0; k < 12; ++k)
            e.source.push_back(4 + (i * 12 + k) * 7 % 996);
        e.target.push_back(2);
        for (int k = 0; k < 12; ++k)
            e.target.push_back(4 + (i * 12 + k) * 11 % 996);
        e.target.push_back(3);
        ex.push_back(e);
    }
    const Batch batch = collate(ex, range(0, ex.size()), torch::kCPU);
    const int threadsBefore = at::get_num_threads();
    at::set_num_threads(2);
    Stepper s = makeStepper(cfg, torch::kCPU, bf16 ? Precision::BF16 : Precision::FP32);
    QCOMPARE(stepParts(s, batch), int64_t(2));
    // The check itself: a parallel fill of this size on this thread is counted.
    g_watchedThread = std::this_thread::get_id();
    g_teamsOnWatchedThread = 0;
    torch::zeros({ 400, 128 });
    const int fillTeams = g_teamsOnWatchedThread.exchange(0);
    trainStep(s, batch); // the first step makes the optimizer's state
    g_teamsOnWatchedThread = 0;
    for (int i = 0; i < 3; ++i)
        trainStep(s, batch);
    const int stepTeams = g_teamsOnWatchedThread.load();
    g_watchedThread = std::thread::id();
    at::set_num_threads(threadsBefore);
    if (fillTeams == 0)
        QSKIP("this LibTorch's parallel regions do not pass through GOMP_parallel");
    QCOMPARE(stepTeams, 0);
}

// Found trying hostile options: --hidden 8192 --embed 8192 --layers 8 (each within its range)
// under a memory limit ended in LibTorch's allocator message and 25 stack frames; without one it
// asks for over 100 GB. The size is counted first (and the count is the model's own), and a
// model that cannot fit is refused saying how much it needs.
void TestModel::aModelTooLargeForMemoryIsRefused()
{
    for (const bool shared : { false, true })
        for (const bool attention : { false, true })
            for (const int layers : { 1, 3 }) {
                ModelConfig m;
                m.vocabSize = 37;
                m.embedDim = 5;
                m.hidden = 7;
                m.layers = layers;
                m.sharedEmbedding = shared;
                m.attention = attention;
                int64_t n = 0;
                for (const auto& p : Seq2Seq(m)->parameters())
                    n += p.numel();
                QCOMPARE(parameterCount(m), n);
            }
    TrainConfig cfg;
    cfg.model.vocabSize = 2000;
    cfg.model.embedDim = 8192;
    cfg.model.hidden = 8192;
    cfg.model.layers = 8;
    try {
        (void)makeStepper(cfg, torch::kCPU, Precision::FP32);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("training this model needs about")
                && QString(e.what()).contains("lower --hidden, --embed or --layers"),
            e.what());
    }
}

void TestModel::outOfMemoryBacksOffToSmallerPasses()
{
    // A device that holds at most 2 pairs per pass: 7 → 4 → 2 pairs, then passes of 2, 2, 2, 1.
    const auto ex = variedExamples(7);
    const Batch batch = collate(ex, range(0, 7), torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    std::vector<int64_t> passes;
    s.beforePass = [&](int64_t rows) {
        passes.push_back(rows);
        if (rows > 2)
            throwOutOfMemory(rows);
    };
    const StepOutcome split = trainStep(s, batch);
    QCOMPARE(passes, (std::vector<int64_t> { 7, 4, 2, 2, 2, 1 }));
    QCOMPARE(s.passRows, int64_t(2));
    QVERIFY(split.applied);

    // The same update as the whole batch in one pass (reference: a stepper that never ran out).
    Stepper whole = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    const StepOutcome one = trainStep(whole, batch);
    QVERIFY(std::abs(split.lossSum - one.lossSum) < 1e-5 * std::abs(one.lossSum));
    QVERIFY(weightsWithin(s, whole, 1e-6));

    // The back-off stays: the next step starts at 2 pairs per pass.
    passes.clear();
    trainStep(s, batch);
    QCOMPARE(passes, (std::vector<int64_t> { 2, 2, 2, 1 }));
}

void TestModel::cpuAllocationFailureBacksOffAndIsInWords()
{
    // The CPU allocator's own refusal (a real one: 16 TB), as an address-space or cgroup limit
    // gives it: the same back-off as CUDA's out of memory, and at the floor an error in words, not
    // LibTorch's "[enforce fail at alloc_cpu.cpp…]" (found by an outside pass under ulimit -v).
    auto refuse = [] { (void)torch::empty({ int64_t(1) << 42 }, torch::kFloat32); };
    std::string raw;
    try {
        refuse();
        QSKIP("this machine allocated 16 TB");
    } catch (const c10::Error& e) {
        raw = e.what();
    }
    QVERIFY2(raw.find("can't allocate memory") != std::string::npos, raw.c_str());
    QCOMPARE(chatbench::inWords(raw),
        std::string("out of memory: the CPU allocator could not get 17592.19 GB for one tensor"));
    QCOMPARE(chatbench::inWords("first\nsecond"), std::string("first"));
    // Small refusals in a unit that shows them (an address-space limit reached: "0.00 GB" before).
    QCOMPARE(chatbench::inWords("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you "
                                "tried to allocate 9175040 bytes. Error code 12"),
        std::string("out of memory: the CPU allocator could not get 9.2 MB for one tensor"));
    QCOMPARE(chatbench::inWords(std::bad_alloc().what()), std::string("out of memory (an allocation failed)"));

    const Batch batch = collate(variedExamples(7), range(0, 7), torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    std::vector<int64_t> passes;
    s.beforePass = [&](int64_t rows) {
        passes.push_back(rows);
        if (rows > 2)
            refuse();
    };
    QVERIFY(trainStep(s, batch).applied);
    QCOMPARE(passes, (std::vector<int64_t> { 7, 4, 2, 2, 2, 1 }));
    s.beforePass = [&](int64_t) { refuse(); };
    try {
        trainStep(s, batch);
        QFAIL("no error at the floor");
    } catch (const chatbench::Error& e) {
        const std::string what = e.what();
        QVERIFY2(what.find("out of memory on cpu with one pair per pass (out of memory: the CPU allocator could not "
                           "get 17592.19 GB")
                    != std::string::npos
                && what.find("enforce fail") == std::string::npos,
            e.what());
    }
}

void TestModel::outOfMemoryAtOnePairIsAnError()
{
    const Batch batch = collate(variedExamples(5), range(0, 5), torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    std::vector<int64_t> passes;
    s.beforePass = [&](int64_t rows) {
        passes.push_back(rows);
        throwOutOfMemory(rows);
    };
    const auto before = copies(s.model->parameters());
    try {
        trainStep(s, batch);
        QFAIL("no error at the floor");
    } catch (const chatbench::Error& e) {
        QVERIFY2(QString(e.what()).contains("out of memory on cpu with one pair per pass"), e.what());
        QVERIFY2(QString(e.what()).contains("simulated for 1 pairs"), e.what()); // the device's own words
    }
    QCOMPARE(passes, (std::vector<int64_t> { 5, 3, 2, 1 }));
    QVERIFY(sameTensors(before, copies(s.model->parameters()))); // no update was applied
}

void TestModel::otherErrorsPassThroughTheBackOff()
{
    const Batch batch = collate(variedExamples(5), range(0, 5), torch::kCPU);
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    int calls = 0;
    s.beforePass = [&](int64_t) {
        ++calls;
        TORCH_CHECK(false, "CUDA error: an illegal memory access was encountered");
    };
    try {
        trainStep(s, batch);
        QFAIL("the error was swallowed");
    } catch (const c10::OutOfMemoryError&) {
        QFAIL("another error was taken for out-of-memory");
    } catch (const c10::Error& e) {
        QVERIFY(QString(e.what()).contains("illegal memory access"));
    }
    QCOMPARE(calls, 1); // not retried
    QCOMPARE(s.passRows, int64_t(0));
}

void TestModel::checkpointKeepsTheGeneratorState()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    Stepper s = makeStepper(tinyTraining(), torch::kCPU, Precision::FP32);
    torch::manual_seed(99);
    (void)torch::rand({ 3 });
    RunState st;
    saveCheckpoint(run, s.model, *s.optimizer, st, 2);
    const auto next = torch::rand({ 5 }); // what the saved stream gives next

    (void)torch::rand({ 11 }); // the stream moves on
    loadCheckpoint(run, st, s.model, s.optimizer.get());
    QVERIFY(torch::equal(torch::rand({ 5 }), next));

    // Chat (no optimizer) leaves the process' stream alone.
    (void)torch::rand({ 11 });
    const auto expected = rngState(torch::kCPU).clone();
    loadCheckpoint(run, st, s.model, nullptr);
    QVERIFY(torch::equal(rngState(torch::kCPU), expected));
}

// Found by the checkpoint fuzzer: one bit flipped in a memo index (LONG_BINPUT) of the archive's
// data.pkl made LibTorch's unpickler grow its memo table to 544 million entries (8.7 GB) before
// anything else failed. A run older than checkpoint checksums, or an edited state.json, lets such a
// file through the checksum. The pickles are walked first, and the checkpoint is refused, naming it.
void TestModel::checkpointTensorsOfAnotherKindAreRefused()
{
    // Found by an outside pass, each in a checkpoint edited with its CRC put right: a float64
    // weight was read as float32 garbage (chat and resume ran on it); an optimizer state of another
    // shape ended in LibTorch's broadcast error naming no file; a NaN in the optimizer's state
    // turned every weight NaN at the first step, and that was saved as the last good checkpoint.
    for (const OptimizerKind kind : { OptimizerKind::Adam, OptimizerKind::RMSprop }) { // SGD keeps none
        TrainConfig cfg = tinyTraining();
        cfg.optimizer = kind;
        const Batch batch = collate(tinyExamples(), { 0, 1, 2 }, torch::kCPU);
        // The edit is saved as a checkpoint (with its CRC) and read back into a fresh stepper.
        auto refused = [&](const std::function<void(Stepper&)>& edit) -> std::string {
            QTemporaryDir dir;
            const std::string run = dir.path().toStdString();
            Stepper s = makeStepper(cfg, torch::kCPU, Precision::FP32);
            trainStep(s, batch);
            settleOptimizer(s);
            edit(s);
            RunState st;
            st.step = 1;
            saveCheckpoint(run, s.model, *s.optimizer, st, 2);
            Stepper t = makeStepper(cfg, torch::kCPU, Precision::FP32);
            try {
                loadCheckpoint(run, st, t.model, t.optimizer.get());
            } catch (const Error& e) {
                return e.what();
            }
            return {};
        };
        QVERIFY(refused([](Stepper&) {}).empty()); // unedited: loads
        auto firstState = [](Stepper& s) -> torch::Tensor {
            auto& st = *s.optimizer->state().at(s.model->output->weight.unsafeGetTensorImpl());
            if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&st))
                return a->exp_avg_sq();
            return static_cast<torch::optim::RMSpropParamState&>(st).square_avg();
        };
        std::string why = refused([&](Stepper& s) {
            torch::NoGradGuard noGrad;
            s.model->output->weight.set_data(s.model->output->weight.to(torch::kFloat64));
        });
        QVERIFY2(why.find("tensor 'output.weight' is Double, the model's are Float") != std::string::npos, why.c_str());
        why = refused([&](Stepper& s) { firstState(s).fill_(NAN); });
        QVERIFY2(why.find("optimizer state is unusable") != std::string::npos
                && why.find("for 'output.weight' holds NaN or infinite values") != std::string::npos,
            why.c_str());
        why = refused([&](Stepper& s) {
            auto& st = *s.optimizer->state().at(s.model->output->weight.unsafeGetTensorImpl());
            if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&st))
                a->exp_avg(torch::zeros({ 1 }));
            else
                static_cast<torch::optim::RMSpropParamState&>(st).square_avg(torch::zeros({ 1 }));
        });
        QVERIFY2(why.find("for 'output.weight' is a scalar") == std::string::npos
                && why.find("for 'output.weight' is 1, the tensor is 9 x 5") != std::string::npos,
            why.c_str());
        why = refused([&](Stepper& s) {
            const torch::Tensor t = firstState(s);
            torch::NoGradGuard noGrad;
            t.set_data(t.to(torch::kFloat64));
        });
        QVERIFY2(why.find("for 'output.weight' is Double, the tensor is Float") != std::string::npos, why.c_str());
        why = refused([&](Stepper& s) {
            for (auto& g : s.optimizer->param_groups())
                g.options().set_lr(NAN);
        });
        QVERIFY2(why.find("a learning rate of nan") != std::string::npos, why.c_str());
    }
}

void TestModel::nonFiniteWeightsAreNeverSaved()
{
    // A step that leaves a weight NaN (divergence) must not become the checkpoint state.json names.
    SavedRun saved;
    auto& [dir, run, s, st] = saved;
    const std::string good = st.checkpoint;
    const uint32_t goodCrc = st.checkpointCrc;
    {
        torch::NoGradGuard noGrad;
        s.model->decoderEmbedding->weight[4][1] = INFINITY;
    }
    st.step = 1;
    try {
        saveCheckpoint(run, s.model, *s.optimizer, st, 2);
        QFAIL("a checkpoint of non-finite weights was saved");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("not saved: tensor 'decoder_embedding.weight' holds NaN or infinite")
                != std::string::npos,
            e.what());
        QVERIFY2(std::string(e.what()).find("the last good checkpoint is " + good) != std::string::npos, e.what());
    }
    QCOMPARE(st.checkpoint, good);
    QCOMPARE(st.checkpointCrc, goodCrc);
    QCOMPARE(loadState(run).checkpoint, good);
    QVERIFY(!std::filesystem::exists(run + "/" + checkpointName(1)));
}

// Found by the checkpoint harness: a 55 KB checkpoint one of whose compressed code files declares
// 448 MiB took LibTorch's reader 2.2 GB and 4 s; with a larger size it would have run out of
// memory, which is not a corrupt file's error.
void TestModel::checkpointRecordsDeclaringTooMuchAreRefused()
{
    SavedRun saved;
    qint64 ms = 0;
    const QString what = refusalOfFinding(saved, "code-record-448MiB.pt", ms);
    QVERIFY2(what.contains("ckpt-00000009.pt: checkpoint is malformed (its records declare more than the ")
            && what.contains("'code/__torch__/___torch_mangle_30.py' alone 448 MiB): corrupt file?"),
        qPrintable(what));
    QVERIFY2(ms < 1000, qPrintable(QString("%1 ms").arg(ms)));
    loadCheckpoint(saved.run, saved.st, saved.s.model, saved.s.optimizer.get()); // the run's own passes the check
}

void TestModel::checkpointPicklesAskingForTooMuchAreRefused()
{
    // The walk runs before anything of the model is read: any model stands in for the harness' own.
    SavedRun saved;
    auto& [dir, run, s, st] = saved;
    loadCheckpoint(run, st, s.model, s.optimizer.get()); // the walk passes LibTorch's own pickles

    qint64 ms = 0;
    const QString what = refusalOfFinding(saved, "memo-index-8.7GB.pt", ms);
    QVERIFY2(what.contains("ckpt-00000009.pt") && what.contains("'data.pkl'") && what.contains("memo index 54"),
        qPrintable(what));
    QVERIFY2(ms < 5000, qPrintable(QString("%1 ms").arg(ms)));

    // A storage's bytes shortened in the archive (its pickle still counts the elements it had):
    // LibTorch sized the tensor by the count and read past the record's end.
    const std::string good = run + "/" + st.checkpoint;
    const std::string shortened = "ckpt-00000010.pt";
    {
        caffe2::serialize::PyTorchStreamReader reader(good);
        std::string largest;
        size_t largestSize = 0;
        for (const auto& record : reader.getAllRecords())
            if (record.rfind("data/", 0) == 0 && reader.getRecordSize(record) > largestSize)
                largest = record, largestSize = reader.getRecordSize(record);
        QVERIFY(largestSize > 64);
        caffe2::serialize::PyTorchStreamWriter writer(run + "/" + shortened);
        for (const auto& record : reader.getAllRecords()) {
            if (record == "version" || record == ".data/version")
                continue; // the writer writes its own
            const auto [data, size] = reader.getRecord(record);
            writer.writeRecord(record, data.get(), record == largest ? 8 : size);
        }
        writer.writeEndOfFile();
    }
    RunState cut = st;
    cut.checkpoint = shortened;
    cut.haveCrc = false;
    try {
        loadCheckpoint(run, cut, s.model, s.optimizer.get());
        QFAIL("the checkpoint with a shortened storage loaded");
    } catch (const Error& e) {
        const QString what = QString::fromStdString(e.what());
        QVERIFY2(what.contains(QString::fromStdString(shortened)) && what.contains("whose record holds 8 bytes"),
            qPrintable(what));
    }
}

void TestModel::oversizedCheckpointIsRefusedUnread()
{
    // A checkpoint replaced by a 10 GB file was read whole (17 GB, 42 s) before its checksum
    // failed, and was "std::bad_alloc", naming no file, under a memory limit.
    SavedRun saved;
    auto& [dir, run, s, st] = saved;
    const std::string file = run + "/" + st.checkpoint;
    std::filesystem::resize_file(file, uint64_t(10) << 30); // sparse: no disk taken
    QElapsedTimer clock;
    clock.start();
    try {
        loadCheckpoint(run, st, s.model, s.optimizer.get());
        QFAIL("the 10 GB checkpoint was taken");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(QString::fromStdString(file))
                && QString(e.what()).contains("the file is 10240 MiB")
                && QString(e.what()).contains("no checkpoint of this run's model"),
            e.what());
    }
    QVERIFY2(clock.elapsed() < 1000, qPrintable(QString("%1 ms").arg(clock.elapsed())));
    // A save of the same step does not read it either: it writes the checkpoint anew.
    saveCheckpoint(run, s.model, *s.optimizer, st, 2);
    QVERIFY(std::filesystem::file_size(file) < (uint64_t(1) << 20));
    loadCheckpoint(run, st, s.model, s.optimizer.get());
}

void TestModel::pruningKeepsTheRunsOwnCheckpoints()
{
    // Found by an outside pass: a stray ckpt-00000099.pt counted as the newest of the kept
    // checkpoints and the run's own fallback was removed; a kill between removing a checkpoint
    // and its state left the state file for good.
    SavedRun saved;
    auto& [dir, run, s, st] = saved;
    // A stray, a state whose checkpoint is gone, and a file of the user's not named as chatbench
    // names checkpoints (8 digits or more), which stays.
    for (const auto& [name, bytes] : { std::pair { "ckpt-00000099.pt", "junk" },
             std::pair { "ckpt-00000001.json", "{}" }, std::pair { "ckpt-0001.json", "{}" } }) {
        QFile f(dir.filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly) && f.write(bytes) > 0);
    }
    for (int64_t step = 2; step <= 5; ++step) {
        st.step = step;
        saveCheckpoint(run, s.model, *s.optimizer, st, 2);
    }
    QStringList left = QDir(dir.path()).entryList({ "ckpt-*" }, QDir::Files, QDir::Name);
    QCOMPARE(left,
        QStringList({ "ckpt-00000004.json", "ckpt-00000004.pt", "ckpt-00000005.json", "ckpt-00000005.pt",
            "ckpt-00000099.pt", "ckpt-0001.json" }));
    // The fallback is there: the newest cut short, the one before it loads.
    std::filesystem::resize_file(run + "/ckpt-00000005.pt", 100);
    std::string fellBack;
    QCOMPARE(loadUsableCheckpoint(run, st, s.model, s.optimizer.get(), &fellBack).step, int64_t(4));
    QVERIFY2(fellBack.find("ckpt-00000004.pt") != std::string::npos, fellBack.c_str());
}

void TestModel::stepSeedTouchesOnlyTheCpuGenerator()
{
    seedStep(42, 10);
    const auto a = torch::rand({ 4 });
    (void)torch::rand({ 7 });
    seedStep(42, 10);
    QVERIFY(torch::equal(torch::rand({ 4 }), a)); // repeatable from (seed, step)
    seedStep(42, 11);
    QVERIFY(!torch::equal(torch::rand({ 4 }), a));
    // The formula the step seed follows (a resumed run must get the same numbers).
    QCOMPARE(at::detail::getDefaultCPUGenerator().current_seed(), uint64_t(42 + 0x9E3779B97F4A7C15ULL * 12));
}

void TestModel::parityVerdict()
{
    // Two replies of two steps over a vocabulary of 4, as two devices would give them.
    auto reply = [](std::vector<std::vector<float>> logits, std::vector<int64_t> chosen) {
        Reply r;
        for (size_t t = 0; t < logits.size(); ++t) {
            DecoderStep st;
            st.logits = logits[t];
            st.chosenId = chosen[t];
            r.trace.steps.push_back(st);
        }
        r.ids = chosen;
        return r;
    };
    const Reply cpu = reply({ { 5.0f, 1.0f, 0.5f, -2.0f }, { 0.1f, 4.0f, 3.0f, 0.0f } }, { 0, 1 });

    DoctorParity same = compareParity(cpu, cpu, false);
    QVERIFY(same.passed);
    QCOMPARE(same.maxLogitDiff, 0.0);
    QVERIFY(same.repliesAgree);
    QCOMPARE(same.tolerance, 5e-4); // 1e-4 × the largest logit

    // 2e-3 apart: beyond IEEE fp32's tolerance, within TF32's.
    const Reply off = reply({ { 5.002f, 1.0f, 0.5f, -2.0f }, { 0.1f, 4.0f, 3.0f, 0.0f } }, { 0, 1 });
    QVERIFY(!compareParity(cpu, off, false).passed);
    QVERIFY(compareParity(cpu, off, false).verdict.find("FAIL") != std::string::npos);
    QVERIFY(compareParity(cpu, off, true).passed);

    // Replies that part where the first device's top two are far apart: a real disagreement.
    const Reply parted = reply({ { 5.0f, 1.0f, 0.5f, -2.0f }, { 0.1f, 4.0f, 3.0f, 0.0f } }, { 0, 2 });
    QVERIFY(!compareParity(cpu, parted, true).passed);
    // ... and where they are a near tie: rounding may pick either.
    const Reply tieCpu = reply({ { 5.0f, 1.0f, 0.5f, -2.0f }, { 0.1f, 4.0f, 3.99999f, 0.0f } }, { 0, 1 });
    const Reply tieGpu = reply({ { 5.0f, 1.0f, 0.5f, -2.0f }, { 0.1f, 3.99999f, 4.0f, 0.0f } }, { 0, 2 });
    const DoctorParity tie = compareParity(tieCpu, tieGpu, false);
    QVERIFY2(tie.passed, tie.verdict.c_str());
    QVERIFY(!tie.repliesAgree);
    // Two other tokens near a tie do not excuse a parting between far-apart ones.
    const Reply farGpu = reply({ { 5.0f, 1.0f, 0.5f, -2.0f }, { 0.1f, 3.99999f, 4.0f, 0.0f } }, { 0, 3 });
    QVERIFY(!compareParity(tieCpu, farGpu, false).passed);
    QVERIFY(!compareParity(Reply {}, Reply {}, false).passed); // nothing compared is no pass
}

void TestModel::gpuUuidAsNvmlNamesIt()
{
    const unsigned char bytes[16]
        = { 0x3f, 0x1a, 0x00, 0xff, 0x12, 0x34, 0xab, 0xcd, 0x01, 0x02, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54 };
    QCOMPARE(nvmlUuid(bytes), std::string("GPU-3f1a00ff-1234-abcd-0102-fedcba987654"));
}

// The sparse-gradient lookup against nn::Embedding (padding_idx 0): the same rows forward, and
// backward the same gradient as ATen's dense embedding backward, as sorted unique rows without
// the padding row; several sparse gradients summed likewise.
void TestModel::sparseLookupMatchesEmbedding()
{
    torch::manual_seed(11);
    const int64_t V = 40, E = 7;
    torch::nn::Embedding reference(torch::nn::EmbeddingOptions(V, E).padding_idx(0));
    auto weight = reference->weight.detach().clone().requires_grad_(true);
    // Repeats, the padding row, the first and last rows, out of order.
    auto ids = torch::tensor({ 5, 0, 39, 5, 1, 17, 0, 17, 17, 2, 39, 8 }, torch::kInt64).view({ 3, 4 });
    auto upstream = torch::randn({ 3, 4, E });
    auto ours = sparseGradLookup(weight, ids, 0);
    auto theirs = reference(ids);
    QVERIFY(torch::equal(ours, theirs));
    const auto g = torch::autograd::grad({ ours }, { weight }, { upstream })[0];
    theirs.backward(upstream);
    QVERIFY(g.is_sparse());
    QVERIFY(g.is_coalesced());
    QCOMPARE(vec(g._indices()), (std::vector<double> { 1, 2, 5, 8, 17, 39 }));
    QVERIFY((g.to_dense() - reference->weight.grad()).abs().max().item<double>() < 1e-6);
    // Row 17 is read three times: its gradient, the three upstream rows summed in position order.
    const auto flat = upstream.view({ -1, E });
    QVERIFY(torch::equal(g._values()[4], flat[5] + flat[7] + flat[8]));
    // The same gradient handed back time-major ((4, 3, E) seen as (3, 4, E), as the engine's LSTM
    // layer hands it): read in place, the same sums in the same order.
    const auto timeMajor = upstream.transpose(0, 1).contiguous().transpose(0, 1);
    QVERIFY(!timeMajor.is_contiguous());
    const auto gt = torch::autograd::grad({ sparseGradLookup(weight, ids, 0) }, { weight }, { timeMajor })[0];
    QVERIFY(torch::equal(gt._indices(), g._indices()) && torch::equal(gt._values(), g._values()));

    // Several slices' gradients (and an uncoalesced one, as two lookups of one table leave it).
    auto a = sparseGradLookup(weight, torch::tensor({ 3, 9, 3 }), 0);
    auto b = sparseGradLookup(weight, torch::tensor({ 9, 0, 30 }), 0);
    auto ga = torch::autograd::grad({ (a * 2).sum() }, { weight })[0];
    auto gb = torch::autograd::grad({ (b * 3).sum() }, { weight })[0];
    const auto both = sumSparseRows({ ga, gb, ga + gb });
    QVERIFY(both.is_coalesced());
    QCOMPARE(vec(both._indices()), (std::vector<double> { 3, 9, 30 }));
    QVERIFY(torch::equal(both.to_dense(), 2 * (ga.to_dense() + gb.to_dense())));
}

void TestModel::sparseEmbeddingStepMatchesTorchRmsprop_data()
{
    QTest::addColumn<bool>("shared"); // one table for the encoder and the decoder
    QTest::addColumn<int>("threads"); // 2: two row slices side by side; 1: one pass
    QTest::newRow("one pass") << false << 1;
    QTest::newRow("two slices") << false << 2;
    QTest::newRow("shared, one pass") << true << 1;
    QTest::newRow("shared, two slices") << true << 2;
}

// The engine's step with sparse embedding gradients (the touched rows updated, the others only
// decayed) against torch::optim::RMSprop after nn::Embedding's dense backward and
// clip_grad_norm_, on a vocabulary of 60 words and two batches over different words.
void TestModel::sparseEmbeddingStepMatchesTorchRmsprop()
{
    QFETCH(bool, shared);
    QFETCH(int, threads);
    TrainConfig cfg = tinyTraining();
    cfg.model.vocabSize = 60;
    cfg.model.embedDim = 6;
    cfg.model.sharedEmbedding = shared;
    cfg.optimizer = OptimizerKind::RMSprop;
    cfg.learningRate = 1e-3;
    cfg.clipNorm = 0.05; // small enough to clip
    // 16 pairs (two slices of 8) over words [first, first + span).
    auto examples = [](int64_t first, int64_t span) {
        std::vector<Example> out;
        for (int64_t i = 0; i < 16; ++i) {
            Example e;
            for (int64_t k = 0; k <= i % 4; ++k)
                e.source.push_back(first + (i * 3 + k) % span);
            e.target = { 2, first + (i * 5) % span, first + (i + 2) % span, 3 };
            out.push_back(e);
        }
        return out;
    };
    const auto exA = examples(4, 16), exB = examples(30, 20);
    const Batch a = collate(exA, range(0, 16), torch::kCPU), b = collate(exB, range(0, 16), torch::kCPU);
    const int threadsBefore = at::get_num_threads();
    at::set_num_threads(threads);
    Stepper s = makeStepper(cfg, torch::kCPU, Precision::FP32);
    Stepper ref = makeStepper(cfg, torch::kCPU, Precision::FP32);
    QCOMPARE(stepParts(s, a), int64_t(threads));
    auto referenceStep = [&](const Batch& batch) {
        ref.model->train();
        ref.model->setSparseEmbedding(false);
        ref.optimizer->zero_grad();
        (lossSum(ref, batch, true, 1.0, nullptr) / static_cast<double>(batch.tokens)).backward();
        torch::nn::utils::clip_grad_norm_(ref.model->parameters(), cfg.clipNorm);
        ref.optimizer->step();
    };
    auto squares = [](Stepper& st, const torch::Tensor& p) {
        settleOptimizer(st); // the decays the sparse rows are owed, applied
        auto& state = st.optimizer->state();
        return static_cast<torch::optim::RMSpropParamState&>(*state.at(p.unsafeGetTensorImpl())).square_avg().clone();
    };
    const auto table = s.model->encoderEmbedding->weight;
    QVERIFY(trainStep(s, a).applied);
    referenceStep(a);
    at::set_num_threads(threadsBefore);
    QVERIFY(table.grad().is_sparse()); // the sparse step did run
    const auto wA = table.detach().clone(), saA = squares(s, table);
    at::set_num_threads(threads);
    // B twice: A's rows are owed two decays when A comes back.
    QVERIFY(trainStep(s, b).applied);
    referenceStep(b);
    QVERIFY(trainStep(s, b).applied);
    referenceStep(b);
    QVERIFY(trainStep(s, a).applied);
    referenceStep(a);
    at::set_num_threads(threadsBefore);
    QVERIFY(weightsWithin(s, ref, 1e-5));
    const auto params = s.model->parameters(), refParams = ref.model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        const auto want = squares(ref, refParams[i]);
        const double d = (squares(s, params[i]) - want).abs().max().item<double>();
        const double scale = want.abs().max().item<double>();
        QVERIFY(scale > 0);
        QVERIFY2(d <= 1e-5 * scale,
            qPrintable(QString("parameter %1: running squares off by %2 of %3").arg(i).arg(d).arg(scale)));
    }
    // The gradient held only the rows the last batch read (A's words, 2 and 3), none of B's.
    const auto rows = vec(table.grad()._indices());
    QVERIFY(!rows.empty());
    for (double r : rows)
        QVERIFY2((r >= 4 && r < 20) || (shared && (r == 2 || r == 3)), qPrintable(QString::number(r)));
    // Rows step A touched and step B did not: after B twice, exactly A's weights and A's running
    // squares times alpha, rounded, times alpha again (what two torch::optim updates of a zero
    // gradient give, to the bit), once the decays owed are settled.
    Stepper again = makeStepper(cfg, torch::kCPU, Precision::FP32);
    at::set_num_threads(threads);
    trainStep(again, a);
    trainStep(again, b);
    trainStep(again, b);
    at::set_num_threads(threadsBefore);
    const auto w = again.model->encoderEmbedding->weight.detach();
    const auto sa = squares(again, again.model->encoderEmbedding->weight);
    const float alpha = 0.9f;
    int checked = 0;
    for (int64_t r = 4; r < 20; ++r) {
        QVERIFY2(torch::equal(w[r], wA[r]), qPrintable(QString("row %1 moved").arg(r)));
        QVERIFY2(torch::equal(sa[r], saA[r].mul(alpha).mul(alpha)), qPrintable(QString("row %1").arg(r)));
        QVERIFY(saA[r].abs().max().item<double>() > 0); // it had been touched
        ++checked;
    }
    QCOMPARE(checked, 16);
}

// The step's lanes: every round runs lane 0 on the caller and each other lane once on a thread of
// the team, and returns only when all have ended; rounds that follow at once (the threads still
// watching) and after a pause (asleep), rounds with fewer lanes than threads, and a team ended
// while its threads sleep or watch.
void TestModel::laneTeamRunsEachLaneOncePerRound()
{
    for (const int workers : { 1, 3 }) {
        LaneTeam team(workers);
        QCOMPARE(team.size(), workers);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(workers + 1));
        const std::thread::id caller = std::this_thread::get_id();
        std::atomic<int> misplaced { 0 }; // lane 0 off the caller's thread, or another lane on it
        for (int round = 0; round < 400; ++round) {
            const int64_t lanes = 1 + round % (workers + 1);
            std::vector<int> before(runs.size());
            for (size_t j = 0; j < runs.size(); ++j)
                before[j] = runs[j].load();
            team.run(lanes, [&](int64_t k) {
                if (k > 0)
                    std::this_thread::sleep_for(std::chrono::microseconds(round % 7 == 0 ? 300 : 0));
                runs[static_cast<size_t>(k)].fetch_add(1);
                if ((k == 0) != (std::this_thread::get_id() == caller))
                    misplaced.fetch_add(1);
            });
            // Every lane ended before run returned, each exactly once.
            for (size_t j = 0; j < runs.size(); ++j)
                QCOMPARE(runs[j].load() - before[j], static_cast<int64_t>(j) < lanes ? 1 : 0);
            if (round % 50 == 49) // past the threads' watch: they sleep, and are woken
                std::this_thread::sleep_for(LaneTeam::kSpin * 5);
        }
        QCOMPARE(misplaced.load(), 0); // lanes 1 … on the team's threads, lane 0 on the caller's
    }
    { // ended at once, its thread still watching
        LaneTeam team(1);
        team.run(2, [](int64_t) {});
    }
    { // ended asleep
        LaneTeam team(2);
        std::this_thread::sleep_for(LaneTeam::kSpin * 5);
    }
}

void TestModel::gradientTimesInputMatchesTheEmbeddingGradient()
{
    // Against the gradient of the encoder's embedding table, taken through the packed encoder
    // (another graph than the engine's): with every source word distinct, position i's share is
    // the table row of its word, dotted with that row.
    for (const bool attention : { false, true }) {
        torch::manual_seed(11);
        TrainConfig tc;
        tc.model = tinyConfig();
        tc.model.vocabSize = 20;
        tc.model.embedDim = 6;
        tc.model.hidden = 8;
        tc.model.layers = 2;
        tc.model.attention = attention;
        std::vector<std::string> words;
        for (int i = 4; i < 20; ++i)
            words.push_back("w" + std::to_string(i));
        const Tokenizer tok = Tokenizer::fromWords(words, {});
        Seq2Seq model(tc.model);
        model->eval();
        const Chatbot bot = makeSnapshot(tc, tok, model, 0);
        const std::vector<int64_t> source { 5, 9, 7, 12, 16 };
        const int64_t token = 11;
        const std::vector<double> got = bot.gradientTimesInput(source, token);
        QCOMPARE(got.size(), source.size());

        auto src = torch::tensor(source).unsqueeze(0);
        const EncoderOutput enc = model->encode(src, torch::tensor({ static_cast<int64_t>(source.size()) }));
        auto logits = model->decode(torch::tensor({ { Tokenizer::kStart } }), enc.h, enc.c, enc).logits[0][0];
        auto lp = torch::log_softmax(logits, -1)[token];
        auto table = model->encoderEmbedding->weight;
        auto g = torch::autograd::grad({ lp }, { table })[0];
        double largest = 0;
        for (size_t i = 0; i < source.size(); ++i) {
            const double expected = (g[source[i]] * table[source[i]]).sum().item<double>();
            QVERIFY2(std::abs(got[i] - expected) < 1e-5, qPrintable(QString("%1 vs %2").arg(got[i]).arg(expected)));
            largest = std::max(largest, std::abs(expected));
        }
        QVERIFY(largest > 1e-4); // not all zero
        QVERIFY(!table.grad().defined()); // the engine left the model's gradients alone
        if (!attention) { // started from zeros, the decoder never sees the source
            for (double v : bot.gradientTimesInput(source, token, HandoffMode::ZeroInit))
                QCOMPARE(v, 0.0);
        }
    }
}

QTEST_GUILESS_MAIN(TestModel)
#include "tst_model.moc"
