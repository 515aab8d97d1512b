#pragma once
// Crash-safe file writes (private): a temporary file in the same folder, flushed, then renamed
// over the target, so a reader sees the old file or the new one and never half of one.

#include <functional>
#include <string>

namespace chatbench {

void writeFileAtomic(const std::string& path, const std::string& contents);
// For writers that need a path (torch::save): `write` fills the temporary path given to it.
void writeFileAtomic(const std::string& path, const std::function<void(const std::string& tmpPath)>& write);

// Removes the files and folders in `folder` named `prefix`<pid>-<n>`suffix` (digits for pid and
// n, nothing else) whose process is gone: what writers that were killed left (writeFileAtomic's
// temporary files, the Keras reader's copies of weights, the doctor's and bench races' scratch
// runs). A live process' file stays.
void removeDeadProcessesFiles(const std::string& folder, const std::string& prefix, const std::string& suffix = "");
// For a temporary file's name (".<name>.tmp-<pid>-<n>", writeFileAtomic's): whether another
// process that is alive writes it. False for a dead writer's file, for this process' own (a dead
// writer's pid may have been reused by this very process), and for names from before the process
// was in them (".<name>.tmp-<n>") or of another shape.
bool tempFileWriterIsAlive(const std::string& fileName);

// The folder for temporary files: TMPDIR when set and not empty, else /tmp. A TMPDIR that is not
// a folder is an Error naming it and `use` (what goes there: "the doctor trains a tiny model
// there"), not the standard library's bare "temp_directory_path".
std::string temporaryFolder(const std::string& use);

// After a write failed with EFBIG: "this process may write files of at most 8.7 MiB (the
// file-size limit, ulimit -f) and this one takes 9.1 MiB; raise the limit", or empty where the
// file of `bytes` is within the limit (a file system's own maximum) or none is set.
std::string fileSizeLimitNote(uintmax_t bytes);

// Removes this process' own temporary files in `folder`: a write cut short there (the folder
// renamed under it) could not remove its file by the old name. Only for a folder this process
// alone writes, with none of its writes under way.
void removeOwnTempFiles(const std::string& folder);

} // namespace chatbench
