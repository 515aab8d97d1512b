// Keras models: `.keras` archives (libzip, config.json, HDF5 weights) and legacy `.h5` files, told
// apart by their first bytes. Read in this process, where a crash is seen; the importer reads them
// in a child process (kerasfile.h), so crashes inside HDF5 itself end there as an Error.
#include "fuzzutil.h"
#include "kerasfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string path = fuzz::scratch("model.keras");
    fuzz::write(path, data, size);
    fuzz::expectCleanOutcome([&] { (void)chatbench::readKerasSeq2SeqInProcess(path); });
    return 0;
}
