#pragma once
// A walk over one pickle of a checkpoint archive before LibTorch's unpickler reads it (private;
// no Torch). LibTorch's unpickler trusts three numbers in a pickle: a memo index, up to which it
// grows its memo table (four bytes can ask for 68 GB: a checkpoint one bit off asked for 8.7 GB); a
// string's length, which it may allocate before reading; and a storage's element count, which
// becomes the storage's size whatever the size of the record holding its bytes (a shortened record
// was read past its end).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace chatbench {

// Walks the pickle p[0, n) opcode by opcode as LibTorch reads them (protocol 2), keeping a rough
// stack of the values it builds: enough to see each storage's persistent id ('storage', type, key,
// device, count) as LibTorch's pickler writes it. Refused: a memo index ahead of the entries made
// so far, a string longer than what is left, a storage whose count of elements takes more bytes
// than its record holds (`recordSize(key)`; nullopt when the archive has no such record, which
// LibTorch reports itself). An opcode LibTorch does not read ends the walk (LibTorch stops there
// with its own error), and so does a stack the walk cannot follow. Returns why, or empty.
std::string malformedPickle(
    const uint8_t* p, size_t n, const std::function<std::optional<size_t>(const std::string&)>& recordSize);

} // namespace chatbench
