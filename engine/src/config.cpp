#include "chatbench/config.h"

#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace chatbench {

std::vector<std::string> presetNames()
{
    return { "seed", "quick", "large" };
}

std::string presetDescription(const std::string& name)
{
    if (name == "seed")
        return "the Keras recipe";
    if (name == "quick")
        return "small and fast";
    if (name == "large")
        return "2 layers + attention";
    return {};
}

TrainConfig preset(const std::string& name)
{
    TrainConfig c;
    c.preset = name;
    if (name == "seed") {
        // The Keras recipe: separate embeddings, 200/200, RMSprop at Keras' default rate.
        return c;
    }
    if (name == "quick") {
        c.model.embedDim = 64;
        c.model.hidden = 128;
        c.optimizer = OptimizerKind::Adam;
        c.learningRate = 3e-3;
        c.batchSize = 32;
        c.epochs = 60;
        return c;
    }
    if (name == "large") {
        c.model.embedDim = 256;
        c.model.hidden = 512;
        c.model.layers = 2;
        c.model.dropout = 0.2;
        c.model.attention = true;
        c.optimizer = OptimizerKind::Adam;
        c.learningRate = 1e-3;
        c.batchSize = 64;
        c.epochs = 80;
        c.patience = 10;
        return c;
    }
    throw Error("unknown preset '" + name + "' (seed, quick, large)");
}

void validate(const TrainConfig& c)
{
    auto need = [](bool ok, const std::string& what) {
        if (!ok)
            throw Error("invalid configuration: " + what);
    };
    need(c.model.embedDim >= 1 && c.model.embedDim <= 8192, "embed_dim must be 1..8192");
    need(c.model.hidden >= 1 && c.model.hidden <= 8192, "hidden must be 1..8192");
    need(c.model.layers >= 1 && c.model.layers <= 8, "layers must be 1..8");
    need(c.model.dropout >= 0 && c.model.dropout < 1, "dropout must be in [0, 1)");
    need(c.model.maxSourceLength >= 1 && c.model.maxSourceLength <= 4096, "max_source_length must be 1..4096");
    need(c.model.maxTargetLength >= 3 && c.model.maxTargetLength <= 4096,
        "max_target_length must be 3..4096 (it counts <start> and <end>)");
    need(std::isfinite(c.learningRate) && c.learningRate > 0 && c.learningRate <= 10,
        "learning_rate must be in (0, 10]");
    need(std::isfinite(c.clipNorm) && c.clipNorm >= 0, "clip_norm must be >= 0");
    need(c.teacherForcing >= 0 && c.teacherForcing <= 1, "teacher_forcing must be in [0, 1]");
    need(c.batchSize >= 1 && c.batchSize <= 65536, "batch_size must be 1..65536");
    need(c.epochs >= 1 && c.epochs <= 100000, "epochs must be 1..100000");
    need(c.validationFraction >= 0 && c.validationFraction < 1, "validation_fraction must be in [0, 1)");
    need(c.patience >= 0, "patience must be >= 0");
    need(c.checkpointEverySteps >= 0, "checkpoint_every_steps must be >= 0");
    need(c.keepCheckpoints >= 1 && c.keepCheckpoints <= 1000, "keep_checkpoints must be 1..1000");
    need(c.threads >= 0 && c.threads <= 1024, "threads must be 0..1024");
    need(c.tokenizer.minFrequency >= 1, "min_frequency must be >= 1");
    need(c.tokenizer.maxSize == 0 || c.tokenizer.maxSize >= 5, "max_vocab must be 0 (no limit) or >= 5");
    need(c.device == "cpu" || c.device.rfind("cuda", 0) == 0, "device must be 'cpu' or 'cuda:N'");
    // config.json is UTF-8 JSON: a path that is not cannot be stored, and a replaced byte would
    // name another file on resume.
    need(text::invalidUtf8Offset(c.corpus) == std::string::npos,
        "the corpus path '" + printable(c.corpus) + "' is not valid UTF-8; rename the file or folder");
}

std::string toJson(const TrainConfig& c)
{
    nlohmann::ordered_json j;
    j["format"] = "chatbench-config";
    j["version"] = 1;
    j["preset"] = c.preset;
    j["model"] = { { "vocab_size", c.model.vocabSize }, { "embed_dim", c.model.embedDim }, { "hidden", c.model.hidden },
        { "layers", c.model.layers }, { "dropout", c.model.dropout }, { "attention", c.model.attention },
        { "shared_embedding", c.model.sharedEmbedding }, { "max_source_length", c.model.maxSourceLength },
        { "max_target_length", c.model.maxTargetLength } };
    j["tokenizer"] = { { "mode", tokenizerModeName(c.tokenizer.mode) }, { "min_frequency", c.tokenizer.minFrequency },
        { "max_vocab", c.tokenizer.maxSize }, { "drop_unknown", c.tokenizer.dropUnknown } };
    j["train"] = { { "optimizer", optimizerName(c.optimizer) }, { "learning_rate", c.learningRate },
        { "clip_norm", c.clipNorm }, { "teacher_forcing", c.teacherForcing }, { "batch_size", c.batchSize },
        { "epochs", c.epochs }, { "validation_fraction", c.validationFraction }, { "patience", c.patience },
        { "seed", c.seed }, { "deterministic", c.deterministic }, { "bucketing", c.bucketing },
        { "checkpoint_every_steps", c.checkpointEverySteps }, { "keep_checkpoints", c.keepCheckpoints } };
    j["device"] = { { "device", c.device }, { "precision", precisionName(c.precision) }, { "tf32", c.tf32 },
        { "threads", c.threads } };
    j["corpus"] = { { "path", c.corpus }, { "format", formatName(c.corpusFormat) }, { "latin1", c.latin1 },
        { "pairing", pairingName(c.pairing) }, { "strict", c.strictCorpus } };
    return j.dump(2) + "\n";
}

LoadOptions corpusLoadOptions(const TrainConfig& c)
{
    LoadOptions o;
    o.format = c.corpusFormat;
    o.latin1 = c.latin1;
    o.pairing = c.pairing;
    o.strict = c.strictCorpus;
    return o;
}

TrainConfig trainConfigFromJson(const std::string& text, const std::string& file)
{
    const nlohmann::json j = parseDocument(text, file, "chatbench-config", "not a chatbench config.json");
    TrainConfig c;
    try {
        c.preset = j.value("preset", "custom");
        const auto& m = j.at("model");
        c.model.vocabSize = m.at("vocab_size").get<int64_t>();
        c.model.embedDim = m.at("embed_dim").get<int>();
        c.model.hidden = m.at("hidden").get<int>();
        c.model.layers = m.at("layers").get<int>();
        c.model.dropout = m.at("dropout").get<double>();
        c.model.attention = m.at("attention").get<bool>();
        c.model.sharedEmbedding = m.at("shared_embedding").get<bool>();
        c.model.maxSourceLength = m.at("max_source_length").get<int>();
        c.model.maxTargetLength = m.at("max_target_length").get<int>();
        const auto& t = j.at("tokenizer");
        const auto mode = parseTokenizerMode(t.at("mode").get<std::string>());
        if (!mode)
            throw Error(file, 0, "tokenizer.mode must be " + joinNames(tokenizerModeNames()));
        c.tokenizer.mode = *mode;
        c.tokenizer.minFrequency = t.at("min_frequency").get<int>();
        c.tokenizer.maxSize = t.at("max_vocab").get<int>();
        c.tokenizer.dropUnknown = t.value("drop_unknown", false);
        const auto& tr = j.at("train");
        const auto opt = parseOptimizer(tr.at("optimizer").get<std::string>());
        if (!opt)
            throw Error(file, 0, "train.optimizer must be " + joinNames(optimizerNames()));
        c.optimizer = *opt;
        c.learningRate = tr.at("learning_rate").get<double>();
        c.clipNorm = tr.at("clip_norm").get<double>();
        c.teacherForcing = tr.at("teacher_forcing").get<double>();
        c.batchSize = tr.at("batch_size").get<int>();
        c.epochs = tr.at("epochs").get<int>();
        c.validationFraction = tr.at("validation_fraction").get<double>();
        c.patience = tr.at("patience").get<int>();
        c.seed = tr.at("seed").get<uint64_t>();
        c.deterministic = tr.at("deterministic").get<bool>();
        c.bucketing = tr.at("bucketing").get<bool>();
        c.checkpointEverySteps = tr.value("checkpoint_every_steps", 0);
        c.keepCheckpoints = tr.value("keep_checkpoints", 2);
        const auto& d = j.at("device");
        c.device = d.at("device").get<std::string>();
        const auto prec = parsePrecision(d.at("precision").get<std::string>());
        if (!prec)
            throw Error(file, 0, "device.precision must be " + joinNames(precisionNames()));
        c.precision = *prec;
        c.tf32 = d.value("tf32", false);
        c.threads = d.at("threads").get<int>();
        if (j.contains("corpus")) {
            const auto& cj = j["corpus"];
            c.corpus = cj.value("path", "");
            const auto fmt = parseFormat(cj.value("format", "auto"));
            if (!fmt)
                throw Error(file, 0, "corpus.format must be " + joinNames(formatNames()));
            c.corpusFormat = *fmt;
            c.latin1 = cj.value("latin1", false);
            const auto pairing = parsePairing(cj.value("pairing", pairingName(Pairing::Consecutive)));
            if (!pairing)
                throw Error(file, 0, "corpus.pairing must be " + joinNames(pairingNames()));
            c.pairing = *pairing;
            c.strictCorpus = cj.value("strict", false);
        }
    } catch (const nlohmann::json::exception& e) {
        throw Error(file, 0, std::string("bad config: ") + e.what());
    }
    try {
        validate(c);
    } catch (const Error& e) {
        throw Error(file, 0, e.message());
    }
    return c;
}

} // namespace chatbench
