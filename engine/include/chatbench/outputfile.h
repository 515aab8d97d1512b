#pragma once
// Files a user names as an output (corpus export --out, bench --out).

#include <string>

namespace chatbench {

// Writes `contents` to `path` whole or not at all: a temporary file beside the target, flushed and
// renamed over it, so a full disk leaves the old file as it was. A symbolic link is written
// through to the file it names (the link stays); a pipe, device or folder there is an Error
// before anything is written, as is a missing folder.
void writeOutputFile(const std::string& path, const std::string& contents);

// The checks of writeOutputFile without writing (for a caller with long work to do first):
// an Error for a pipe, device or folder at `path` or along its links.
void checkOutputPath(const std::string& path);

} // namespace chatbench
