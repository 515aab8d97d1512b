#include "checkpoint.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

std::string statePath(const std::string& runDir)
{
    return (fs::path(runDir) / "state.json").string();
}

nlohmann::json numberOrNull(double v)
{
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

double numberOr(const nlohmann::json& j, const char* key, double fallback)
{
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? fallback : it->get<double>();
}

} // namespace

std::string configPath(const std::string& runDir)
{
    return (fs::path(runDir) / "config.json").string();
}

std::string vocabPath(const std::string& runDir)
{
    return (fs::path(runDir) / "vocab.json").string();
}

void saveCheckpoint(const std::string& runDir, Seq2Seq& model, torch::optim::Optimizer& optimizer, RunState& state)
{
    char name[64];
    std::snprintf(name, sizeof name, "ckpt-%08lld.pt", static_cast<long long>(state.step));
    const std::string file = (fs::path(runDir) / name).string();
    writeFileAtomic(file, [&](const std::string& tmp) {
        torch::serialize::OutputArchive root, m, o;
        model->save(m);
        optimizer.save(o);
        root.write("model", m);
        root.write("optimizer", o);
        root.write("step", torch::tensor(static_cast<int64_t>(state.step)));
        root.save_to(tmp);
    });
    const std::string previous = state.checkpoint;
    state.checkpoint = name;

    nlohmann::ordered_json j;
    j["format"] = "chatbench-state";
    j["version"] = 1;
    j["checkpoint"] = state.checkpoint;
    j["epoch"] = state.epoch;
    j["batch_in_epoch"] = state.batchInEpoch;
    j["step"] = state.step;
    j["epoch_loss_sum"] = state.epochLossSum;
    j["epoch_tokens"] = state.epochTokens;
    j["epoch_seconds"] = state.epochSeconds;
    j["elapsed_seconds"] = state.elapsedSeconds;
    j["best_validation_loss"] = numberOrNull(state.bestValidationLoss);
    j["have_best"] = state.haveBest;
    j["bad_epochs"] = state.badEpochs;
    j["finished"] = state.finished;
    j["corpus_fingerprint"] = state.corpusFingerprint;
    j["loss_scale"] = state.lossScale;
    auto& hist = j["history"] = nlohmann::ordered_json::array();
    for (const auto& m : state.history)
        hist.push_back({ { "epoch", m.epoch }, { "step", m.step }, { "train_loss", numberOrNull(m.trainLoss) },
            { "validation_loss", numberOrNull(m.validationLoss) },
            { "validation_accuracy", numberOrNull(m.validationAccuracy) }, { "perplexity", numberOrNull(m.perplexity) },
            { "seconds", m.seconds }, { "tokens_per_second", m.tokensPerSecond },
            { "elapsed_seconds", m.elapsedSeconds } });
    writeFileAtomic(statePath(runDir), j.dump(1) + "\n");

    // Only the checkpoint state.json names is kept.
    if (!previous.empty() && previous != state.checkpoint) {
        std::error_code ec;
        fs::remove(fs::path(runDir) / previous, ec);
    }
}

RunState loadState(const std::string& runDir)
{
    const std::string path = statePath(runDir);
    if (!fs::exists(path))
        throw Error(runDir, 0, "not a chatbench run (no state.json): has it trained for at least one checkpoint?");
    const std::string bytes = text::readFile(path);
    const nlohmann::json j = parseDocument(bytes, path, "chatbench-state", "not a chatbench state.json");
    RunState s;
    try {
        s.checkpoint = j.at("checkpoint").get<std::string>();
        s.epoch = j.at("epoch").get<int>();
        s.batchInEpoch = j.at("batch_in_epoch").get<int64_t>();
        s.step = j.at("step").get<int64_t>();
        s.epochLossSum = j.at("epoch_loss_sum").get<double>();
        s.epochTokens = j.at("epoch_tokens").get<int64_t>();
        s.epochSeconds = j.value("epoch_seconds", 0.0);
        s.elapsedSeconds = j.at("elapsed_seconds").get<double>();
        s.bestValidationLoss = numberOr(j, "best_validation_loss", 0.0);
        s.haveBest = j.at("have_best").get<bool>();
        s.badEpochs = j.at("bad_epochs").get<int>();
        s.finished = j.at("finished").get<bool>();
        s.corpusFingerprint = j.at("corpus_fingerprint").get<uint64_t>();
        s.lossScale = j.value("loss_scale", 65536.0);
        for (const auto& h : j.at("history")) {
            EpochMetrics m;
            m.epoch = h.at("epoch").get<int>();
            m.step = h.at("step").get<int64_t>();
            m.trainLoss = numberOr(h, "train_loss", NAN);
            m.validationLoss = numberOr(h, "validation_loss", NAN);
            m.validationAccuracy = numberOr(h, "validation_accuracy", NAN);
            m.perplexity = numberOr(h, "perplexity", NAN);
            m.seconds = h.at("seconds").get<double>();
            m.tokensPerSecond = h.at("tokens_per_second").get<double>();
            m.elapsedSeconds = h.at("elapsed_seconds").get<double>();
            s.history.push_back(m);
        }
    } catch (const nlohmann::json::exception& e) {
        throw Error(path, 0, std::string("bad state: ") + e.what());
    }
    if (s.checkpoint.find('/') != std::string::npos || s.checkpoint.find("..") != std::string::npos)
        throw Error(path, 0, "checkpoint name must be a file in the run folder");
    return s;
}

void loadCheckpoint(
    const std::string& runDir, const RunState& state, Seq2Seq& model, torch::optim::Optimizer* optimizer)
{
    const std::string file = (fs::path(runDir) / state.checkpoint).string();
    if (!fs::exists(file))
        throw Error(file, 0, "checkpoint file is missing");
    // Remember the shapes the config asks for: InputArchive::read would silently resize.
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (const auto& p : model->named_parameters())
        shapes.emplace_back(p.key(), p.value().sizes().vec());
    try {
        torch::serialize::InputArchive root, m;
        root.load_from(file, model->parameters().front().device());
        root.read("model", m);
        model->load(m);
        if (optimizer) {
            torch::serialize::InputArchive o;
            root.read("optimizer", o);
            optimizer->load(o);
        }
    } catch (const c10::Error& e) {
        std::string what = e.what_without_backtrace();
        throw Error(file, 0, "cannot read checkpoint (" + what.substr(0, what.find('\n')) + ")");
    }
    auto params = model->named_parameters();
    for (const auto& [name, shape] : shapes) {
        const auto* t = params.find(name);
        if (!t || t->sizes().vec() != shape)
            throw Error(file, 0, "checkpoint does not match config.json (tensor '" + name + "' has another shape)");
    }
}

void writeMetricsCsv(const std::string& runDir, const std::vector<EpochMetrics>& history)
{
    std::ostringstream out;
    out.precision(8);
    out << "epoch,step,train_loss,validation_loss,validation_accuracy,perplexity,seconds,tokens_per_second,elapsed_"
           "seconds\n";
    for (const auto& m : history)
        out << m.epoch + 1 << ',' << m.step << ',' << m.trainLoss << ',' << m.validationLoss << ','
            << m.validationAccuracy << ',' << m.perplexity << ',' << m.seconds << ',' << m.tokensPerSecond << ','
            << m.elapsedSeconds << '\n';
    writeFileAtomic((fs::path(runDir) / "metrics.csv").string(), out.str());
}

} // namespace chatbench
