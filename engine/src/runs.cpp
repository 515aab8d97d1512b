#include "chatbench/runs.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "jsondoc.h"
#include "runstate.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kVocabFile = "vocab.json";
constexpr const char* kStateFile = "state.json";
constexpr const char* kMetricsFile = "metrics.csv";

// metrics.csv columns, in the order they are written; read back by name.
constexpr const char* kStepsFile = "steps.csv";
constexpr const char* kMetricsColumns[] = { "epoch", "step", "train_loss", "validation_loss", "validation_accuracy",
    "perplexity", "seconds", "tokens_per_second", "elapsed_seconds" };

nlohmann::json numberOrNull(double v)
{
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// A number that may be null (NaN and infinities are written as null).
double numberOr(const JsonObject& j, const char* key, double fallback)
{
    auto it = j.json.find(key);
    return it == j.json.end() || it->is_null() ? fallback : field<double>(j, key);
}

bool present(const fs::path& p)
{
    std::error_code ec;
    return fs::exists(p, ec);
}

// How openOwnFile went.
enum class OwnFile { Opened, SymbolicLink, HardLink, NotPlain, Failed };

// Opens one of a run's own files (never through a symbolic link, never waiting on a FIFO) and
// keeps it only when it is a plain file with one name: through a link, a write would change
// another file. `fd` is open only when it says Opened (then `size` is the file's size); with
// Failed, errno says why.
OwnFile openOwnFile(const std::string& path, int flags, int& fd, int64_t* size = nullptr)
{
    fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return errno == ELOOP ? OwnFile::SymbolicLink : errno == ENXIO ? OwnFile::NotPlain : OwnFile::Failed;
    struct stat st { };
    const bool plain = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (plain && st.st_nlink == 1) {
        // Readable and writable by its owner whatever the umask (444 made the lock and steps.csv
        // write-only, and the run's next writer could not open them).
        if ((flags & O_CREAT) && st.st_uid == ::geteuid() && (st.st_mode & 0600) != 0600)
            (void)::fchmod(fd, (st.st_mode & 07777) | 0600);
        if (size)
            *size = static_cast<int64_t>(st.st_size);
        return OwnFile::Opened;
    }
    ::close(fd);
    fd = -1;
    return plain ? OwnFile::HardLink : OwnFile::NotPlain;
}

} // namespace

std::string configPath(const std::string& runDir)
{
    return (fs::path(runDir) / kConfigFile).string();
}

std::string vocabPath(const std::string& runDir)
{
    return (fs::path(runDir) / kVocabFile).string();
}

std::string statePath(const std::string& runDir)
{
    return (fs::path(runDir) / kStateFile).string();
}

std::string checkpointName(int64_t step)
{
    char name[64];
    std::snprintf(name, sizeof name, "ckpt-%08lld.pt", static_cast<long long>(step));
    return name;
}

namespace {

std::string stateJson(const RunState& state);

} // namespace

void saveState(const std::string& runDir, const RunState& state)
{
    writeFileAtomic(statePath(runDir), stateJson(state));
}

std::string checkpointStatePath(const std::string& runDir, const std::string& checkpoint)
{
    return (fs::path(runDir) / (fs::path(checkpoint).stem().string() + ".json")).string();
}

void saveCheckpointState(const std::string& runDir, const RunState& state)
{
    writeFileAtomic(checkpointStatePath(runDir, state.checkpoint), stateJson(state));
}

std::string bestStatePath(const std::string& runDir)
{
    return (fs::path(runDir) / "best.json").string();
}

void saveBestState(const std::string& runDir, const RunState& state)
{
    writeFileAtomic(bestStatePath(runDir), stateJson(state));
}

namespace {

// A folder that can be entered but not listed (mode 300) looks empty: every reader of a run's
// listing refuses it with this.
Error unlistedFolder(const std::string& runDir, const std::error_code& ec)
{
    return Error(runDir, 0,
        "cannot list the folder (" + ec.message() + "): its run's files could not be found"
            + (ec == std::errc::permission_denied ? "; give read permission on it (chmod u+r)" : ""));
}

} // namespace

std::vector<std::string> checkpointFiles(const std::string& runDir)
{
    std::vector<std::pair<long long, std::string>> found;
    std::error_code ec;
    for (fs::directory_iterator it(runDir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        // ckpt-<step, at least 8 digits>.pt, as checkpointName writes it (steps past 99 999 999 have more).
        const size_t digits = name.size() - std::min(name.size(), std::string_view("ckpt-.pt").size());
        if (digits < 8 || digits > 18 || !name.starts_with("ckpt-") || !name.ends_with(".pt"))
            continue;
        const std::string number = name.substr(5, digits);
        if (number.find_first_not_of("0123456789") != std::string::npos)
            continue;
        const long long step = std::stoll(number);
        if (name == checkpointName(step))
            found.emplace_back(step, name);
    }
    // No folder at all (or a file) holds no checkpoints; one that cannot be listed is not "none".
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        throw unlistedFolder(runDir, ec);
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> out;
    for (auto& f : found)
        out.push_back(std::move(f.second));
    return out;
}

namespace {

std::string stateJson(const RunState& state)
{
    nlohmann::ordered_json j;
    j["format"] = "chatbench-state";
    j["version"] = 1;
    j["checkpoint"] = state.checkpoint;
    if (state.haveCrc)
        j["checkpoint_crc32"] = state.checkpointCrc;
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
    // Fingerprints as hex text: JSON tools that read numbers as doubles keep them.
    const auto hex = [](uint64_t v) {
        char text[17];
        std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
        return std::string(text);
    };
    j["corpus_fingerprint"] = hex(state.corpusFingerprint);
    if (state.vocabFingerprint != 0)
        j["vocab_fingerprint"] = hex(state.vocabFingerprint);
    j["loss_scale"] = state.lossScale;
    j["loss_scale_good_steps"] = state.lossScaleGoodSteps;
    if (!state.recipe.empty())
        j["recipe"] = nlohmann::ordered_json::parse(state.recipe);
    auto& hist = j["history"] = nlohmann::ordered_json::array();
    for (const auto& m : state.history)
        hist.push_back({ { "epoch", m.epoch }, { "step", m.step }, { "train_loss", numberOrNull(m.trainLoss) },
            { "validation_loss", numberOrNull(m.validationLoss) },
            { "validation_accuracy", numberOrNull(m.validationAccuracy) }, { "perplexity", numberOrNull(m.perplexity) },
            { "seconds", m.seconds }, { "tokens_per_second", m.tokensPerSecond },
            { "elapsed_seconds", m.elapsedSeconds } });
    return j.dump(1) + "\n";
}

} // namespace

RunState loadState(const std::string& runDir, std::string* note)
{
    const std::string path = statePath(runDir);
    std::optional<Error> failed;
    bool edited = false; // JSON, but not a state a run writes: said, not replaced
    if (present(path)) {
        try {
            return loadStateFile(path);
        } catch (const Error& e) {
            failed = e;
            std::error_code ec;
            try {
                edited = fs::is_regular_file(path, ec)
                    && nlohmann::json::accept(text::readFile(path, text::kMaxJsonFileBytes));
            } catch (const Error&) { // too large to be one a run wrote
            }
        }
    }
    // state.json lost or damaged (a crash can leave it empty): each checkpoint has its state beside
    // it (ckpt-<step>.json), written before state.json named it; the newest whose checkpoint is
    // there stands in.
    std::string skipped; // a newer checkpoint without a usable state, said in the note
    for (const std::string& ckpt : checkpointFiles(runDir)) {
        RunState s;
        try {
            s = loadStateFile(checkpointStatePath(runDir, ckpt));
        } catch (const Error&) {
            if (skipped.empty())
                skipped = ckpt;
            continue;
        }
        if (s.checkpoint != ckpt)
            continue;
        const std::string kept = fs::path(checkpointStatePath(runDir, ckpt)).filename().string()
            + (skipped.empty() ? std::string()
                               : " (the newer " + skipped + " has no readable state beside it, "
                        + fs::path(checkpointStatePath(runDir, skipped)).filename().string() + ")");
        if (edited)
            throw Error(failed->file(), failed->line(),
                failed->message() + "; " + kept
                    + " holds the state saved with the newest checkpoint that has one (step " + std::to_string(s.step)
                    + "): copy it over state.json to continue from there");
        if (note)
            *note = (failed ? std::string(failed->what()) : path + ": missing") + "; using " + kept
                + ", the state saved with the newest checkpoint that has one (step " + std::to_string(s.step) + ")";
        return s;
    }
    if (failed)
        throw *failed;
    std::error_code ec;
    if (fs::exists(bestStatePath(runDir), ec)) // the checkpoints' states are gone, the best weights' is not
        throw Error(runDir, 0,
            "no state.json and no checkpoint with its state: only the best weights are left (best.json); "
            "chat --weights best answers from them");
    throw Error(runDir, 0, "not a chatbench run (no state.json): has it trained for at least one checkpoint?");
}

RunState loadStateFile(const std::string& path)
{
    const std::string bytes = text::readFile(path, text::kMaxJsonFileBytes);
    const nlohmann::json j = parseDocument(bytes, path, "chatbench-state", "not a chatbench state.json");
    RunState s;
    try {
        const JsonObject root { j, "" };
        s.checkpoint = field<std::string>(root, "checkpoint");
        if (j.contains("checkpoint_crc32")) {
            s.checkpointCrc = field<uint32_t>(root, "checkpoint_crc32");
            s.haveCrc = true;
        }
        s.epoch = field<int>(root, "epoch");
        s.batchInEpoch = field<int64_t>(root, "batch_in_epoch");
        s.step = field<int64_t>(root, "step");
        s.epochLossSum = field<double>(root, "epoch_loss_sum");
        s.epochTokens = field<int64_t>(root, "epoch_tokens");
        s.epochSeconds = field<double>(root, "epoch_seconds", 0.0);
        s.elapsedSeconds = field<double>(root, "elapsed_seconds");
        s.bestValidationLoss = numberOr(root, "best_validation_loss", NAN);
        s.haveBest = field<bool>(root, "have_best");
        if (!s.haveBest && std::isnan(s.bestValidationLoss))
            s.bestValidationLoss = 0; // none yet: written as 0 (runs before NaN was written as null)
        s.badEpochs = field<int>(root, "bad_epochs");
        s.finished = field<bool>(root, "finished");
        const auto fromHex = [](const std::string& hex, const char* name) {
            if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
                throw FieldError(
                    std::string("'") + name + "' must be 16 hex digits, not \"" + printable(hex.substr(0, 40)) + "\"",
                    name);
            return static_cast<uint64_t>(std::stoull(hex, nullptr, 16));
        };
        // Hex text; a number in runs from before it was written so (compared with
        // sameCorpusFingerprint, as a JSON tool may have rounded it).
        s.corpusFingerprint = j.contains("corpus_fingerprint") && j["corpus_fingerprint"].is_string()
            ? fromHex(j["corpus_fingerprint"].get<std::string>(), "corpus_fingerprint")
            : field<uint64_t>(root, "corpus_fingerprint");
        if (const std::string hex = field<std::string>(root, "vocab_fingerprint", std::string()); !hex.empty())
            s.vocabFingerprint = fromHex(hex, "vocab_fingerprint");
        s.lossScale = field<double>(root, "loss_scale", 65536.0);
        s.lossScaleGoodSteps = field<int64_t>(root, "loss_scale_good_steps", int64_t(0));
        if (j.contains("recipe")) {
            // A few dozen settings, each a number, true/false or a name: anything else is not one
            // a run wrote (and a huge one would make every resume slow).
            const auto& r = j["recipe"];
            bool ok = r.is_object() && r.size() <= 256;
            for (auto it = r.begin(); ok && it != r.end(); ++it)
                ok = it.key().size() <= 64 && it.key().find('\0') == std::string::npos
                    && (it->is_number() || it->is_boolean()
                        || (it->is_string() && it->get_ref<const std::string&>().size() <= 256));
            if (!ok)
                throw FieldError("'recipe' must be an object of at most 256 settings, each a number, true or false, "
                                 "or a short name",
                    "recipe");
            s.recipe = r.dump();
        }
        const auto& history = j.contains("history") ? j["history"] : nlohmann::json();
        if (!history.is_array())
            throw FieldError("'history' must be a list", "history");
        for (size_t i = 0; i < history.size(); ++i) {
            const JsonObject h { history[i], "history[" + std::to_string(i) + "]" };
            EpochMetrics m;
            m.epoch = field<int>(h, "epoch");
            m.step = field<int64_t>(h, "step");
            m.trainLoss = numberOr(h, "train_loss", NAN);
            m.validationLoss = numberOr(h, "validation_loss", NAN);
            m.validationAccuracy = numberOr(h, "validation_accuracy", NAN);
            m.perplexity = numberOr(h, "perplexity", NAN);
            // JSON has no infinity: a perplexity past the doubles (a finite loss above ~709) is
            // written as null; it is the losses' exp again, not NaN (metrics.csv is rewritten from it).
            if (std::isnan(m.perplexity)) {
                const double again = std::exp(std::isfinite(m.validationLoss) ? m.validationLoss : m.trainLoss);
                if (std::isinf(again))
                    m.perplexity = again;
            }
            m.seconds = field<double>(h, "seconds");
            m.tokensPerSecond = field<double>(h, "tokens_per_second");
            m.elapsedSeconds = field<double>(h, "elapsed_seconds");
            s.history.push_back(m);
        }
    } catch (const FieldError& e) {
        throw fieldError(path, bytes, "bad state: ", e);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path, 0, "bad state: " + jsonMessage(e));
    }
    // Every state on disk names its checkpoint ("" was read as the run folder: "is a folder, not a
    // file", naming neither this file nor the field; found by an outside pass).
    if (s.checkpoint.empty() || s.checkpoint.find('/') != std::string::npos
        || s.checkpoint.find("..") != std::string::npos)
        throw fieldError(path, bytes, "bad state: ",
            FieldError(s.checkpoint.empty() ? "'checkpoint' is empty: it names the checkpoint file ("
                        + checkpointName(std::max<int64_t>(0, s.step)) + " for its step)"
                                            : "checkpoint name must be a file in the run folder",
                "checkpoint"));
    // Every number is used as a count, an index or a scale: out of range is a corrupt file.
    auto need = [&](bool ok, const char* field) {
        if (!ok)
            throw fieldError(
                path, bytes, "bad state: ", FieldError(std::string("'") + field + "' is out of range", field));
    };
    // Seconds are added to and converted to clock durations: a billion (31 years) is the most.
    auto seconds = [](double v) { return v >= 0 && v <= 1e9; };
    need(s.epoch >= 0 && s.epoch <= 100000, "epoch");
    need(s.batchInEpoch >= 0, "batch_in_epoch");
    need(s.step >= 0, "step");
    need(std::isfinite(s.epochLossSum) && s.epochLossSum >= 0, "epoch_loss_sum");
    need(s.epochTokens >= 0, "epoch_tokens");
    need(seconds(s.epochSeconds), "epoch_seconds");
    need(seconds(s.elapsedSeconds), "elapsed_seconds");
    need(std::isfinite(s.bestValidationLoss), "best_validation_loss");
    need(s.badEpochs >= 0, "bad_epochs");
    need(std::isfinite(s.lossScale) && s.lossScale > 0, "loss_scale");
    need(s.lossScaleGoodSteps >= 0, "loss_scale_good_steps");
    need(s.history.size() <= 100000, "history");
    for (const auto& m : s.history)
        need(m.epoch >= 0 && m.step >= 0 && seconds(m.seconds) && seconds(m.elapsedSeconds)
                && std::isfinite(m.tokensPerSecond),
            "history");
    need(s.batchInEpoch <= s.step, "batch_in_epoch");
    need(!s.haveBest || s.bestValidationLoss >= 0, "best_validation_loss"); // a cross-entropy
    // The fields agree as a run writes them: the checkpoint named is the one of `step`, and the
    // history holds one entry per finished epoch, in order, none past `step`.
    auto inconsistent = [&](const std::string& what) { throw Error(path, 0, "bad state: " + what); };
    const std::string ours = checkpointName(s.step);
    if (!s.checkpoint.empty() && s.checkpoint != ours && s.checkpoint != "best-" + ours.substr(5))
        inconsistent("'step' " + std::to_string(s.step) + " is not the step of its checkpoint '"
            + printable(s.checkpoint) + "' (" + ours + " would be)");
    if (s.history.size() != static_cast<size_t>(s.epoch))
        inconsistent("'history' holds " + std::to_string(s.history.size()) + " epoch(s) where 'epoch' says "
            + std::to_string(s.epoch) + " are done");
    for (size_t i = 0; i < s.history.size(); ++i) {
        const EpochMetrics& m = s.history[i];
        if (m.epoch != static_cast<int>(i) || m.step > s.step || (i > 0 && m.step < s.history[i - 1].step))
            inconsistent("'history[" + std::to_string(i) + "]' (epoch " + std::to_string(m.epoch) + ", step "
                + std::to_string(m.step) + ") is out of order or past 'step' " + std::to_string(s.step));
    }
    s.file = path;
    return s;
}

namespace {

// "in use by process N", N as the lock's holder wrote it.
Error inUse(const std::string& runDir, int lockFd)
{
    char buf[32] = {};
    const ssize_t n = ::pread(lockFd, buf, sizeof buf - 1, 0);
    const std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
    return Error(runDir, 0,
        "in use by process " + pid.substr(0, pid.find('\n'))
            + " (a training, resume or import is writing this run); wait for it or stop it");
}

// Removes the folders above `runDir` up to `made` (the topmost a start made), each while it is
// empty; nothing when `made` is not on the way to `runDir` (the run folder moved).
void removeFoldersMadeOnTheWay(const std::string& runDir, const std::string& made)
{
    const fs::path top = fs::path(made).lexically_normal();
    std::vector<fs::path> above;
    for (fs::path p = fs::path(runDir).lexically_normal(); p.has_parent_path() && p != p.parent_path();) {
        if (p == top)
            break;
        p = p.parent_path();
        above.push_back(p);
    }
    if (above.empty() || above.back() != top)
        return;
    for (const fs::path& p : above) {
        std::error_code ec;
        if (!fs::remove(p, ec))
            return; // not empty (another start's files), or not ours to remove
    }
}

// " (FOLDER's mode is 0555, without write permission for this user: …)" when this user cannot
// write in `dir`; empty when it can (another cause).
std::string unwritableFolderNote(const std::string& dir, const std::string& what)
{
    struct stat st { };
    if (::faccessat(AT_FDCWD, dir.c_str(), W_OK, AT_EACCESS) == 0 || ::stat(dir.c_str(), &st) != 0)
        return {};
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return " (" + what + "'s mode is " + mode
        + ", without write permission for this user: give it write permission, or choose another folder; a umask "
          "such as 222 makes new folders so)";
}

} // namespace

void requireRunNotInUse(const std::string& runDir)
{
    // Never waiting: a FIFO put there would block open() (RunLock refuses anything not plain).
    const int fd = ::open((fs::path(runDir) / ".lock").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st { };
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return;
    }
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held) {
        const Error busy = inUse(runDir, fd);
        ::close(fd);
        throw busy;
    }
    ::close(fd); // a shared lock taken only to ask: released here
}

RunLock::RunLock(const std::string& runDir)
{
    const std::string path = (fs::path(runDir) / ".lock").string();
    // Never through a link: the lock file is truncated and written, and a link (symbolic or hard)
    // there would make that another file's content.
    switch (openOwnFile(path, O_RDWR | O_CREAT, m_fd)) {
    case OwnFile::Opened: break;
    case OwnFile::SymbolicLink:
        throw Error(path, 0, "is a symbolic link; a run's lock file is a plain file of its own: remove the link");
    case OwnFile::HardLink:
        throw Error(path, 0, "has other names (a hard link); a run's lock file is a plain file of its own: remove it");
    case OwnFile::NotPlain: throw Error(path, 0, "is not a regular file: remove it");
    case OwnFile::Failed: {
        const int error = errno;
        std::string why = error == EISDIR ? " (.lock is a folder: remove it)" : "";
        if (error == EACCES)
            why = unwritableFolderNote(runDir, "the folder");
        throw Error(runDir, 0, std::string("cannot open the run's lock file: ") + std::strerror(error) + why);
    }
    }
    if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
        const Error busy = inUse(runDir, m_fd);
        ::close(m_fd);
        m_fd = -1;
        throw busy;
    }
    m_dirFd = ::open(runDir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(m_fd, 0) == 0)
        (void)!::pwrite(m_fd, me.data(), me.size(), 0);
    // Holding the lock, no other writer of the run is mid-save: a temporary file here was left by
    // a writer that died, unless a live process is writing it (an export a user sent into the run
    // folder: writeFileAtomic's names hold the writer, ".<file>.tmp-<pid>-<n>").
    std::error_code ec;
    fs::directory_iterator it(runDir, ec);
    if (ec) {
        // Entered but not listable (mode 300): a writer would neither prune old checkpoints nor
        // see which files are there, and could take a trained folder for an empty one.
        ::close(m_fd);
        m_fd = -1;
        if (m_dirFd >= 0)
            ::close(m_dirFd);
        throw unlistedFolder(runDir, ec);
    }
    for (fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos
            && !tempFileWriterIsAlive(name)) {
            std::error_code e2;
            fs::remove(it->path(), e2);
        }
    }
}

void checkRunTokenizer(const std::string& runDir, const Tokenizer& tok, const TrainConfig& cfg, bool size)
{
    if (size && tok.size() != cfg.model.vocabSize)
        throw Error(vocabPath(runDir), 0,
            "holds " + std::to_string(tok.size()) + " words but config.json says "
                + std::to_string(cfg.model.vocabSize));
    if (tok.options().mode != cfg.tokenizer.mode)
        throw Error(vocabPath(runDir), 0,
            "tokenizes as '" + tokenizerModeName(tok.options().mode) + "' but config.json says '"
                + tokenizerModeName(cfg.tokenizer.mode) + "'");
    if (tok.options().dropUnknown != cfg.tokenizer.dropUnknown)
        throw Error(vocabPath(runDir), 0,
            std::string("says drop_unknown = ") + (tok.options().dropUnknown ? "true" : "false")
                + " but config.json says tokenizer.drop_unknown = " + (cfg.tokenizer.dropUnknown ? "true" : "false")
                + ": unknown words would be " + (tok.options().dropUnknown ? "left out" : "kept as <unk>")
                + " unlike in training; put back the value the run was trained with");
}

RunLock lockNewRunFolder(const std::string& runDir, std::string& made)
{
    made = createRunFolder(runDir);
    try {
        return RunLock(runDir);
    } catch (const Error& e) {
        if (made.empty())
            throw;
        // The folder made here holds at most the lock file made here (a folder that cannot be
        // listed is refused after it was made): both go, with the folders made on the way,
        // unless another writer holds that lock. The error says the folder was new.
        std::error_code ec;
        struct stat st { };
        const bool stated = ::stat(runDir.c_str(), &st) == 0;
        try {
            requireRunNotInUse(runDir);
            fs::remove(fs::path(runDir) / ".lock", ec);
            fs::remove(runDir, ec);
            removeFoldersMadeOnTheWay(runDir, made);
        } catch (const Error&) {
            throw e;
        }
        if (!stated || (st.st_mode & 0700) == 0700)
            throw;
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw Error(e.file(), e.line(),
            e.message() + " (the folder was made just now, with mode " + mode
                + " by this user's umask: a umask such as 222 or 444 makes new folders so; it was removed)");
    }
}

void requireFolderCanBeMade(const std::string& runDir)
{
    std::error_code ec;
    if (!fs::exists(runDir, ec) && fs::is_symlink(fs::symlink_status(runDir, ec)))
        throw Error(runDir, 0,
            "is a link to " + printable(fs::read_symlink(runDir, ec).string())
                + ", which does not exist: make that folder, or give another run folder");
    // A file in the way (the run path itself, or a folder on the way to it) is named.
    for (fs::path p = fs::path(runDir); !p.empty(); p = p.parent_path()) {
        std::error_code e2;
        if (fs::exists(p, e2) && !fs::is_directory(p, e2))
            throw Error(runDir, 0,
                "cannot create the run folder: " + printable(p.string())
                    + " is a file, not a folder; give another run folder");
        if (p == p.parent_path())
            break;
    }
}

std::string createRunFolder(const std::string& runDir)
{
    std::error_code ec;
    requireFolderCanBeMade(runDir);
    // The folders on the way that are not there yet, deepest first: what a failure removes again.
    const auto missing = [&] {
        std::vector<fs::path> out;
        for (fs::path p = fs::path(runDir).lexically_normal(); !p.empty(); p = p.parent_path()) {
            std::error_code e2;
            if (fs::exists(p, e2))
                break;
            out.push_back(p);
            if (p == p.parent_path())
                break;
        }
        return out;
    };
    const std::vector<fs::path> before = missing();
    fs::create_directories(runDir, ec);
    if (ec) {
        // The folder a new one could not be made in: the deepest one there now.
        const std::vector<fs::path> after = missing();
        fs::path there = after.empty() ? fs::path(runDir) : after.back().parent_path();
        if (there.empty())
            there = ".";
        const std::string why
            = ec == std::errc::permission_denied ? unwritableFolderNote(there.string(), printable(there.string())) : "";
        // Made on the way before the failure (a umask such as 222 makes folders that no folder can
        // be made in): removed again, as nothing was written in them.
        for (const fs::path& p : before) {
            std::error_code e2;
            fs::remove(p, e2);
        }
        requireFolderCanBeMade(runDir); // a file put in the way meanwhile is named
        throw Error(runDir, 0, "cannot create the run folder: " + ec.message() + why);
    }
    return before.empty() ? std::string() : before.back().string();
}

uint64_t vocabularyFingerprint(const Tokenizer& tok)
{
    text::Fingerprint f;
    for (int64_t id = 0; id < tok.size(); ++id)
        f.add(tok.word(id));
    return f.value();
}

void checkRunVocabulary(const Tokenizer& tok, const RunState& state)
{
    if (state.vocabFingerprint != 0 && state.vocabFingerprint != vocabularyFingerprint(tok))
        throw Error(state.file, 0,
            "was saved with another vocabulary than vocab.json holds: this state and its checkpoint ("
                + printable(state.checkpoint)
                + ") belong to another run (copied in?); put back this run's own files, or chat with that run");
}

void requireNewRunFolder(const std::string& runDir, const std::string& advice)
{
    if (isRun(runDir))
        throw Error(runDir, 0, "this folder already holds a run: " + advice);
    // What only training writes: a folder holding it has trained, even with its state.json and
    // checkpoints gone (the best weights still chat), and a new run would replace it.
    std::error_code ec;
    for (fs::directory_iterator it(runDir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name == "metrics.csv" || name == "steps.csv" || name == "best.json"
            || (name.rfind("best-", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0))
            throw Error(runDir, 0,
                "this folder holds a trained run's files ('" + name
                    + "') without its state.json and checkpoints; a new run would replace them: choose another "
                      "folder (chat --weights best still answers from it)");
    }
    const std::string config = configPath(runDir);
    if (present(config)) {
        try {
            (void)trainConfigFromJson(text::readFile(config, text::kMaxJsonFileBytes), config);
            return; // a start killed before its first checkpoint: starting afresh replaces its files
        } catch (const Error&) {
        }
    }
    std::vector<std::string> names;
    for (fs::directory_iterator it(runDir, ec), end; !ec && it != end; it.increment(ec))
        if (const std::string name = it->path().filename().string();
            name != ".lock" && !(name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos))
            names.push_back(name); // the lock and dead writers' temporary files (the lock removes those) are ours
    if (names.empty())
        return;
    std::sort(names.begin(), names.end());
    throw Error(runDir, 0,
        "the folder is not empty and holds no run ('" + names.front() + "'"
            + (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : std::string())
            + "); a run writes config.json, vocab.json, state.json and checkpoints there: choose an empty or new "
              "folder");
}

void requireNewRunPlace(const std::string& runDir, const std::string& advice)
{
    if (runDir.empty())
        throw Error("no run folder given (the path is empty)");
    requireRunNotInUse(runDir); // a writer's files are not judged while it writes them
    std::error_code ec;
    if (fs::is_directory(runDir, ec))
        requireNewRunFolder(runDir, advice); // before the lock file is made: nothing is left in a folder refused
    else
        requireFolderCanBeMade(runDir);
}

void requireRunFilesPlain(const std::string& runDir)
{
    auto written = [](const std::string& name) {
        auto is = [&](const char* prefix, const char* ext) {
            return name.starts_with(prefix) && name.ends_with(ext)
                && name.size() > std::strlen(prefix) + std::strlen(ext);
        };
        return name == kConfigFile || name == kVocabFile || name == kStateFile || name == kMetricsFile
            || name == kStepsFile || name == "best.json" || is("ckpt-", ".pt") || is("ckpt-", ".json")
            || is("best-", ".pt") || is("best-", ".json");
    };
    std::vector<std::string> bad;
    std::error_code ec;
    for (fs::directory_iterator it(runDir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code e2;
        if (const std::string name = it->path().filename().string();
            written(name) && !it->is_symlink(e2) && !it->is_regular_file(e2))
            bad.push_back(name);
    }
    if (bad.empty())
        return;
    std::sort(bad.begin(), bad.end());
    throw Error((fs::path(runDir) / bad.front()).string(), 0,
        "is not a regular file (a folder?) where the run writes one: remove or rename it"
            + (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more)" : std::string()));
}

RunLock::~RunLock()
{
    if (m_dirFd >= 0)
        ::close(m_dirFd);
    if (m_fd >= 0)
        ::close(m_fd); // releases the lock; the file stays (removing it would race a new locker)
}

bool RunLock::lockFileIntact(const std::string& runDir) const
{
    struct stat held {
    }, there {};
    if (m_fd < 0 || ::fstat(m_fd, &held) != 0)
        return true; // nothing to compare with
    return ::stat((fs::path(runDir) / ".lock").c_str(), &there) == 0 && there.st_dev == held.st_dev
        && there.st_ino == held.st_ino;
}

std::string RunLock::currentFolder(const std::string& runDir) const
{
    struct stat held {
    }, there {};
    if (m_dirFd < 0 || ::fstat(m_dirFd, &held) != 0)
        return runDir; // nothing to compare with: as before
    if (::stat(runDir.c_str(), &there) == 0 && there.st_dev == held.st_dev && there.st_ino == held.st_ino)
        return runDir;
    // The system's name for the folder now: its path, or the old one marked " (deleted)".
    char buf[PATH_MAX + 1];
    const std::string link = "/proc/self/fd/" + std::to_string(m_dirFd);
    const ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
    if (n <= 0)
        return {};
    const std::string path(buf, static_cast<size_t>(n));
    if (held.st_nlink == 0 || path.ends_with(" (deleted)") || ::stat(path.c_str(), &there) != 0
        || there.st_dev != held.st_dev || there.st_ino != held.st_ino)
        return {};
    return path;
}

void writeMetricsCsv(const std::string& runDir, const std::vector<EpochMetrics>& history)
{
    std::ostringstream out;
    out.precision(8);
    for (size_t i = 0; i < std::size(kMetricsColumns); ++i)
        out << (i ? "," : "") << kMetricsColumns[i];
    out << '\n';
    for (const auto& m : history)
        out << m.epoch + 1 << ',' << m.step << ',' << m.trainLoss << ',' << m.validationLoss << ','
            << m.validationAccuracy << ',' << m.perplexity << ',' << m.seconds << ',' << m.tokensPerSecond << ','
            << m.elapsedSeconds << '\n';
    writeFileAtomic((fs::path(runDir) / kMetricsFile).string(), out.str());
}

namespace {

// What readCsv found besides the rows.
struct CsvFile {
    bool columns = false; // the header named every column asked for
    bool exact = false; // ... and only those, in the order asked for
    int64_t tornAt = -1; // where a last line without its line break starts (a write cut short)
    int readError = 0; // errno when the file could not be opened or read to its end
};

// A cell that must be a whole number in [lo, hi]; anything else (a fraction, NaN, out of range)
// makes its row bad rather than reaching an integer conversion.
int64_t wholeCell(double v, int64_t lo, int64_t hi, bool& ok)
{
    if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) || v != std::floor(v)) {
        ok = false;
        return lo;
    }
    return static_cast<int64_t>(v);
}

// The largest step a run file's row may name (a row past the run's own step is dropped anyway).
constexpr int64_t kMaxRowStep = int64_t(1) << 50;

// The rows of a CSV file this engine wrote, read by column name (a file with more or reordered
// columns still reads), a block at a time: memory grows with the rows kept, never with the file
// (a line longer than any row this engine writes is skipped unread; CR, LF and CRLF each end a
// line). `row` is called with a
// lookup `number(name)`, a flag it clears for rows to leave out, and the byte offset where the
// row's line starts; it returns false to stop reading. A cell that is missing or not a number
// clears the flag. Files that are not regular, unreadable or without the columns give no rows;
// `readError` says why one could not be read.
template <size_t N, typename Row> CsvFile readCsv(const fs::path& path, const char* const (&names)[N], Row&& row)
{
    constexpr size_t kMaxLine = 4096;
    CsvFile found;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) // never a FIFO, which would block the reader
        return found;
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        found.readError = errno ? errno : EIO;
        return found;
    }
    auto cells = [](std::string_view l) {
        std::vector<std::string> c;
        size_t from = 0;
        for (;;) {
            const size_t comma = l.find(',', from);
            c.push_back(text::trim(l.substr(from, comma - from)));
            if (comma == std::string_view::npos)
                return c;
            from = comma + 1;
        }
    };
    std::map<std::string, size_t> column;
    bool header = true, stop = false;
    // One whole line (without its line break); false to stop reading.
    auto line = [&](std::string_view l, int64_t start) {
        if (!l.empty() && l.back() == '\r')
            l.remove_suffix(1);
        if (header) {
            header = false;
            const auto names0 = cells(l);
            for (size_t i = 0; i < names0.size(); ++i)
                column[names0[i]] = i;
            for (const char* name : names)
                if (!column.count(name))
                    return false;
            found.columns = true;
            found.exact = names0.size() == N;
            for (size_t i = 0; found.exact && i < N; ++i)
                found.exact = names0[i] == names[i];
            return true;
        }
        if (text::trim(l).empty())
            return true;
        const auto c = cells(l);
        bool ok = true;
        auto number = [&](const char* name) {
            const size_t i = column.at(name);
            if (i >= c.size() || c[i].empty()) {
                ok = false;
                return 0.0;
            }
            // Not strtod, which reads in the C library's locale: the window's (set from the
            // environment by Qt) takes "2.5" for 2 and junk where a decimal comma is the norm.
            double v = 0;
            const std::string& cell = c[i];
            const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
            if (ec != std::errc() || end != cell.data() + cell.size())
                ok = false;
            return v;
        };
        return static_cast<bool>(row(number, ok, start));
    };
    std::string pending; // the line read so far
    bool tooLong = false; // the current line is past kMaxLine: skipped
    int64_t lineStart = 0, offset = 0;
    std::vector<char> block(1 << 16);
    while (!stop && in) {
        errno = 0;
        in.read(block.data(), static_cast<std::streamsize>(block.size()));
        if (in.bad())
            found.readError = errno ? errno : EIO;
        const auto got = static_cast<size_t>(in.gcount());
        if (got == 0)
            break;
        std::string_view b(block.data(), got);
        while (!stop && !b.empty()) {
            const size_t nl = b.find_first_of("\r\n"); // CRLF gives an empty line between: skipped
            const std::string_view piece = b.substr(0, nl);
            if (!tooLong && pending.size() + piece.size() <= kMaxLine)
                pending.append(piece);
            else
                tooLong = true;
            if (nl == std::string_view::npos) {
                offset += static_cast<int64_t>(piece.size());
                break;
            }
            offset += static_cast<int64_t>(nl) + 1;
            if (tooLong && header)
                return found; // not a header of ours
            if (!tooLong)
                stop = !line(pending, lineStart);
            pending.clear();
            tooLong = false;
            lineStart = offset;
            b.remove_prefix(nl + 1);
        }
    }
    if (!stop && offset > lineStart) { // a last line without its line break
        found.tornAt = lineStart;
        if (header && !tooLong) // a header alone, cut short: not ours to trust
            return found;
    }
    return found;
}

constexpr const char* kStepColumns[] = { "epoch", "step", "loss", "tokens_per_second", "elapsed_seconds" };

} // namespace

std::vector<EpochMetrics> readRunHistory(const std::string& runDir)
{
    // One row per epoch, in order (a run has at most 100000): a file grown by hand stays a curve.
    std::vector<EpochMetrics> out;
    readCsv(fs::path(runDir) / kMetricsFile, kMetricsColumns, [&](auto&& number, bool& ok, int64_t) {
        EpochMetrics m;
        m.epoch = static_cast<int>(wholeCell(number("epoch"), 1, 100000, ok)) - 1;
        m.step = wholeCell(number("step"), 0, kMaxRowStep, ok);
        m.trainLoss = number("train_loss");
        m.validationLoss = number("validation_loss");
        m.validationAccuracy = number("validation_accuracy");
        m.perplexity = number("perplexity");
        m.seconds = number("seconds");
        m.tokensPerSecond = number("tokens_per_second");
        m.elapsedSeconds = number("elapsed_seconds");
        if (ok && m.epoch >= 0 && (out.empty() || m.epoch > out.back().epoch))
            out.push_back(m);
        return out.size() < 100000;
    });
    return out;
}

int bestEpochIndex(const std::vector<EpochMetrics>& history)
{
    int best = -1;
    for (size_t i = 0; i < history.size(); ++i)
        if (std::isfinite(history[i].validationLoss)
            && (best < 0 || history[i].validationLoss < history[static_cast<size_t>(best)].validationLoss))
            best = static_cast<int>(i);
    return best;
}

std::string overfittingNote(const std::vector<EpochMetrics>& history, int risingEpochs)
{
    const int best = bestEpochIndex(history);
    const int n = static_cast<int>(history.size());
    if (best < 0 || risingEpochs < 1 || n - 1 - best < risingEpochs)
        return {};
    const EpochMetrics& from = history[static_cast<size_t>(best)];
    const EpochMetrics& to = history.back();
    if (!(to.trainLoss < from.trainLoss) || !(to.validationLoss > from.validationLoss))
        return {};
    std::ostringstream o;
    o.precision(3);
    o << std::fixed << "Overfitting: the validation loss has not improved for " << n - 1 - best << " epochs (best "
      << from.validationLoss << " at epoch " << from.epoch + 1 << ", now " << to.validationLoss
      << ") while the training loss fell (" << from.trainLoss << " to " << to.trainLoss
      << "): the model is memorising its training pairs. The weights of epoch " << from.epoch + 1
      << " are kept as 'best' (choose them in the Chat tab, or chat --weights best); early stopping "
      << "(patience " << risingEpochs << ") would have stopped at epoch " << from.epoch + 1 + risingEpochs << ".";
    return o.str();
}

BestWeights readBestWeights(const std::string& runDir)
{
    BestWeights b;
    const std::string path = bestStatePath(runDir);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        return b;
    try {
        const RunState s = loadStateFile(path);
        b.available = !s.history.empty() && !s.checkpoint.empty();
        b.epoch = s.epoch;
        b.step = s.step;
        b.validationLoss = s.history.empty() ? NAN : s.history.back().validationLoss;
    } catch (const Error&) {
        b.available = false;
    }
    return b;
}

namespace {

StepMetrics stepRow(const auto& number, bool& ok)
{
    StepMetrics m;
    m.epoch = static_cast<int>(wholeCell(number("epoch"), 1, 100000, ok)) - 1;
    m.step = wholeCell(number("step"), 1, kMaxRowStep, ok);
    m.loss = number("loss");
    m.tokensPerSecond = number("tokens_per_second");
    m.elapsedSeconds = number("elapsed_seconds");
    return m;
}

// Appends and cuts go to the run's own file only: through a link they would change another one.
constexpr const char* kStepsLinked
    = "is a link (symbolic or hard) to another file; a run's steps.csv is a plain file of its own: "
      "replace it with a copy (cp steps.csv s && mv s steps.csv)";
constexpr const char* kStepsNotPlain = "is not a regular file: remove it (it holds the run's loss per step)";

// steps.csv's rows, as appended (after the header when `header`).
std::string stepsText(const std::vector<StepMetrics>& rows, bool header)
{
    std::ostringstream out;
    out.precision(8);
    for (size_t i = 0; header && i < std::size(kStepColumns); ++i)
        out << (i ? "," : "") << kStepColumns[i] << (i + 1 == std::size(kStepColumns) ? "\n" : "");
    for (const auto& m : rows)
        out << m.epoch + 1 << ',' << m.step << ',' << m.loss << ',' << m.tokensPerSecond << ',' << m.elapsedSeconds
            << '\n';
    return out.str();
}

// Whether a row read (`ok`: every cell a number) joins `kept`: a real step no later than `last`,
// after the rows kept so far.
bool keepsRow(const std::vector<StepMetrics>& kept, const StepMetrics& m, bool ok, int64_t last)
{
    return ok && m.epoch >= 0 && m.step >= 1 && m.step <= last && (kept.empty() || m.step > kept.back().step);
}

} // namespace

std::vector<StepMetrics> readRunSteps(const std::string& runDir)
{
    // Rows past state.json's step belong to a save that did not finish: left out.
    int64_t last = -1;
    try {
        last = loadState(runDir).step;
    } catch (const Error&) {
        return {};
    }
    std::vector<StepMetrics> out;
    readCsv(fs::path(runDir) / kStepsFile, kStepColumns, [&](auto&& number, bool& ok, int64_t) {
        if (const StepMetrics m = stepRow(number, ok); keepsRow(out, m, ok, last))
            out.push_back(m);
        return true;
    });
    return out;
}

void appendRunSteps(const std::string& runDir, const std::vector<StepMetrics>& rows)
{
    if (rows.empty())
        return;
    const std::string path = (fs::path(runDir) / kStepsFile).string();
    // Not blocking: a FIFO put there would otherwise hang the save until something read it.
    int fd = -1;
    int64_t size = 0;
    switch (openOwnFile(path, O_WRONLY | O_APPEND | O_CREAT, fd, &size)) {
    case OwnFile::Opened: break;
    case OwnFile::SymbolicLink:
    case OwnFile::HardLink: throw Error(path, 0, kStepsLinked);
    case OwnFile::NotPlain: throw Error(path, 0, kStepsNotPlain);
    case OwnFile::Failed: throw Error(path, 0, std::string("cannot append: ") + std::strerror(errno));
    }
    const std::string bytes = stepsText(rows, size == 0);
    size_t done = 0;
    int err = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? errno : ENOSPC;
            break;
        }
        done += static_cast<size_t>(n);
    }
    if (err != 0) // no torn row for the next append to run into: back to what it was
        (void)!::ftruncate(fd, static_cast<off_t>(size));
    ::close(fd);
    if (err != 0) {
        const std::string limit
            = err == EFBIG ? fileSizeLimitNote(static_cast<uintmax_t>(size) + bytes.size()) : std::string();
        throw Error(
            path, 0, std::string("write failed (") + std::strerror(err) + ")" + (limit.empty() ? "" : ": " + limit));
    }
}

namespace {

// True when `path` holds no more than the start of steps.csv's header: a first save killed
// while writing it.
bool tornHeader(const fs::path& path, int64_t size)
{
    const std::string header = stepsText({}, true);
    if (size >= static_cast<int64_t>(header.size()))
        return false;
    std::ifstream in(path, std::ios::binary);
    std::string head(static_cast<size_t>(size), '\0');
    return in.read(head.data(), size) && header.compare(0, head.size(), head) == 0;
}

} // namespace

void keepRunSteps(const std::string& runDir, int64_t upToStep)
{
    // Rows are appended in step order, so the ones past `upToStep` (a save cut short, or steps
    // after the checkpoint resumed from) are the file's tail: cut off in place, reading a block at
    // a time (a file of any size costs no memory and is not rewritten). Rows past `upToStep`
    // followed by rows before it (junk, edited by hand) are not a tail and stay: readers skip them.
    const fs::path path = fs::path(runDir) / kStepsFile;
    std::error_code ec;
    const auto link = fs::symlink_status(path, ec);
    if (!fs::exists(link))
        return;
    if (fs::is_symlink(link))
        throw Error(path.string(), 0, kStepsLinked);
    struct stat st { };
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw Error(path.string(), 0, kStepsNotPlain);
    if (st.st_nlink > 1)
        throw Error(path.string(), 0, kStepsLinked);
    int64_t cut = -1;
    std::vector<StepMetrics> kept; // for a file in another column order, rewritten in ours
    const CsvFile file = readCsv(path, kStepColumns, [&](auto&& number, bool& ok, int64_t offset) {
        const double step = number("step");
        if (ok && std::isfinite(step) && step == std::floor(step)) { // the step cell alone decides
            if (step <= static_cast<double>(upToStep))
                cut = -1;
            else if (cut < 0)
                cut = offset;
        }
        if (const StepMetrics m = stepRow(number, ok); keepsRow(kept, m, ok, upToStep))
            kept.push_back(m);
        return true;
    });
    // Refused rather than written afresh: the rows kept would be none, and the history it holds lost.
    if (file.readError != 0)
        throw Error(path.string(), 0,
            std::string("cannot read it (") + std::strerror(file.readError)
                + "): it holds the run's loss per step; give read permission, or move it away to resume without it");
    if (const std::string header = stepsText({}, true); !file.columns && !tornHeader(path, st.st_size))
        throw Error(path.string(), 0,
            "does not start with chatbench's header (" + header.substr(0, header.size() - 1)
                + "): it is not this run's loss per step (replaced or edited?); put the run's own back, or move it "
                  "away to resume without it");
    if (!file.columns || !file.exact) {
        // A header cut short by a kill (no rows after it), or the columns in another order, which
        // the next append would not follow: written afresh in ours, with the rows kept.
        writeFileAtomic(path.string(), stepsText(kept, /*header=*/true));
        return;
    }
    if (cut < 0) // a last line without its line break was cut short by a kill: it goes too
        cut = file.tornAt;
    if (cut >= 0 && ::truncate(path.c_str(), static_cast<off_t>(cut)) != 0)
        throw Error(
            path.string(), 0, std::string("cannot cut off the steps past the checkpoint: ") + std::strerror(errno));
}

void removeFailedStart(const std::string& runDir, const std::string& made)
{
    std::error_code ec;
    if (!made.empty()) {
        fs::remove_all(runDir, ec);
        removeFoldersMadeOnTheWay(runDir, made);
        return;
    }
    std::vector<std::string> files
        = { kConfigFile, kVocabFile, kStateFile, kMetricsFile, kStepsFile, "keras-import.json" };
    try {
        for (const std::string& ckpt : checkpointFiles(runDir)) {
            files.push_back(ckpt);
            files.push_back(ckpt.substr(0, ckpt.size() - 3) + ".json");
        }
    } catch (const Error&) {
        // not listable any more: what can be named goes
    }
    for (const std::string& f : files)
        fs::remove(fs::path(runDir) / f, ec);
}

bool isRun(const std::string& dir)
{
    // A folder with checkpoints has trained, whatever became of its state.json (see loadState).
    return present(statePath(dir)) || !checkpointFiles(dir).empty();
}

bool holdsRun(const std::string& dir)
{
    return present(statePath(dir)) || present(configPath(dir));
}

TrainConfig loadRunConfig(const std::string& runDir)
{
    const std::string path = configPath(runDir);
    if (!present(path)) {
        if (const std::string why = text::unreachable(runDir); !why.empty())
            throw Error(runDir, 0, why == text::kNotThere ? "no such run folder" : why);
        if (const std::string why = text::unreachable(path); !why.empty() && why != text::kNotThere)
            throw Error(path, 0, why);
        requireRunNotInUse(runDir); // a start or an import still making it
        throw Error(runDir, 0, "not a chatbench run folder (no config.json)");
    }
    return trainConfigFromJson(text::readFile(path, text::kMaxJsonFileBytes), path);
}

Corpus loadRunCorpus(const std::string& runDir)
{
    const TrainConfig cfg = loadRunConfig(runDir);
    if (cfg.corpus.empty())
        throw Error(configPath(runDir), 0,
            "the run does not name its corpus (an imported model's run, or one trained on pairs in memory): give "
            "the corpus to resume with (train --resume --corpus FILE)");
    try {
        return loadCorpus(cfg.corpus, corpusLoadOptions(cfg));
    } catch (const Error& e) {
        throw Error(e.file().empty() ? configPath(runDir) : e.file(), e.line(),
            e.message() + " (the corpus named in " + configPath(runDir) + ")");
    }
}

std::vector<RunInfo> listRuns(const std::string& runsDir)
{
    std::vector<RunInfo> out;
    std::error_code ec;
    for (fs::directory_iterator it(runsDir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code e2;
        try {
            if (!it->is_directory(e2) || !isRun(it->path().string()))
                continue;
        } catch (const Error&) {
            continue; // a folder that cannot be listed is not shown as a run
        }
        RunInfo r;
        r.dir = it->path().string();
        r.name = it->path().filename().string();
        try {
            r.config = loadRunConfig(r.dir);
            r.configOk = true;
        } catch (const Error&) {
            r.configOk = false;
        }
        const auto t = fs::last_write_time(statePath(r.dir), e2);
        if (!e2)
            r.modified = std::chrono::duration_cast<std::chrono::seconds>(
                fs::file_time_type::clock::to_sys(t).time_since_epoch())
                             .count();
        out.push_back(std::move(r));
    }
    std::stable_sort(out.begin(), out.end(), [](const RunInfo& a, const RunInfo& b) {
        return a.modified != b.modified ? a.modified > b.modified : a.name > b.name;
    });
    return out;
}

std::string newRunDir(const std::string& runsDir, const std::string& preset)
{
    const std::time_t now = std::time(nullptr);
    std::tm local {};
    ::localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
    const std::string base = std::string(stamp) + "-" + (preset.empty() ? "custom" : preset);
    fs::path dir = fs::path(runsDir) / base;
    for (int n = 2; present(dir); ++n)
        dir = fs::path(runsDir) / (base + "-" + std::to_string(n));
    return dir.string();
}

} // namespace chatbench
