// config.json (read in memory, as loadRunConfig does after reading the file).
#include "chatbench/config.h"
#include "fuzzutil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expectCleanOutcome([&] {
        const chatbench::TrainConfig c = chatbench::trainConfigFromJson(text, "config.json");
        (void)chatbench::toJson(c);
    });
    return 0;
}
