// Keras tokenizers saved with `tokenizer.to_json()`.
#include "fuzzutil.h"
#include "kerasfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("tokenizer.json");
    fuzz::write(path, data, size);
    fuzz::expectCleanOutcome([&] { (void)chatbench::readKerasTokenizer(path); });
    return 0;
}
