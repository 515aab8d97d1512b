// The benchmark report's JSON form, schema "chatbench-bench" (written and read here only).
#include "chatbench/bench.h"

#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace chatbench {

namespace {
using nlohmann::ordered_json;

ordered_json timingJson(const Timing& t)
{
    return { { "median_s", t.median }, { "p10_s", t.p10 }, { "p90_s", t.p90 }, { "min_s", t.min }, { "max_s", t.max },
        { "samples_s", t.samples } };
}

// The limits of a report this reads: far above any sweep `bench` makes (a few hundred rows), low
// enough that a hostile file cannot make the Compare view draw for minutes.
constexpr size_t kMaxRows = 100000, kMaxListItems = 10000, kMaxSamples = 1000000;
constexpr size_t kMaxText = 4096; // a label, a name or a note
constexpr int64_t kMaxReportBytes = int64_t(64) << 20;

std::string shownNumber(double v)
{
    std::ostringstream o; // "%.6g", but with a decimal point in every locale
    o << v;
    return o.str();
}

// obj[key] as a number in [lo, hi] (finite), or FieldError naming the field and the range.
template <typename T> T within(const JsonObject& obj, const std::string& key, T lo, T hi)
{
    const T v = field<T>(obj, key);
    if (!(v >= lo && v <= hi)) // NaN fails too
        throw FieldError("'" + pathOf(obj, key) + "' must be between " + shownNumber(static_cast<double>(lo)) + " and "
                + shownNumber(static_cast<double>(hi)) + ", not " + shownNumber(static_cast<double>(v)),
            pathOf(obj, key));
    return v;
}
template <typename T> T within(const JsonObject& obj, const std::string& key, T lo, T hi, T fallback)
{
    return obj.json.contains(key) ? within<T>(obj, key, lo, hi) : fallback;
}

std::string shortText(const JsonObject& obj, const std::string& key, const std::string& fallback = {})
{
    std::string v = field<std::string>(obj, key, fallback);
    if (v.size() > kMaxText)
        throw FieldError(
            "'" + pathOf(obj, key) + "' is longer than " + std::to_string(kMaxText) + " bytes", pathOf(obj, key));
    return v;
}

// obj[key] as a list of at most `most` items; an empty list when it is absent and `optional`.
const nlohmann::json& list(const JsonObject& obj, const std::string& key, size_t most, bool optional = false)
{
    static const nlohmann::json empty = nlohmann::json::array();
    if (optional && !obj.json.contains(key))
        return empty;
    if (!obj.json.contains(key))
        throw FieldError("'" + pathOf(obj, key) + "' is missing", obj.path);
    const nlohmann::json& v = obj.json.at(key);
    if (!v.is_array())
        throw FieldError("'" + pathOf(obj, key) + "' must be a list", pathOf(obj, key));
    if (v.size() > most)
        throw FieldError("'" + pathOf(obj, key) + "' holds " + std::to_string(v.size()) + " items, more than the "
                + std::to_string(most) + " a report may have",
            pathOf(obj, key));
    return v;
}

// Item i of a list as an object, named "rows[3]".
JsonObject item(const nlohmann::json& items, size_t i, const JsonObject& parent, const std::string& key)
{
    const JsonObject at { items[i], pathOf(parent, key) + "[" + std::to_string(i) + "]" };
    if (!at.json.is_object())
        throw FieldError("'" + at.path + "' must be an object", at.path);
    return at;
}

std::vector<std::string> texts(const JsonObject& obj, const std::string& key)
{
    std::vector<std::string> out;
    const auto& items = list(obj, key, kMaxListItems, true);
    for (size_t i = 0; i < items.size(); ++i) {
        const std::string at = pathOf(obj, key) + "[" + std::to_string(i) + "]";
        if (!items[i].is_string() || items[i].get_ref<const std::string&>().size() > kMaxText)
            throw FieldError("'" + at + "' must be a text of at most " + std::to_string(kMaxText) + " bytes", at);
        out.push_back(items[i].get<std::string>());
    }
    return out;
}

BenchPrecision precisionFrom(const JsonObject& obj)
{
    const std::string name = field<std::string>(obj, "precision");
    const auto p = parseBenchPrecision(name);
    if (!p)
        throw FieldError("unknown precision '" + printable(name) + "' (" + joinNames(benchPrecisionNames()) + ")",
            pathOf(obj, "precision"));
    return *p;
}

// A timing: seconds, finite and not negative, in the order min <= p10 <= median <= p90 <= max
// (the whiskers drawn from them), with a median above zero (the speed-ups divide by it).
Timing timingFrom(const JsonObject& obj)
{
    constexpr double kYear = 3.2e7;
    const auto& samples = list(obj, "samples_s", kMaxSamples);
    std::vector<double> values;
    for (size_t i = 0; i < samples.size(); ++i) {
        const std::string at = obj.path + ".samples_s[" + std::to_string(i) + "]";
        if (!samples[i].is_number() || !(samples[i].get<double>() >= 0 && samples[i].get<double>() <= kYear))
            throw FieldError("'" + at + "' must be a number of seconds between 0 and " + shownNumber(kYear), at);
        values.push_back(samples[i].get<double>());
    }
    Timing t = summarise(std::move(values));
    t.median = within(obj, "median_s", 0.0, kYear);
    t.p10 = within(obj, "p10_s", 0.0, kYear);
    t.p90 = within(obj, "p90_s", 0.0, kYear);
    t.min = within(obj, "min_s", 0.0, kYear);
    t.max = within(obj, "max_s", 0.0, kYear);
    if (!(t.median > 0))
        throw FieldError(
            "'" + obj.path + ".median_s' must be above 0 (a time that was measured)", pathOf(obj, "median_s"));
    const double slack = 1e-9 * t.max;
    if (!(t.min <= t.p10 + slack && t.p10 <= t.median + slack && t.median <= t.p90 + slack && t.p90 <= t.max + slack))
        throw FieldError(
            "'" + obj.path + "' is out of order: min_s <= p10_s <= median_s <= p90_s <= max_s must hold", obj.path);
    return t;
}
} // namespace

std::string lstmRanShort(const BenchRow& row)
{
    std::string s = row.lstmDtype;
    auto replace = [&](const std::string& from, const std::string& to) {
        for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
            s.replace(at, from.size(), to);
    };
    replace("encoder ", "");
    replace(", decoder ", "/");
    replace("bfloat16", "bf16");
    replace("float16", "fp16");
    replace("float32", row.tf32 ? "tf32" : "fp32");
    return s;
}

std::string precisionLabel(const BenchRow& row)
{
    const std::string name = benchPrecisionName(row.precision);
    const char* expected = row.precision == BenchPrecision::BF16 ? "bfloat16"
        : row.precision == BenchPrecision::FP16                  ? "float16"
                                                                 : "float32";
    if (row.lstmDtype.empty()) // a report from before the probe: nothing to compare with
        return name;
    std::string label = name;
    if (row.lstmDtype != expected)
        label += " (LSTM " + lstmRanShort(row) + ")";
    else if (row.precision == BenchPrecision::FP32 && row.tf32)
        label += " (TF32 maths)";
    else if (row.precision == BenchPrecision::TF32 && !row.tf32)
        label += " (TF32 off)";
    return label;
}

bool sameWorkload(const BenchReport& a, int batchA, const BenchReport& b, int batchB)
{
    if (a.corpus != b.corpus || a.corpusPairs != b.corpusPairs)
        return false;
    if (a.corpusFingerprint != 0 && b.corpusFingerprint != 0 && a.corpusFingerprint != b.corpusFingerprint)
        return false;
    if (a.model.embedDim != b.model.embedDim || a.model.hidden != b.model.hidden || a.model.layers != b.model.layers
        || a.model.attention != b.model.attention)
        return false;
    return batchA == 0 || batchB == 0 || batchA == batchB;
}

std::string describeWorkload(const BenchReport& r, int batch)
{
    std::string s = (r.corpus.empty() ? std::string("unnamed corpus") : printable(r.corpus)) + " ("
        + std::to_string(r.corpusPairs)
        + " pairs), E=" + std::to_string(r.model.embedDim) + " H=" + std::to_string(r.model.hidden) + ", "
        + std::to_string(r.model.layers) + (r.model.layers == 1 ? " layer" : " layers")
        + (r.model.attention ? ", attention" : "");
    if (batch > 0)
        s += ", batch " + std::to_string(batch);
    return s;
}

std::string toJson(const BenchReport& r)
{
    ordered_json j;
    j["format"] = "chatbench-bench";
    j["schema_version"] = r.schemaVersion;
    j["created"] = r.created;
    j["label"] = r.label;
    j["machine"] = { { "cpu_model", r.machine.cpuModel }, { "cpu_flags", r.machine.cpuFlags },
        { "cores", r.machine.cores }, { "memory_bytes", r.machine.memoryBytes }, { "gpu_name", r.machine.gpuName },
        { "gpu_driver", r.machine.gpuDriver }, { "torch", r.machine.torch }, { "cuda", r.machine.cuda },
        { "cudnn", r.machine.cudnn }, { "onednn", r.machine.onednn } };
    j["preset"] = r.preset;
    j["model"] = { { "vocab_size", r.model.vocabSize }, { "embed_dim", r.model.embedDim }, { "hidden", r.model.hidden },
        { "layers", r.model.layers }, { "attention", r.model.attention },
        { "max_source_length", r.model.maxSourceLength }, { "max_target_length", r.model.maxTargetLength } };
    j["corpus"] = { { "name", r.corpus }, { "pairs", r.corpusPairs } };
    if (r.corpusFingerprint != 0) {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r.corpusFingerprint));
        j["corpus"]["fingerprint"] = hex;
    }
    auto& g = j["gemm"] = ordered_json::array();
    for (const auto& x : r.gemm)
        g.push_back({ { "device", x.device }, { "precision", benchPrecisionName(x.precision) },
            { "threads", x.threads }, { "n", x.n }, { "gflops", x.gflops } });
    auto& rows = j["rows"] = ordered_json::array();
    for (const auto& x : r.rows)
        rows.push_back({ { "device", x.device }, { "precision", benchPrecisionName(x.precision) },
            { "threads", x.threads }, { "batch", x.batch }, { "unit", benchUnitName(x.unit) },
            { "time", timingJson(x.time) }, { "tokens_per_second", x.tokensPerSecond }, { "gflops", x.gflops },
            { "gemm_fraction", x.gemmFraction }, { "peak_memory_bytes", x.peakMemoryBytes },
            { "energy_joules", x.energyJoules >= 0 ? ordered_json(x.energyJoules) : ordered_json(nullptr) },
            { "energy_source", x.energySource }, { "warmup_runs", x.warmupRuns }, { "lstm_dtype", x.lstmDtype },
            { "tf32", x.tf32 } });
    auto& races = j["races"] = ordered_json::array();
    for (const auto& c : r.races) {
        ordered_json pts = ordered_json::array();
        for (const auto& p : c.points)
            pts.push_back({ { "seconds", p.seconds }, { "loss", p.loss },
                { "validation_loss",
                    std::isfinite(p.validationLoss) ? ordered_json(p.validationLoss) : ordered_json(nullptr) } });
        races.push_back({ { "device", c.device }, { "precision", benchPrecisionName(c.precision) },
            { "threads", c.threads }, { "points", pts } });
    }
    j["notes"] = r.notes;
    // Paths that are not UTF-8 (file names are bytes) are shown with U+FFFD, not refused.
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

BenchReport benchReportFromJson(const std::string& text, const std::string& file)
{
    const nlohmann::json j = parseDocument(text, file, "chatbench-bench", "not a chatbench benchmark report");
    BenchReport r;
    try {
        const JsonObject root { j, "" };
        r.schemaVersion = field<int>(root, "schema_version");
        if (r.schemaVersion > BenchReport::kSchemaVersion || r.schemaVersion < 1)
            throw FieldError("report schema version " + std::to_string(r.schemaVersion)
                    + " is not supported (this build reads 1.." + std::to_string(BenchReport::kSchemaVersion) + ")",
                "schema_version");
        r.created = shortText(root, "created");
        r.label = shortText(root, "label");
        const JsonObject m = section(root, "machine");
        r.machine.cpuModel = shortText(m, "cpu_model");
        r.machine.cpuFlags = texts(m, "cpu_flags");
        r.machine.cores = within(m, "cores", 0, 1 << 20, 0);
        r.machine.memoryBytes = within(m, "memory_bytes", int64_t(0), int64_t(1) << 60, int64_t(0));
        r.machine.gpuName = shortText(m, "gpu_name");
        r.machine.gpuDriver = shortText(m, "gpu_driver");
        r.machine.torch = shortText(m, "torch");
        r.machine.cuda = shortText(m, "cuda");
        r.machine.cudnn = shortText(m, "cudnn");
        r.machine.onednn = shortText(m, "onednn");
        r.preset = shortText(root, "preset");
        const JsonObject md = section(root, "model");
        r.model.vocabSize = within(md, "vocab_size", int64_t(1), int64_t(1) << 40);
        r.model.embedDim = within(md, "embed_dim", 1, 1 << 20);
        r.model.hidden = within(md, "hidden", 1, 1 << 20);
        r.model.layers = within(md, "layers", 1, 1024);
        r.model.attention = field<bool>(md, "attention", false);
        r.model.maxSourceLength = within(md, "max_source_length", 1, 1 << 20, 22);
        r.model.maxTargetLength = within(md, "max_target_length", 1, 1 << 20, 74);
        const JsonObject corpus = section(root, "corpus");
        r.corpus = shortText(corpus, "name");
        r.corpusPairs = within(corpus, "pairs", int64_t(0), int64_t(1) << 50, int64_t(0));
        const std::string fingerprint = shortText(corpus, "fingerprint");
        if (!fingerprint.empty()) {
            size_t used = 0;
            try {
                r.corpusFingerprint = std::stoull(fingerprint, &used, 16);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != fingerprint.size() || fingerprint.size() > 16)
                throw FieldError("corpus.fingerprint is not a 64-bit hexadecimal number: " + printable(fingerprint),
                    "corpus.fingerprint");
        }
        const auto& gemm = list(root, "gemm", kMaxListItems);
        for (size_t i = 0; i < gemm.size(); ++i) {
            const JsonObject g = item(gemm, i, root, "gemm");
            r.gemm.push_back({ shortText(g, "device"), precisionFrom(g), within(g, "threads", 0, 1 << 20, 0),
                within(g, "n", 1, 1 << 20), within(g, "gflops", 0.0, 1e12) });
        }
        const auto& rows = list(root, "rows", kMaxRows);
        for (size_t i = 0; i < rows.size(); ++i) {
            const JsonObject x = item(rows, i, root, "rows");
            BenchRow row;
            row.device = shortText(x, "device");
            row.precision = precisionFrom(x);
            row.threads = within(x, "threads", 0, 1 << 20);
            row.batch = within(x, "batch", 1, 1 << 24);
            const std::string unit = field<std::string>(x, "unit");
            const auto u = parseBenchUnit(unit);
            if (!u)
                throw FieldError(
                    "unknown unit '" + printable(unit) + "' (" + joinNames(benchUnitNames()) + ")", pathOf(x, "unit"));
            row.unit = *u;
            row.time = timingFrom(section(x, "time"));
            row.tokensPerSecond = within(x, "tokens_per_second", 0.0, 1e15);
            row.gflops = within(x, "gflops", 0.0, 1e12);
            row.gemmFraction = within(x, "gemm_fraction", 0.0, 1e6);
            row.peakMemoryBytes = within(x, "peak_memory_bytes", int64_t(0), int64_t(1) << 60);
            if (!x.json.contains("energy_joules"))
                throw FieldError("'" + pathOf(x, "energy_joules") + "' is missing (null when not measured)", x.path);
            row.energyJoules = x.json.at("energy_joules").is_null() ? -1 : within(x, "energy_joules", 0.0, 1e15);
            row.energySource = shortText(x, "energy_source", "not available");
            row.warmupRuns = within(x, "warmup_runs", 0, 1 << 30, 0);
            row.lstmDtype = shortText(x, "lstm_dtype");
            row.tf32 = field<bool>(x, "tf32", row.precision == BenchPrecision::TF32);
            r.rows.push_back(row);
        }
        const auto& races = list(root, "races", kMaxListItems, true);
        for (size_t i = 0; i < races.size(); ++i) {
            const JsonObject c = item(races, i, root, "races");
            RaceCurve curve;
            curve.device = shortText(c, "device");
            curve.precision = precisionFrom(c);
            curve.threads = within(c, "threads", 0, 1 << 20, 0);
            const auto& points = list(c, "points", kMaxSamples);
            for (size_t k = 0; k < points.size(); ++k) {
                const JsonObject p = item(points, k, c, "points");
                // A loss is null where a run diverged (NaN is written so); the chart leaves it out.
                auto loss = [&](const char* key) {
                    if (!p.json.contains(key))
                        throw FieldError("'" + pathOf(p, key) + "' is missing", p.path);
                    return p.json.at(key).is_null() ? NAN : within(p, key, -1e30, 1e30);
                };
                curve.points.push_back({ within(p, "seconds", 0.0, 1e9), loss("loss"), loss("validation_loss") });
            }
            r.races.push_back(curve);
        }
        r.notes = texts(root, "notes");
    } catch (const FieldError& e) {
        throw fieldError(file, text, "bad benchmark report: ", e);
    } catch (const nlohmann::json::exception& e) {
        throw Error(file, 0, "bad benchmark report: " + jsonMessage(e));
    }
    return r;
}

BenchReport readBenchReport(const std::string& path)
{
    return benchReportFromJson(text::readFile(path, kMaxReportBytes), path);
}

} // namespace chatbench
