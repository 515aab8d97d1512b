#include "chatbench/doctor.h"

#include "chatbench/devices.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "chatbench/trainer.h"
#include "tracejson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

// A fresh temporary folder, removed with everything in it when the scope ends.
class ScratchDir {
public:
    // chatbench-doctor-<pid>-<n>: a doctor stopped by a signal leaves it, and the next removes it.
    ScratchDir()
    {
        const std::string folder = temporaryFolder("the doctor trains a tiny model there");
        removeDeadProcessesFiles(folder, "chatbench-doctor-", "", DeadProcesses::ScratchFolders);
        for (int n = 0;; ++n) {
            m_path = (fs::path(folder) / processScratchName("chatbench-doctor-", static_cast<uint64_t>(n))).string();
            if (::mkdir(m_path.c_str(), 0700) == 0)
                return;
            if (errno != EEXIST || n >= 1000)
                throw Error(m_path, 0,
                    "cannot create a temporary folder for the doctor's tiny model (" + std::string(std::strerror(errno))
                        + "): set TMPDIR to a writable folder");
        }
    }
    ~ScratchDir()
    {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

std::string fixed(double v, int digits)
{
    std::ostringstream o;
    o << std::fixed << std::setprecision(digits) << v;
    return o.str();
}

} // namespace

double parityTolerance(bool tf32, double largestLogit)
{
    return (tf32 ? 1e-2 : 1e-4) * std::max(1.0, largestLogit);
}

DoctorParity compareParity(const Reply& a, const Reply& b, bool tf32)
{
    DoctorParity p;
    p.ran = true;
    p.tf32 = tf32;
    p.cpuReply = a.text;
    p.cudaReply = b.text;
    p.repliesAgree = a.ids == b.ids;
    double largest = 0;
    size_t compared = 0;
    bool nearTie = false;
    const size_t n = std::min(a.trace.steps.size(), b.trace.steps.size());
    for (size_t t = 0; t < n; ++t) {
        const auto& la = a.trace.steps[t].logits;
        const auto& lb = b.trace.steps[t].logits;
        if (la.empty() || la.size() != lb.size())
            break;
        ++compared;
        for (size_t k = 0; k < la.size(); ++k) {
            p.maxLogitDiff = std::max(p.maxLogitDiff, static_cast<double>(std::abs(la[k] - lb[k])));
            largest = std::max(largest, static_cast<double>(std::abs(la[k])));
        }
        if (a.trace.steps[t].chosenId != b.trace.steps[t].chosenId) {
            // Past a divergence the inputs differ. A near tie: the two chosen tokens' logits on the
            // first device so close that rounding may pick either.
            const auto ca = static_cast<size_t>(a.trace.steps[t].chosenId),
                       cb = static_cast<size_t>(b.trace.steps[t].chosenId);
            nearTie = ca < la.size() && cb < la.size() && std::abs(la[ca] - la[cb]) <= parityTolerance(tf32, largest);
            break;
        }
    }
    p.tolerance = parityTolerance(tf32, largest);
    std::ostringstream v;
    v << "max |Δlogit| " << std::scientific << std::setprecision(2) << p.maxLogitDiff << " over " << compared
      << " step(s), tolerance " << p.tolerance << (tf32 ? " (TF32 maths)" : " (IEEE fp32)");
    if (compared == 0) {
        p.passed = false;
        v << ": no logits to compare";
    } else if (p.maxLogitDiff > p.tolerance) {
        p.passed = false;
        v << ": FAIL, the devices disagree beyond the tolerance";
    } else if (!p.repliesAgree && !nearTie) {
        p.passed = false;
        v << ": FAIL, the greedy replies differ without a near tie";
    } else {
        p.passed = true;
        v << (p.repliesAgree ? ": pass, the greedy replies agree"
                             : ": pass, the replies part at a near tie (top two logits within the tolerance)");
    }
    p.verdict = v.str();
    return p;
}

DoctorReport runDoctor()
{
    requireThreadsStart(torch::get_num_threads()); // before the bf16 timing's parallel regions
    DoctorReport d;
    d.environment = environmentInfo();
    d.devices = listDevices(/*timeBf16=*/true);

    // The handoff checks on a tiny model trained for a few steps in a temporary run.
    const ScratchDir scratch;
    Corpus tiny;
    const std::vector<std::pair<std::string, std::string>> lines = { { "hello", "hi there" },
        { "how are you", "i am fine" }, { "what is your name", "i am chatbench" }, { "bye", "see you later" } };
    for (const auto& [p, r] : lines)
        tiny.pairs.push_back({ p, r, "doctor", 0 });
    TrainConfig cfg = preset("quick");
    cfg.model.embedDim = 16;
    cfg.model.hidden = 24;
    cfg.epochs = 60;
    cfg.learningRate = 1e-2;
    cfg.batchSize = 4;
    cfg.validationFraction = 0;
    const std::string run = scratch.path() + "/run";
    TrainResult tr;
    try {
        tr = train(cfg, tiny, run, {});
    } catch (const Error& e) { // a full or read-only temporary folder: said with where to go instead
        throw Error(e.file(), e.line(),
            e.message() + " (the doctor trains a tiny model in a temporary folder; TMPDIR chooses another)");
    }
    // Training set the process' maths mode (TrainConfig::tf32): report the one the checks run with.
    const EnvironmentInfo after = environmentInfo();
    d.environment.tf32Matmul = after.tf32Matmul;
    d.environment.tf32Lstm = after.tf32Lstm;
    d.tinySteps = tr.steps;
    d.tinyLoss = tr.finalTrainLoss;
    d.question = "how are you";

    const Chatbot bot = Chatbot::load(run);
    DecodeOptions good;
    DecodeOptions broken;
    broken.handoff = HandoffMode::ZeroInit;
    const Reply rGood = bot.reply(d.question, good);
    const Reply rBroken = bot.reply(d.question, broken);
    d.reply = rGood.text;
    d.correct = rGood.trace.checks;
    d.zeroInit = rBroken.trace.checks;
    d.healthy = d.correct.handoffEqual && d.correct.stateCarried && d.correct.teacherForcedEqual
        && !d.zeroInit.handoffEqual && !d.zeroInit.teacherForcedEqual;

    // CPU↔CUDA parity: the same weights on both devices, the same question.
    if (d.environment.cudaAvailable) {
        const Chatbot gpu = Chatbot::load(run, "cuda:0");
        DecodeOptions withLogits;
        withLogits.recordLogits = true;
        const Reply a = bot.reply(d.question, withLogits);
        const Reply b = gpu.reply(d.question, withLogits);
        d.parity = compareParity(a, b, d.environment.tf32Matmul || d.environment.tf32Lstm);
        d.healthy = d.healthy && d.parity.passed;
    } else {
        d.parity.skipped = "no CUDA device available";
    }
    return d;
}

std::string toJson(const DoctorReport& d)
{
    const EnvironmentInfo& env = d.environment;
    nlohmann::ordered_json j;
    j["torch"] = env.torchVersion;
    j["cuda_built"] = env.cudaBuilt;
    j["cuda_available"] = env.cudaAvailable;
    j["cuda_devices"] = env.cudaDeviceCount;
    j["cuda_version"] = env.cudaVersion;
    j["cudnn_version"] = env.cudnnVersion;
    j["onednn_version"] = env.onednnVersion;
    j["threads"] = env.threads;
    j["interop_threads"] = env.interopThreads;
    j["cublas_workspace_config"] = env.cublasWorkspaceConfig;
    j["tf32"] = { { "cublas_matmul", env.tf32Matmul }, { "cudnn_lstm", env.tf32Lstm } };
    auto& dj = j["devices"] = nlohmann::ordered_json::array();
    for (const auto& dev : d.devices) {
        nlohmann::ordered_json pj;
        for (const auto& p : dev.precisions)
            pj[precisionName(p.precision)] = p.supported
                ? nlohmann::ordered_json(p.reason.empty() ? "ok" : "ok, " + p.reason)
                : nlohmann::ordered_json(p.reason);
        dj.push_back(
            { { "id", dev.id }, { "name", dev.name }, { "memory_bytes", dev.memoryBytes }, { "precisions", pj } });
    }
    j["handoff"] = { { "train_loss", d.tinyLoss }, { "reply", d.reply }, { "checks", checksJson(d.correct) },
        { "zero_init_checks", checksJson(d.zeroInit) }, { "healthy", d.healthy } };
    j["cpu_cuda_parity"] = d.parity.ran ? nlohmann::ordered_json { { "passed", d.parity.passed },
        { "max_logit_diff", d.parity.maxLogitDiff }, { "tolerance", d.parity.tolerance }, { "tf32", d.parity.tf32 },
        { "replies_agree", d.parity.repliesAgree }, { "cpu_reply", d.parity.cpuReply },
        { "cuda_reply", d.parity.cudaReply }, { "verdict", d.parity.verdict } }
                                        : nlohmann::ordered_json { { "skipped", d.parity.skipped } };
    j["healthy"] = d.healthy;
    // Paths that are not UTF-8 (file names are bytes) are shown with U+FFFD, not refused.
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string describe(const DoctorReport& d)
{
    const EnvironmentInfo& env = d.environment;
    std::ostringstream o;
    o << "torch        " << env.torchVersion << "\n"
      << "CUDA         " << (env.cudaBuilt ? "built in (libtorch_cuda linked)" : "not built in") << ", "
      << (env.cudaAvailable ? std::to_string(env.cudaDeviceCount) + " device(s) available" : "no device available")
      << "\n"
      << "CUDA runtime " << (env.cudaVersion.empty() ? "unknown" : env.cudaVersion) << "\n"
      << "cuDNN        " << (env.cudnnVersion.empty() ? "unknown" : env.cudnnVersion) << "\n"
      << "oneDNN       " << (env.onednnVersion.empty() ? "unknown" : env.onednnVersion) << "\n"
      << "threads      " << env.threads << " intra-op, " << env.interopThreads << " inter-op\n";
    for (const auto& dev : d.devices) {
        o << "device       " << dev.id << "  " << dev.name << "  "
          << fixed(static_cast<double>(dev.memoryBytes) / (1 << 30), 1) << " GiB\n";
        for (const auto& p : dev.precisions)
            o << "             " << precisionName(p.precision) << ": "
              << (p.supported ? (p.reason.empty() ? std::string("ok") : "ok, " + p.reason) : "no — " + p.reason)
              << "\n";
    }
    o << "handoff      tiny model (" << d.tinySteps << " steps, loss " << fixed(d.tinyLoss, 3) << ") replies '"
      << d.reply << "'\n"
      << "  correct    " << describe(d.correct) << "\n"
      << "  zero-init  " << describe(d.zeroInit) << "\n"
      << "parity       "
      << (d.parity.ran ? "cpu vs cuda:0 " + d.parity.verdict
                     + (d.parity.repliesAgree ? std::string()
                                              : " ('" + d.parity.cpuReply + "' vs '" + d.parity.cudaReply + "')")
                       : "skipped: " + d.parity.skipped)
      << "\n"
      << "CUBLAS_WORKSPACE_CONFIG "
      << (env.cublasWorkspaceConfig.empty() ? std::string("unset") : env.cublasWorkspaceConfig) << "; TF32 cuBLAS "
      << (env.tf32Matmul ? "on" : "off") << ", cuDNN LSTM " << (env.tf32Lstm ? "on" : "off") << "\n";
    const bool checksOk = d.correct.handoffEqual && d.correct.stateCarried && d.correct.teacherForcedEqual
        && !d.zeroInit.handoffEqual && !d.zeroInit.teacherForcedEqual;
    if (d.healthy)
        o << "healthy: the checks pass with the handoff and catch the zero-state bug"
          << (d.parity.ran ? ", and the CPU and the GPU agree" : "") << "\n";
    else if (!checksOk)
        o << "PROBLEM: the handoff checks did not behave as expected\n";
    else
        o << "PROBLEM: the CPU and the GPU disagree (see parity above)\n";
    return o.str();
}

} // namespace chatbench
