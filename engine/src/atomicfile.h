#pragma once
// Crash-safe file writes (private): a temporary file in the same folder, flushed, then renamed
// over the target, so a reader sees the old file or the new one and never half of one.

#include <functional>
#include <string>

namespace chatbench {

void writeFileAtomic(const std::string& path, const std::string& contents);
// For writers that need a path (torch::save): `write` fills the temporary path given to it.
void writeFileAtomic(const std::string& path, const std::function<void(const std::string& tmpPath)>& write);

// `prefix`<this process' id>-`n``suffix`: the name of a scratch file or folder that
// removeDeadProcessesFiles removes once its process is gone.
std::string processScratchName(const std::string& prefix, uint64_t n, const std::string& suffix = "");

// What writers that were killed left: the files in `folder` named `prefix`<pid>-<n>`suffix`
// (digits for pid and n, nothing else) whose process is gone (writeFileAtomic's temporary files,
// the Keras reader's copies of weights), and with ScratchFolders such folders with what they
// hold (the doctor's and bench races' scratch runs). A live process' file stays; so does a
// folder where files are asked for.
enum class DeadProcesses { Files, ScratchFolders };
void removeDeadProcessesFiles(const std::string& folder, const std::string& prefix, const std::string& suffix = "",
    DeadProcesses what = DeadProcesses::Files);
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
