#include "checkpoint.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "kernels.h"
#include "picklewalk.h"
#include "text.h"
#include "trainstep.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

std::string rngKey(const torch::Device& dev)
{
    return dev.is_cuda() ? "rng_cuda" : "rng_cpu";
}

// The most a checkpoint of `model` can take: its parameters and buffers in fp32, up to three
// optimizer states for each parameter (Adam with amsgrad), and room for the generator, the
// archive's records and names. A larger file is refused before it is read (a checkpoint replaced
// by a 10 GB file was read whole, 17 GB, before its checksum failed, or was bad_alloc in words of
// no file under a memory limit).
bool allFinite(const torch::Tensor& t)
{
    if (t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous())
        return kernels::allFinite(t.data_ptr<float>(), t.numel());
    return torch::isfinite(t).all().item<bool>();
}

uint64_t modelElements(Seq2Seq& model)
{
    uint64_t elements = 0;
    for (const auto& p : model->parameters())
        elements += static_cast<uint64_t>(p.numel());
    for (const auto& b : model->buffers())
        elements += static_cast<uint64_t>(b.numel());
    return elements;
}

uint64_t checkpointByteLimit(Seq2Seq& model)
{
    return modelElements(model) * 4 * 5 + (uint64_t(64) << 20);
}

} // namespace

void saveCheckpoint(
    const std::string& runDir, Seq2Seq& model, torch::optim::Optimizer& optimizer, RunState& state, int keep)
{
    const std::string name = checkpointName(state.step);
    const std::string file = (fs::path(runDir) / name).string();
    // This step's checkpoint may be on disk already, named by state.json: the save at the end of
    // an epoch follows the step's own, and a stop before the first step after a resume saves the
    // step it loaded. The weights are the same, but serialised after a load they come out as
    // other bytes (another order, another id); replacing the file that state.json names before
    // state.json itself would, killed in between, leave a checksum mismatch and lose the step.
    // So the file stays, and only the state files are written anew.
    std::error_code sizeError;
    const bool onDisk = state.haveCrc && state.checkpoint == name && fs::exists(file)
        && fs::file_size(file, sizeError) <= checkpointByteLimit(model)
        && text::crc32(text::readFile(file)) == state.checkpointCrc;
    if (!onDisk) {
        // Weights that are no longer finite are never saved: the checkpoint state.json names
        // stays the last good one.
        for (const auto& p : model->named_parameters())
            if (!allFinite(p.value()))
                throw Error(file, 0,
                    "not saved: tensor '" + p.key()
                        + "' holds NaN or infinite values (training diverged; lower the learning rate or turn on "
                          "gradient clipping)"
                        + (state.checkpoint.empty() ? std::string()
                                                    : "; the last good checkpoint is " + state.checkpoint));
        // Serialised in memory first: the archive writer cannot report a full disk (it threw from
        // a destructor and aborted); writeFileAtomic can, and removes its temporary file. The
        // buffer stays from one save to the next (16 MB for the seed preset, whose fresh pages
        // cost a fault each), where a stream grew and was copied out.
        thread_local std::string bytes;
        bytes.clear();
        bytes.reserve(static_cast<size_t>(modelElements(model) * 4 * 3 + (1 << 20))); // Adam's two states too
        {
            torch::serialize::OutputArchive root, m, o;
            model->save(m);
            optimizer.save(o);
            root.write("model", m);
            root.write("optimizer", o);
            root.write("step", torch::tensor(static_cast<int64_t>(state.step)));
            // The training device's generator: a CUDA generator is never reseeded per step (see
            // seedStep), so an exact resume needs its state; the CPU's is kept as well, for symmetry.
            const torch::Device dev = model->parameters().front().device();
            root.write(rngKey(dev), rngState(dev));
            root.save_to([&](const void* data, size_t n) -> size_t {
                if (!data)
                    return 0; // (never from a C++ archive) no bytes: the writer fails
                bytes.append(static_cast<const char*>(data), n);
                return n;
            });
        }
        // The file's CRC-32 on another thread while the bytes go to the disk (the write and the
        // fsync wait on the kernel, and the trainer's other threads are idle): 5–7 ms off a save.
        // The future waits for it if the write throws, so the bytes outlive it.
        auto crc = std::async([](const std::string& b) { return text::crc32(b); }, std::cref(bytes));
        writeFileAtomic(file, bytes);
        state.checkpoint = name;
        state.checkpointCrc = crc.get();
        state.haveCrc = true;
    }
    saveCheckpointState(runDir, state); // before state.json: whatever it names has its state beside it
    saveState(runDir, state);

    // The newest `keep` checkpoints up to this one stay (this one always), each with its state. A
    // checkpoint-named file of a later step is neither counted nor removed: a file put there, or
    // one a fallback left behind, took the place of the run's own fallbacks. The state goes
    // before its checkpoint: a kill in between leaves an old checkpoint without its state, which
    // the next save removes, rather than a state without its checkpoint.
    std::error_code ec;
    size_t kept = 0;
    for (const std::string& f : checkpointFiles(runDir)) {
        if (std::stoll(f.substr(5, f.size() - 8)) > state.step)
            continue;
        if (kept++ < static_cast<size_t>(std::max(1, keep)) || f == state.checkpoint)
            continue;
        fs::remove(checkpointStatePath(runDir, f), ec);
        fs::remove(fs::path(runDir) / f, ec);
    }
    // States whose checkpoint is gone (left by a kill between the two removals, in that order
    // before): removed, up to this step.
    for (fs::directory_iterator it(runDir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() < 18 || !name.starts_with("ckpt-") || !name.ends_with(".json")
            || name.find_first_not_of("0123456789", 5) != name.size() - 5)
            continue;
        const std::string checkpoint = name.substr(0, name.size() - 5) + ".pt";
        std::error_code e2;
        if (checkpoint != state.checkpoint && !fs::exists(fs::path(runDir) / checkpoint, e2) && name.size() - 10 <= 18
            && std::stoll(name.substr(5, name.size() - 10)) < state.step)
            fs::remove(it->path(), e2);
    }
}

namespace {

// Names in `archive` that `module` has no parameter, buffer or submodule for ("decoder.x"):
// Module::load reads what the module asks for and ignores the rest, so a checkpoint of another
// model (an embedding config.json no longer has) would load without a word.
void unexpectedKeys(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix,
    std::vector<std::string>& out)
{
    std::set<std::string> known { "training" };
    for (const auto& p : module.named_parameters(/*recurse=*/false))
        known.insert(p.key());
    for (const auto& b : module.named_buffers(/*recurse=*/false))
        known.insert(b.key());
    for (const auto& c : module.named_children())
        known.insert(c.key());
    for (const std::string& k : archive.keys())
        if (!known.count(k))
            out.push_back(prefix + k);
    for (const auto& c : module.named_children()) {
        torch::serialize::InputArchive sub;
        if (archive.try_read(c.key(), sub))
            unexpectedKeys(*c.value(), sub, prefix + c.key() + ".", out);
    }
}

// The first non-empty answer of check(key, the module's tensor, the archive, prefix) over the
// module's own parameters and buffers, then its submodules' archives in turn; a submodule the
// archive lacks is the answer when `partsRequired`, else skipped.
using TensorCheck = std::function<std::string(const std::string& key, const torch::Tensor& want,
    torch::serialize::InputArchive& archive, const std::string& prefix)>;
std::string firstMismatch(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix,
    const TensorCheck& check, bool partsRequired)
{
    for (const auto& p : module.named_parameters(/*recurse=*/false))
        if (auto why = check(p.key(), p.value(), archive, prefix); !why.empty())
            return why;
    for (const auto& b : module.named_buffers(/*recurse=*/false))
        if (auto why = check(b.key(), b.value(), archive, prefix); !why.empty())
            return why;
    for (const auto& c : module.named_children()) {
        torch::serialize::InputArchive sub;
        if (!archive.try_read(c.key(), sub)) {
            if (partsRequired)
                return "config.json makes a part '" + prefix + c.key() + "' the checkpoint has not";
            continue;
        }
        if (auto why = firstMismatch(*c.value(), sub, prefix + c.key() + ".", check, partsRequired); !why.empty())
            return why;
    }
    return {};
}

// The first tensor the model has and `archive` has not, or holds in another shape, as words;
// empty when every parameter and buffer is there in its shape. Module::load would resize a
// tensor to what the file holds, or fail with LibTorch's words.
std::string shapeMismatch(torch::nn::Module& module, torch::serialize::InputArchive& archive)
{
    auto shape = [](const torch::Tensor& t) {
        std::string out;
        for (int64_t d : t.sizes())
            out += (out.empty() ? "" : " x ") + std::to_string(d);
        return out.empty() ? std::string("a scalar") : out;
    };
    return firstMismatch(
        module, archive, "",
        [&](const std::string& key, const torch::Tensor& want, torch::serialize::InputArchive& in,
            const std::string& prefix) -> std::string {
            torch::Tensor have;
            if (!in.try_read(key, have))
                return "config.json makes a tensor '" + prefix + key + "' (" + shape(want) + ") the checkpoint has not";
            if (have.sizes() != want.sizes())
                return "tensor '" + prefix + key + "' is " + shape(have) + " in the checkpoint, " + shape(want)
                    + " by config.json";
            return {};
        },
        /*partsRequired=*/true);
}

// The first tensor `archive` holds in another type than the model's, as words; empty when none.
// Module::load would take its bytes as the model's type (a float64 weight read as float32 garbage).
std::string typeMismatch(torch::nn::Module& module, torch::serialize::InputArchive& archive)
{
    return firstMismatch(
        module, archive, "",
        [](const std::string& key, const torch::Tensor& want, torch::serialize::InputArchive& in,
            const std::string& prefix) -> std::string {
            torch::Tensor have;
            if (in.try_read(key, have) && have.scalar_type() != want.scalar_type())
                return "tensor '" + prefix + key + "' is " + c10::toString(have.scalar_type()) + ", the model's are "
                    + c10::toString(want.scalar_type());
            return {};
        },
        /*partsRequired=*/false);
}

// What is wrong with the optimizer's state as load() left it, as words; empty when nothing. Its
// tensors were read as the file holds them: each must be its parameter's shape and type, and
// finite (a NaN there turns every weight NaN at the first step), and its step count and learning
// rates in range.
std::string badOptimizerState(torch::optim::Optimizer& optimizer, Seq2Seq& model)
{
    std::map<const void*, std::string> names;
    for (const auto& p : model->named_parameters())
        names[p.value().unsafeGetTensorImpl()] = p.key();
    auto shape = [](const torch::Tensor& t) {
        std::string out;
        for (int64_t d : t.sizes())
            out += (out.empty() ? "" : " x ") + std::to_string(d);
        return out.empty() ? std::string("a scalar") : out;
    };
    for (const auto& group : optimizer.param_groups()) {
        const double lr = group.options().get_lr();
        if (!std::isfinite(lr) || lr < 0)
            return "a learning rate of " + std::to_string(lr);
        for (const auto& p : group.params()) {
            const auto it = optimizer.state().find(p.unsafeGetTensorImpl());
            if (it == optimizer.state().end())
                continue; // no state yet (a parameter not stepped)
            const auto known = names.find(p.unsafeGetTensorImpl());
            const std::string of = known == names.end() ? std::string("a parameter") : "'" + known->second + "'";
            std::vector<std::pair<const char*, torch::Tensor>> tensors;
            int64_t step = 0;
            if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
                tensors = { { "exp_avg", a->exp_avg() }, { "exp_avg_sq", a->exp_avg_sq() },
                    { "max_exp_avg_sq", a->max_exp_avg_sq() } };
                step = a->step();
            } else if (const auto* r = dynamic_cast<const torch::optim::RMSpropParamState*>(it->second.get())) {
                tensors = { { "square_avg", r->square_avg() }, { "momentum_buffer", r->momentum_buffer() },
                    { "grad_avg", r->grad_avg() } };
                step = r->step();
            } else if (const auto* g = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
                tensors = { { "momentum_buffer", g->momentum_buffer() } };
            }
            if (step < 0)
                return "a step count of " + std::to_string(step) + " for " + of;
            for (const auto& [name, t] : tensors) {
                if (!t.defined())
                    continue;
                if (t.sizes() != p.sizes())
                    return std::string("its '") + name + "' for " + of + " is " + shape(t) + ", the tensor is "
                        + shape(p);
                if (t.scalar_type() != p.scalar_type())
                    return std::string("its '") + name + "' for " + of + " is " + c10::toString(t.scalar_type())
                        + ", the tensor is " + c10::toString(p.scalar_type());
                if (!allFinite(t))
                    return std::string("its '") + name + "' for " + of + " holds NaN or infinite values";
            }
        }
    }
    return {};
}

// A checkpoint of another model than config.json describes: every checkpoint of the run is then
// another model too (config.json was edited), so no older one is tried in its place.
struct ConfigMismatch : Error {
    using Error::Error;
};

// Memory ran out reading a checkpoint: nothing is wrong with the file, so no older one is taken
// in its place (that would quietly go back in training).
struct OutOfMemoryReading : Error {
    OutOfMemoryReading(const std::string& file, uintmax_t bytes)
        : Error(file, 0,
            "out of memory reading this checkpoint"
                + (bytes > 0 ? " (" + std::to_string((bytes + (1 << 20) - 1) >> 20)
                            + " MiB, and as much again for its tensors)"
                             : std::string())
                + ": free memory, or raise the memory limit (ulimit -v)")
    {
    }
};

const char* const kEditedConfig
    = ": was config.json edited? Put back the sizes the run was trained with (train a new run for other sizes)";

// The checkpoint's bytes as LibTorch's archive reader reads them.
class BytesReader : public caffe2::serialize::ReadAdapterInterface {
public:
    explicit BytesReader(const std::string& bytes)
        : m_bytes(bytes)
    {
    }
    size_t size() const override { return m_bytes.size(); }
    size_t read(uint64_t pos, void* buf, size_t n, const char*) const override
    {
        if (pos >= m_bytes.size())
            return 0;
        n = std::min<size_t>(n, m_bytes.size() - static_cast<size_t>(pos));
        std::memcpy(buf, m_bytes.data() + pos, n);
        return n;
    }

private:
    const std::string& m_bytes;
};

// Throws naming the pickle of the archive that malformedPickle refuses, or the record where the
// sizes the archive declares for its records pass `byteLimit` (what a checkpoint of the model can
// hold). Those sizes are read before any record: a compressed record may declare far more than the
// file holds (found by the checkpoint harness: one code file of a 55 KB checkpoint declared
// 448 MiB, and LibTorch's reader took 2.2 GB and 4 s to find out).
void checkArchive(const std::string& file, const std::string& bytes, uint64_t byteLimit)
{
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReader>(bytes));
    uint64_t declared = 0;
    for (const auto& name : reader.getAllRecords()) {
        const uint64_t size = reader.getRecordSize(name);
        declared += std::min<uint64_t>(size, byteLimit + 1);
        if (declared > byteLimit)
            throw Error(file, 0,
                "checkpoint is malformed (its records declare more than the " + std::to_string(byteLimit >> 20)
                    + " MiB a checkpoint of this model holds, '" + name + "' alone "
                    + std::to_string((size + (1 << 20) - 1) >> 20) + " MiB): corrupt file?");
    }
    for (const auto& name : reader.getAllRecords()) {
        if (name.size() < 3 || name.compare(name.size() - 3, 3, "pkl") != 0)
            continue;
        const auto [data, size] = reader.getRecord(name);
        // Its storages' bytes are the records "<name without .pkl>/<key>" (data.pkl: data/0, …).
        const std::string dir
            = name.substr(0, name.size() - (name.size() >= 4 && name.compare(name.size() - 4, 4, ".pkl") == 0 ? 4 : 3));
        auto recordSize = [&](const std::string& key) -> std::optional<size_t> {
            const std::string record = dir + "/" + key;
            if (!reader.hasRecord(record))
                return std::nullopt; // LibTorch says it is missing
            return reader.getRecordSize(record);
        };
        const std::string why = malformedPickle(static_cast<const uint8_t*>(data.get()), size, recordSize);
        if (!why.empty())
            throw Error(file, 0, "checkpoint is malformed (its record '" + name + "' has " + why + "): corrupt file?");
    }
}

} // namespace

void loadCheckpoint(
    const std::string& runDir, const RunState& state, Seq2Seq& model, torch::optim::Optimizer* optimizer)
{
    const std::string file = (fs::path(runDir) / state.checkpoint).string();
    if (!fs::exists(file))
        throw Error(file, 0, "checkpoint file is missing");
    std::string bytes;
    try {
        bytes = text::readFile(file, static_cast<int64_t>(checkpointByteLimit(model)),
            "no checkpoint of this run's model (config.json's sizes) is that large: corrupt or another file?");
    } catch (const std::bad_alloc&) {
        std::error_code ec;
        const uintmax_t size = fs::file_size(file, ec);
        throw OutOfMemoryReading(file, ec ? 0 : size);
    }
    if (state.haveCrc && text::crc32(bytes) != state.checkpointCrc)
        throw Error(file, 0, "checksum mismatch: the checkpoint is corrupt");
    // Remember the shapes the config asks for: InputArchive::read would silently resize.
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (const auto& p : model->named_parameters())
        shapes.emplace_back(p.key(), p.value().sizes().vec());
    try {
        checkArchive(file, bytes, checkpointByteLimit(model));
        torch::serialize::InputArchive root, m;
        root.load_from(bytes.data(), bytes.size(), model->parameters().front().device());
        root.read("model", m);
        std::vector<std::string> extra;
        unexpectedKeys(*model, m, "", extra);
        if (!extra.empty())
            throw ConfigMismatch(file, 0,
                "checkpoint does not match config.json (it holds '" + extra.front() + "'"
                    + (extra.size() > 1 ? " and " + std::to_string(extra.size() - 1) + " more" : std::string())
                    + ", which this model has not)" + kEditedConfig);
        if (const std::string why = shapeMismatch(*model, m); !why.empty())
            throw ConfigMismatch(file, 0, "checkpoint does not match config.json (" + why + ")" + kEditedConfig);
        if (const std::string why = typeMismatch(*model, m); !why.empty())
            throw Error(file, 0, "checkpoint holds another type of tensor (" + why + "): corrupt or edited file?");
        model->load(m);
        if (optimizer) {
            torch::serialize::InputArchive o;
            root.read("optimizer", o);
            optimizer->load(o);
            if (const std::string why = badOptimizerState(*optimizer, model); !why.empty())
                throw Error(file, 0, "checkpoint's optimizer state is unusable (" + why + "): corrupt or edited file?");
            // Resuming: the random stream continues where the checkpoint left it (same device
            // type only; checkpoints from before this was kept have none).
            const torch::Device dev = model->parameters().front().device();
            torch::Tensor rng;
            if (root.try_read(rngKey(dev), rng))
                setRngState(dev, rng.to(torch::kCPU)); // generator states are CPU byte tensors, wherever loaded
        }
    } catch (const std::bad_alloc&) {
        throw OutOfMemoryReading(file, bytes.size());
    } catch (const c10::OutOfMemoryError&) { // a GPU's memory, loading onto CUDA
        throw OutOfMemoryReading(file, bytes.size());
    } catch (const c10::Error& e) {
        std::string what = e.what_without_backtrace();
        if (what.find("can't allocate memory") != std::string::npos)
            throw OutOfMemoryReading(file, bytes.size());
        throw Error(file, 0, "cannot read checkpoint (" + what.substr(0, what.find('\n')) + ")");
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) { // TorchScript's own parser errors are not c10::Errors
        std::string what = e.what();
        throw Error(file, 0, "cannot read checkpoint (" + what.substr(0, what.find('\n')) + ")");
    }
    auto params = model->named_parameters();
    for (const auto& [name, shape] : shapes) {
        const auto* t = params.find(name);
        if (!t || t->sizes().vec() != shape)
            throw Error(file, 0, "checkpoint does not match config.json (tensor '" + name + "' has another shape)");
        if (!allFinite(*t))
            throw Error(file, 0, "checkpoint holds NaN or infinite weights (tensor '" + name + "'): corrupt file?");
    }
    // load() replaced each weight's storage: on a GPU cuDNN's LSTM then no longer finds its
    // weights in one buffer and copies them on every call (with a warning). Put them back, once
    // the shapes are known to be right.
    try {
        model->encoder->flatten_parameters();
        model->decoder->flatten_parameters();
    } catch (const std::exception& e) {
        const std::string what = e.what();
        throw Error(file, 0, "cannot prepare the loaded weights for cuDNN (" + what.substr(0, what.find('\n')) + ")");
    }
}

RunState loadUsableCheckpoint(const std::string& runDir, const RunState& state, Seq2Seq& model,
    torch::optim::Optimizer* optimizer, std::string* note)
{
    try {
        loadCheckpoint(runDir, state, model, optimizer);
        return state;
    } catch (const ConfigMismatch&) {
        throw;
    } catch (const OutOfMemoryReading&) {
        throw;
    } catch (const Error& newest) {
        for (const std::string& older : checkpointFiles(runDir)) {
            const std::string statePath = checkpointStatePath(runDir, older);
            if (older == state.checkpoint || !fs::exists(statePath))
                continue;
            try {
                RunState s = loadStateFile(statePath);
                // Another run's state and checkpoint copied in beside this run's are not its fallback.
                if (s.checkpoint != older || s.step > state.step
                    || (s.vocabFingerprint != 0 && state.vocabFingerprint != 0
                        && s.vocabFingerprint != state.vocabFingerprint))
                    continue;
                loadCheckpoint(runDir, s, model, optimizer);
                if (note)
                    *note = std::string(newest.what()) + "; fell back to " + older + " (step " + std::to_string(s.step)
                        + ", epoch " + std::to_string(s.epoch) + ")";
                return s;
            } catch (const OutOfMemoryReading&) {
                throw; // not the file's fault: no older one instead
            } catch (const Error&) {
                continue; // that one is unusable too: try the next older
            }
        }
        throw;
    }
}

void keepBestCheckpoint(const std::string& runDir, const RunState& state)
{
    const fs::path dir(runDir);
    const std::string name = "best-" + state.checkpoint.substr(std::string("ckpt-").size());
    const fs::path target = dir / name;
    const fs::path temp = dir / ("." + name + ".tmp-best");
    std::error_code ec;
    fs::remove(temp, ec);
    // Checkpoints are never rewritten in place (each save is a new file renamed into place), so a
    // hard link shares the bytes safely and costs no disk.
    fs::create_hard_link(dir / state.checkpoint, temp, ec);
    if (ec) {
        ec.clear();
        fs::copy_file(dir / state.checkpoint, temp, fs::copy_options::overwrite_existing, ec);
    }
    if (!ec)
        fs::rename(temp, target, ec);
    if (ec) {
        std::error_code ignored; // keep ec for the message
        fs::remove(temp, ignored);
        throw Error(target.string(), 0, "cannot keep the best weights: " + ec.message());
    }
    RunState best = state;
    best.checkpoint = name;
    saveBestState(runDir, best);
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string file = entry.path().filename().string();
        if (file.rfind("best-", 0) == 0 && file != name && entry.path().extension() == ".pt")
            fs::remove(entry.path(), ec);
    }
}

RunState loadBestCheckpoint(const std::string& runDir, Seq2Seq& model)
{
    const std::string path = bestStatePath(runDir);
    if (!fs::exists(path))
        throw Error(path, 0,
            "this run has no best weights yet (they are kept from the first epoch with a validation loss; runs "
            "without a validation set have none)");
    const RunState best = loadStateFile(path);
    loadCheckpoint(runDir, best, model, nullptr);
    return best;
}

} // namespace chatbench
