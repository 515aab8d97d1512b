#include "checkpoint.h"

#include "atomicfile.h"
#include "chatbench/error.h"

#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace chatbench {

void saveCheckpoint(const std::string& runDir, Seq2Seq& model, torch::optim::Optimizer& optimizer, RunState& state)
{
    const std::string name = checkpointName(state.step);
    const std::string file = (fs::path(runDir) / name).string();
    // Serialised in memory first: the archive writer cannot report a full disk (it threw from a
    // destructor and aborted); writeFileAtomic can, and removes its temporary file.
    std::ostringstream bytes;
    {
        torch::serialize::OutputArchive root, m, o;
        model->save(m);
        optimizer.save(o);
        root.write("model", m);
        root.write("optimizer", o);
        root.write("step", torch::tensor(static_cast<int64_t>(state.step)));
        root.save_to(bytes);
    }
    writeFileAtomic(file, bytes.str());
    const std::string previous = state.checkpoint;
    state.checkpoint = name;

    saveState(runDir, state);

    // Only the checkpoint state.json names is kept.
    if (!previous.empty() && previous != state.checkpoint) {
        std::error_code ec;
        fs::remove(fs::path(runDir) / previous, ec);
    }
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
        if (!torch::isfinite(*t).all().item<bool>())
            throw Error(file, 0, "checkpoint holds NaN or infinite weights (tensor '" + name + "'): corrupt file?");
    }
}

} // namespace chatbench
