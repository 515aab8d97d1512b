// The yaml corpus loader, strict and tolerant, with both pairings.
#include "fuzzutil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    fuzz::corpusFile(data, size, chatbench::CorpusFormat::ChatterbotYaml, "yml");
    return 0;
}
