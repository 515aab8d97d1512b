// state.json and the per-checkpoint state files.
#include "fuzzutil.h"
#include "runstate.h"

#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("state.json");
    fuzz::write(path, data, size);
    fuzz::expectCleanOutcome([&] { (void)chatbench::loadStateFile(path); });
    return 0;
}
