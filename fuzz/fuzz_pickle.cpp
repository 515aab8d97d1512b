// The walk over a checkpoint's pickles (picklewalk.h), on its own: the checkpoint harness reaches
// it too, but behind LibTorch's archive reader at a few hundred inputs a second. The input is one
// pickle (a checkpoint's data.pkl is the seed); a storage's record holds 16 bytes per unit of its
// key's first character, so the fuzzer can steer both sides of the size check.
#include "picklewalk.h"

#include <cstdint>
#include <optional>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    auto recordSize = [](const std::string& key) -> std::optional<size_t> {
        if (key.empty())
            return std::nullopt;
        return size_t(static_cast<unsigned char>(key[0])) * 16;
    };
    const std::string why = chatbench::malformedPickle(data, size, recordSize);
    // A refusal says where: every reason names the byte it stopped at.
    if (!why.empty() && why.find(" at byte ") == std::string::npos)
        __builtin_trap();
    return 0;
}
