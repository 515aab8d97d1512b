// The Cornell loader: the input is split at the first NUL byte into movie_lines.txt and
// movie_conversations.txt.
#include "chatbench/corpus.h"
#include "fuzzutil.h"

#include <cstring>
#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string dir = fuzz::scratch("cornell");
    ::mkdir(dir.c_str(), 0700);
    const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
    const size_t split = nul ? static_cast<size_t>(nul - data) : size / 2;
    fuzz::write(dir + "/movie_lines.txt", data, split);
    fuzz::write(dir + "/movie_conversations.txt", data + std::min(size, split + 1), size - std::min(size, split + 1));
    fuzz::expectCleanOutcome([&] {
        chatbench::LoadOptions opt;
        opt.maxTextBytes = 8 << 20;
        (void)chatbench::loadCorpus(dir, opt);
    });
    return 0;
}
