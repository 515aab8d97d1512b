// Checkpoints (ckpt-<step>.pt): the input is the checkpoint file of a small run, and state.json
// carries its CRC-32, so every input reaches the loader behind the checksum (torch's archive
// reader, then our key, shape and finiteness checks) and the optimizer state.
// CHATBENCH_FUZZ_SEED_DIR: write a valid checkpoint of the same model there as a seed.
#include "checkpoint.h"
#include "fuzzutil.h"
#include "text.h"
#include "trainstep.h"

#include <cstdlib>
#include <filesystem>

namespace {

chatbench::TrainConfig tinyRun()
{
    chatbench::TrainConfig cfg = chatbench::preset("quick");
    cfg.model.vocabSize = 9;
    cfg.model.embedDim = 3;
    cfg.model.hidden = 4;
    cfg.model.layers = 2;
    cfg.model.maxSourceLength = 8;
    cfg.model.maxTargetLength = 8;
    return cfg;
}

chatbench::Stepper& stepper()
{
    static chatbench::Stepper s = chatbench::makeStepper(tinyRun(), torch::kCPU, chatbench::Precision::FP32);
    return s;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    torch::set_num_threads(1);
    if (const char* dir = std::getenv("CHATBENCH_FUZZ_SEED_DIR")) {
        // One real step, so the optimizer's state is in the seed too.
        chatbench::RunState state;
        chatbench::Stepper& s = stepper();
        chatbench::Batch b;
        b.source = torch::tensor({ { 4, 5, 6 } });
        b.lengths = torch::tensor({ 3 });
        b.input = torch::tensor({ { 2, 7 } });
        b.target = torch::tensor({ { 7, 3 } });
        b.mask = b.target.ne(0);
        b.tokens = 2;
        chatbench::trainStep(s, b);
        state.step = 1;
        const std::string run = std::string(dir) + "/seed-run";
        std::filesystem::create_directories(run);
        chatbench::saveCheckpoint(run, s.model, *s.optimizer, state, 1);
        std::filesystem::copy_file(run + "/" + state.checkpoint, std::string(dir) + "/seed.pt",
            std::filesystem::copy_options::overwrite_existing);
        std::filesystem::remove_all(run);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("ckpt-00000001.pt");
    fuzz::write(path, data, size);
    chatbench::RunState state;
    state.step = 1;
    state.checkpoint = "ckpt-00000001.pt";
    state.checkpointCrc = chatbench::text::crc32({ reinterpret_cast<const char*>(data), size });
    state.haveCrc = true;
    const std::string runDir = path.substr(0, path.rfind('/'));
    chatbench::Stepper& s = stepper();
    fuzz::expectCleanOutcome([&] { chatbench::loadCheckpoint(runDir, state, s.model, s.optimizer.get()); });
    return 0;
}
