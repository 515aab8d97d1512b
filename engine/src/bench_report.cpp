// The benchmark report's JSON form, schema "chatbench-bench" (written and read here only).
#include "chatbench/bench.h"

#include "chatbench/error.h"
#include "jsondoc.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace chatbench {

namespace {
using nlohmann::ordered_json;

ordered_json timingJson(const Timing& t)
{
    return { { "median_s", t.median }, { "p10_s", t.p10 }, { "p90_s", t.p90 }, { "min_s", t.min }, { "max_s", t.max },
        { "samples_s", t.samples } };
}

BenchPrecision precisionFrom(const nlohmann::json& j, const std::string& file)
{
    const std::string name = j.at("precision").get<std::string>();
    const auto p = parseBenchPrecision(name);
    if (!p)
        throw Error(file, 0, "unknown precision '" + name + "' (" + joinNames(benchPrecisionNames()) + ")");
    return *p;
}

Timing timingFrom(const nlohmann::json& j)
{
    Timing t = summarise(j.at("samples_s").get<std::vector<double>>());
    t.median = j.at("median_s").get<double>();
    t.p10 = j.at("p10_s").get<double>();
    t.p90 = j.at("p90_s").get<double>();
    t.min = j.at("min_s").get<double>();
    t.max = j.at("max_s").get<double>();
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
    std::string s = (r.corpus.empty() ? std::string("unnamed corpus") : r.corpus) + " (" + std::to_string(r.corpusPairs)
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
        r.schemaVersion = j.at("schema_version").get<int>();
        if (r.schemaVersion > BenchReport::kSchemaVersion || r.schemaVersion < 1)
            throw Error(file, 0,
                "report schema version " + std::to_string(r.schemaVersion) + " is not supported (this build reads 1.."
                    + std::to_string(BenchReport::kSchemaVersion) + ")");
        r.created = j.value("created", "");
        r.label = j.value("label", "");
        const auto& m = j.at("machine");
        r.machine.cpuModel = m.value("cpu_model", "");
        r.machine.cpuFlags = m.value("cpu_flags", std::vector<std::string> {});
        r.machine.cores = m.value("cores", 0);
        r.machine.memoryBytes = m.value("memory_bytes", int64_t(0));
        r.machine.gpuName = m.value("gpu_name", "");
        r.machine.gpuDriver = m.value("gpu_driver", "");
        r.machine.torch = m.value("torch", "");
        r.machine.cuda = m.value("cuda", "");
        r.machine.cudnn = m.value("cudnn", "");
        r.machine.onednn = m.value("onednn", "");
        r.preset = j.value("preset", "");
        const auto& md = j.at("model");
        r.model.vocabSize = md.at("vocab_size").get<int64_t>();
        r.model.embedDim = md.at("embed_dim").get<int>();
        r.model.hidden = md.at("hidden").get<int>();
        r.model.layers = md.at("layers").get<int>();
        r.model.attention = md.value("attention", false);
        r.model.maxSourceLength = md.value("max_source_length", 22);
        r.model.maxTargetLength = md.value("max_target_length", 74);
        r.corpus = j.at("corpus").value("name", "");
        r.corpusPairs = j.at("corpus").value("pairs", int64_t(0));
        const std::string fingerprint = j.at("corpus").value("fingerprint", "");
        if (!fingerprint.empty()) {
            size_t used = 0;
            try {
                r.corpusFingerprint = std::stoull(fingerprint, &used, 16);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != fingerprint.size() || fingerprint.size() > 16)
                throw Error(file, 0, "corpus.fingerprint is not a 64-bit hexadecimal number: " + fingerprint);
        }
        for (const auto& g : j.at("gemm"))
            r.gemm.push_back({ g.at("device").get<std::string>(), precisionFrom(g, file), g.value("threads", 0),
                g.at("n").get<int>(), g.at("gflops").get<double>() });
        for (const auto& x : j.at("rows")) {
            BenchRow row;
            row.device = x.at("device").get<std::string>();
            row.precision = precisionFrom(x, file);
            row.threads = x.at("threads").get<int>();
            row.batch = x.at("batch").get<int>();
            const std::string unit = x.at("unit").get<std::string>();
            const auto u = parseBenchUnit(unit);
            if (!u)
                throw Error(file, 0, "unknown unit '" + unit + "' (" + joinNames(benchUnitNames()) + ")");
            row.unit = *u;
            row.time = timingFrom(x.at("time"));
            row.tokensPerSecond = x.at("tokens_per_second").get<double>();
            row.gflops = x.at("gflops").get<double>();
            row.gemmFraction = x.at("gemm_fraction").get<double>();
            row.peakMemoryBytes = x.at("peak_memory_bytes").get<int64_t>();
            row.energyJoules = x.at("energy_joules").is_null() ? -1 : x.at("energy_joules").get<double>();
            row.energySource = x.value("energy_source", "not available");
            row.warmupRuns = x.value("warmup_runs", 0);
            row.lstmDtype = x.value("lstm_dtype", "");
            row.tf32 = x.value("tf32", row.precision == BenchPrecision::TF32);
            r.rows.push_back(row);
        }
        for (const auto& c : j.value("races", nlohmann::json::array())) {
            RaceCurve curve;
            curve.device = c.at("device").get<std::string>();
            curve.precision = precisionFrom(c, file);
            curve.threads = c.value("threads", 0);
            for (const auto& p : c.at("points"))
                curve.points.push_back({ p.at("seconds").get<double>(), p.at("loss").get<double>(),
                    p.at("validation_loss").is_null() ? NAN : p.at("validation_loss").get<double>() });
            r.races.push_back(curve);
        }
        r.notes = j.value("notes", std::vector<std::string> {});
    } catch (const nlohmann::json::exception& e) {
        throw Error(file, 0, "bad benchmark report: " + jsonMessage(e));
    }
    return r;
}

} // namespace chatbench
