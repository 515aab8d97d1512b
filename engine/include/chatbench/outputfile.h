#pragma once
// Files a user names as an output (corpus export --out, bench --out).

#include <string>

namespace chatbench {

// Writes `contents` to `path` whole or not at all: a temporary file beside the target, flushed and
// renamed over it, so a full disk leaves the old file as it was. A symbolic link is written
// through to the file it names (the link stays); a pipe, device or folder there is an Error
// before anything is written, as is a missing folder. Temporary files of the same output left by
// writers that were killed are removed first.
void writeOutputFile(const std::string& path, const std::string& contents);

// The checks of writeOutputFile without writing (for a caller with long work to do first):
// an Error for a pipe, device or folder at `path` or along its links.
void checkOutputPath(const std::string& path);

// Removes the temporary files of the whole-or-nothing writes this process has in progress (an
// output, a checkpoint, a run file); async-signal-safe, for a signal handler that ends the process.
// A writer killed outright leaves its file; the next write of the same output removes it.
void removeTempFilesInProgress() noexcept;

} // namespace chatbench
