// vocab.json as a run folder holds it, then encoding and decoding with whatever loaded.
#include "chatbench/tokenizer.h"
#include "fuzzutil.h"

#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("vocab.json");
    fuzz::write(path, data, size);
    fuzz::expectCleanOutcome([&] {
        const chatbench::Tokenizer tok = chatbench::Tokenizer::load(path);
        const std::string text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
        const auto e = tok.encode(text);
        (void)tok.decode(e.ids);
        (void)tok.decode({ 0, 1, 2, 3, tok.size(), -1, tok.size() - 1 });
    });
    return 0;
}
