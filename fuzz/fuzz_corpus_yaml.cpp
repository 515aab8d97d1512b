// The yaml corpus loader, strict and tolerant, with both pairings.
#include "chatbench/corpus.h"
#include "fuzzutil.h"

#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("input.yml");
    fuzz::write(path, data, size);
    for (int mode = 0; mode < 2; ++mode)
        fuzz::expectCleanOutcome([&] {
            chatbench::LoadOptions opt;
            opt.format = chatbench::CorpusFormat::ChatterbotYaml;
            opt.strict = mode == 0;
            opt.pairing = mode == 0 ? chatbench::Pairing::Consecutive : chatbench::Pairing::FirstRest;
            opt.maxTextBytes = 8 << 20;
            (void)chatbench::loadCorpus(path, opt);
        });
    fuzz::expectCleanOutcome([&] { (void)chatbench::detectFormat(path); });
    return 0;
}
