#include "chatbench/config.h"

#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

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
    // The names the device parser takes ("cuda:99999999999" was let through here and refused only
    // when training began, without naming config.json).
    const std::string index = c.device.rfind("cuda:", 0) == 0 ? c.device.substr(5) : "";
    need(c.device == "cpu" || c.device == "cuda"
            || (!index.empty() && index.size() < 4 && index.find_first_not_of("0123456789") == std::string::npos),
        "device must be 'cpu', 'cuda' or 'cuda:N' (N a device number), not '" + printable(c.device) + "'");
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

namespace {

// Settings a resumed run may take from an edited config.json: how long it trains, when it saves,
// where it runs. The corpus is checked by its pairs' fingerprint instead.
bool outsideRecipe(const std::string& key)
{
    static const std::set<std::string> free { "train.epochs", "train.patience", "train.checkpoint_every_steps",
        "train.keep_checkpoints", "device.device", "device.threads", "device.tf32" };
    return free.count(key) > 0;
}

nlohmann::ordered_json flatRecipe(const TrainConfig& c)
{
    const auto all = nlohmann::ordered_json::parse(toJson(c));
    nlohmann::ordered_json flat = nlohmann::ordered_json::object();
    for (const char* section : { "model", "tokenizer", "train", "device" })
        for (const auto& [key, value] : all[section].items())
            if (const std::string name = std::string(section) + "." + key; !outsideRecipe(name))
                flat[name] = value;
    return flat;
}

} // namespace

std::string recipeJson(const TrainConfig& c)
{
    return flatRecipe(c).dump();
}

std::vector<std::string> recipeChanges(const std::string& recorded, const TrainConfig& c)
{
    const auto then = nlohmann::json::parse(recorded, nullptr, /*allow_exceptions=*/false);
    if (!then.is_object())
        return { "the settings recorded in state.json are unreadable" };
    const auto now = flatRecipe(c);
    std::vector<std::string> out;
    // Settings a later build added are not in an older record: only the recorded ones are compared.
    for (const auto& [key, was] : then.items()) {
        const auto it = now.find(key);
        if (it == now.end()) // not recorded any more, or one a resume may change
            continue;
        if (nlohmann::json(*it) != was) // one JSON type on both sides (clang finds != ambiguous otherwise)
            out.push_back(
                key + " was " + printable(was.dump().substr(0, 80)) + ", now " + printable(it->dump().substr(0, 80)));
    }
    return out;
}

LoadOptions corpusLoadOptions(const TrainConfig& c)
{
    LoadOptions o;
    o.format = c.corpusFormat;
    o.latin1 = c.latin1;
    o.pairing = c.pairing;
    o.strict = c.strictCorpus;
    o.csvAsDialog = true; // a run trained on a .csv before CSV files were refused
    return o;
}

namespace {

// A key config.json does not have, such as a misspelt setting that would otherwise be ignored
// ("train.patiance"): a FieldError naming it and the keys its object has. The keys are those
// toJson writes, in their sections.
void refuseUnknownKeys(const nlohmann::json& j)
{
    static const nlohmann::ordered_json known = nlohmann::ordered_json::parse(toJson(TrainConfig {}));
    auto refuse = [](const std::string& path, const nlohmann::ordered_json& keys) {
        std::vector<std::string> names;
        for (const auto& [k, v] : keys.items())
            names.push_back(k);
        const size_t dot = path.find('.');
        throw FieldError("unknown key '" + printable(path) + "' (a misspelt setting?); "
                + (dot == std::string::npos ? std::string("the file") : "'" + path.substr(0, dot) + "'") + " takes "
                + joinNames(names),
            path);
    };
    for (const auto& [key, value] : j.items()) {
        if (!known.contains(key))
            refuse(key, known);
        if (value.is_object() && known[key].is_object())
            for (const auto& [inner, v] : value.items())
                if (!known[key].contains(inner))
                    refuse(key + "." + inner, known[key]);
    }
}

} // namespace

TrainConfig trainConfigFromJson(const std::string& text, const std::string& file)
{
    const nlohmann::json j = parseDocument(text, file, "chatbench-config", "not a chatbench config.json");
    TrainConfig c;
    try {
        const JsonObject root { j, "" };
        c.preset = field<std::string>(root, "preset", std::string("custom"));
        const JsonObject m = section(root, "model");
        c.model.vocabSize = field<int64_t>(m, "vocab_size");
        c.model.embedDim = field<int>(m, "embed_dim");
        c.model.hidden = field<int>(m, "hidden");
        c.model.layers = field<int>(m, "layers");
        c.model.dropout = field<double>(m, "dropout");
        c.model.attention = field<bool>(m, "attention");
        c.model.sharedEmbedding = field<bool>(m, "shared_embedding");
        c.model.maxSourceLength = field<int>(m, "max_source_length");
        c.model.maxTargetLength = field<int>(m, "max_target_length");
        const JsonObject t = section(root, "tokenizer");
        const auto mode = parseTokenizerMode(field<std::string>(t, "mode"));
        if (!mode)
            throw FieldError("'tokenizer.mode' must be " + joinNames(tokenizerModeNames()), "tokenizer.mode");
        c.tokenizer.mode = *mode;
        c.tokenizer.minFrequency = field<int>(t, "min_frequency");
        c.tokenizer.maxSize = field<int>(t, "max_vocab");
        c.tokenizer.dropUnknown = field<bool>(t, "drop_unknown", false);
        const JsonObject tr = section(root, "train");
        const auto opt = parseOptimizer(field<std::string>(tr, "optimizer"));
        if (!opt)
            throw FieldError("'train.optimizer' must be " + joinNames(optimizerNames()), "train.optimizer");
        c.optimizer = *opt;
        c.learningRate = field<double>(tr, "learning_rate");
        c.clipNorm = field<double>(tr, "clip_norm");
        c.teacherForcing = field<double>(tr, "teacher_forcing");
        c.batchSize = field<int>(tr, "batch_size");
        c.epochs = field<int>(tr, "epochs");
        c.validationFraction = field<double>(tr, "validation_fraction");
        c.patience = field<int>(tr, "patience");
        c.seed = field<uint64_t>(tr, "seed");
        c.deterministic = field<bool>(tr, "deterministic");
        c.bucketing = field<bool>(tr, "bucketing");
        c.checkpointEverySteps = field<int>(tr, "checkpoint_every_steps", 0);
        c.keepCheckpoints = field<int>(tr, "keep_checkpoints", 2);
        const JsonObject d = section(root, "device");
        c.device = field<std::string>(d, "device");
        const auto prec = parsePrecision(field<std::string>(d, "precision"));
        if (!prec)
            throw FieldError("'device.precision' must be " + joinNames(precisionNames()), "device.precision");
        c.precision = *prec;
        c.tf32 = field<bool>(d, "tf32", false);
        c.threads = field<int>(d, "threads");
        if (j.contains("corpus")) {
            const JsonObject cj = section(root, "corpus");
            c.corpus = field<std::string>(cj, "path", std::string(""));
            const auto fmt = parseFormat(field<std::string>(cj, "format", std::string("auto")));
            if (!fmt)
                throw FieldError("'corpus.format' must be " + joinNames(formatNames()), "corpus.format");
            c.corpusFormat = *fmt;
            c.latin1 = field<bool>(cj, "latin1", false);
            const auto pairing
                = parsePairing(field<std::string>(cj, "pairing", std::string(pairingName(Pairing::Consecutive))));
            if (!pairing)
                throw FieldError("'corpus.pairing' must be " + joinNames(pairingNames()), "corpus.pairing");
            c.pairing = *pairing;
            c.strictCorpus = field<bool>(cj, "strict", false);
        }
        refuseUnknownKeys(j); // after the known ones: a value of the wrong type is the likelier slip
    } catch (const FieldError& e) {
        throw fieldError(file, text, "bad config: ", e);
    } catch (const nlohmann::json::exception& e) {
        throw Error(file, 0, "bad config: " + jsonMessage(e));
    }
    try {
        validate(c);
    } catch (const Error& e) {
        // validate's messages start with the setting's key ("hidden must be 1..8192"): its line.
        const std::string msg = e.message(), prefix = "invalid configuration: ";
        const std::string key
            = msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size(), msg.find(' ', prefix.size()) - prefix.size()) : "";
        size_t at = std::string::npos;
        for (const char* section : { "model.", "train.", "tokenizer.", "device.", "corpus." })
            if (at == std::string::npos && !key.empty())
                at = offsetOfPath(text, section + key);
        throw Error(file, at == std::string::npos ? 0 : text::lineOfOffset(text, at), msg);
    }
    return c;
}

} // namespace chatbench
