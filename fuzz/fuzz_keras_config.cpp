// A Keras model's config (config.json of a .keras file, model_config of an .h5) on its own: the
// keras_model harness reaches the same walk behind libzip and HDF5, in fork mode because HDF5
// crashes on some files, at a few hundred inputs a second. Seeded with the fixtures' configs.
#include "fuzzutil.h"
#include "kerasfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string config(reinterpret_cast<const char*>(data), size);
    fuzz::expectCleanOutcome([&] { (void)chatbench::readKerasConfig(config, "model.keras"); });
    return 0;
}
