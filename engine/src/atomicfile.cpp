#include "atomicfile.h"

#include "chatbench/error.h"
#include "chatbench/outputfile.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <signal.h>
#include <string_view>
#include <sys/resource.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

// ".<name>.tmp-": what the temporary files of `path` start with. Short enough for any name the
// folder takes (255 bytes): a long name is cut in its temporary one.
std::string tempPrefixFor(const fs::path& path)
{
    return "." + path.filename().string().substr(0, 200) + ".tmp-";
}

// ".<name>.tmp-<pid>-<n>": the writer's process is in the name, so that another writer can tell a
// dead writer's file (removeDeadProcessesFiles) from one being written.
std::string tempNameFor(const std::string& path)
{
    std::random_device rd;
    const fs::path p(path);
    return (p.parent_path() / processScratchName(tempPrefixFor(p), rd())).string();
}

// The temporary files of writes in progress, for a signal handler to remove
// (removeTempFilesInProgress): a slot is free (0), being filled (1) or holds a path (2).
struct PendingSlot {
    std::atomic<int> state { 0 };
    char path[4096];
};
PendingSlot g_pending[16];

// Registers `tmp`; the slot to release, or -1 when none is free (the file is then only removed
// by the writer, or by the next one after a kill).
int registerPending(const std::string& tmp)
{
    if (tmp.size() >= sizeof(PendingSlot::path))
        return -1;
    for (int i = 0; i < 16; ++i) {
        int free = 0;
        if (g_pending[i].state.compare_exchange_strong(free, 1)) {
            std::memcpy(g_pending[i].path, tmp.c_str(), tmp.size() + 1);
            g_pending[i].state.store(2);
            return i;
        }
    }
    return -1;
}

} // namespace

namespace {

// "<pid>-<n>" (digits, a dash, digits, nothing else): the process; -1 for anything else (a user's
// ".out.tmp-1-old", another output's ".out.tmp-1-x.tmp-…", names from before the process was in them).
pid_t writerOf(std::string_view rest)
{
    const size_t dash = rest.find('-');
    const auto digits
        = [](std::string_view s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos; };
    if (dash == std::string_view::npos || dash > 9 || !digits(rest.substr(0, dash)) || !digits(rest.substr(dash + 1)))
        return -1;
    return static_cast<pid_t>(std::stol(std::string(rest.substr(0, dash))));
}

// Alive, or not ours to tell (another user's: EPERM).
bool alive(pid_t pid)
{
    return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH);
}

} // namespace

std::string processScratchName(const std::string& prefix, uint64_t n, const std::string& suffix)
{
    return prefix + std::to_string(::getpid()) + "-" + std::to_string(n) + suffix;
}

void removeDeadProcessesFiles(
    const std::string& folder, const std::string& prefix, const std::string& suffix, DeadProcesses what)
{
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() < prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
            continue;
        const pid_t pid
            = writerOf(std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
        if (pid > 0 && !alive(pid)) {
            std::error_code e2;
            if (what == DeadProcesses::ScratchFolders)
                fs::remove_all(it->path(), e2); // a killed doctor's or race's run; a link, not what it names
            else if (!it->is_directory(e2) || it->is_symlink(e2))
                fs::remove(it->path(), e2); // a folder of that name in a user's output folder is not ours
        }
    }
}

bool tempFileWriterIsAlive(const std::string& fileName)
{
    const size_t at = fileName.rfind(".tmp-");
    if (at == std::string::npos)
        return false;
    const pid_t pid = writerOf(std::string_view(fileName).substr(at + 5));
    return pid != ::getpid() && alive(pid);
}

namespace {

// Bytes as MiB with one decimal, rounded down (room there is) or up (room needed), so that a
// small file is never "0 MiB needed" and a nearly full disk never shows more room than it has.
std::string mebibytes(uintmax_t bytes, bool up)
{
    const uintmax_t tenths = (bytes * 10 + (up ? (uintmax_t(1) << 20) - 1 : 0)) >> 20;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

// "512 bytes", "9.2 KiB", "8.7 MiB": a size that may be small, in the unit that shows it.
std::string sizeInWords(uintmax_t bytes)
{
    if (bytes < 1024)
        return std::to_string(bytes) + " bytes";
    if (bytes < (uintmax_t(1) << 20)) {
        const uintmax_t tenths = bytes * 10 / 1024;
        return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " KiB";
    }
    return mebibytes(bytes, false) + " MiB";
}

// Flushes the file to the disk, then lets its pages go from the cache: what is written here
// (checkpoints, run files, outputs) is not read back by the writer. A 16 MB checkpoint written
// while the last ones' pages were still cached took 15–39 ms in one write() (the kernel finding
// pages for it); with the pages let go after each save, 4–5 ms.
void syncFile(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
        if (::fsync(fd) == 0)
            ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); // clean once synced: dropped, not written again
        ::close(fd);
    }
}

// The file a user's output path names: through symbolic links (at most 40, as the kernel allows).
fs::path resolveOutput(const std::string& path)
{
    fs::path p(path);
    std::error_code ec;
    // What the links lead to, as the system sees it: /dev/stdout into a pipe leads through
    // /proc/self/fd/1 to "pipe:[N]", a name that is no file.
    if (const fs::file_status to = fs::status(p, ec);
        fs::exists(to) && !fs::is_regular_file(to) && !fs::is_directory(to))
        throw Error(path, 0,
            std::string("is not a regular file (a pipe, device or socket")
                + (fs::is_symlink(fs::symlink_status(p, ec)) ? ", through its link" : "")
                + "); outputs are written to files");
    for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
        if (hops == 40)
            throw Error(path, 0, "too many levels of symbolic links");
        const fs::path to = fs::read_symlink(p, ec);
        if (ec)
            throw Error(path, 0, "cannot read the link: " + ec.message());
        p = to.is_absolute() ? to : p.parent_path() / to;
    }
    const fs::file_status st = fs::status(p, ec);
    if (fs::is_directory(st))
        throw Error(path, 0, "is a folder; give a file name");
    const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_directory(folder, ec))
        throw Error(path, 0,
            "its folder " + printable(folder.string())
                + (fs::exists(folder, ec) ? " is not a folder (a file?)" : " does not exist"));
    return p;
}

} // namespace

void checkOutputPath(const std::string& path)
{
    const fs::path p = resolveOutput(path);
    // The file is written beside itself and renamed into place: its folder must take a new file.
    // Tried with an unnamed one, which leaves nothing behind, before the work (a read-only file
    // system failed `bench --out` after all its timing). A file system without unnamed files
    // leaves it to the write.
    const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const int fd = ::open(folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ::close(fd);
        return;
    }
    const int err = errno;
    if (err == EACCES || err == EPERM || err == EROFS || err == ENOSPC || err == EDQUOT)
        throw Error(path, 0,
            "its folder " + printable(folder.string()) + " cannot take a new file (" + std::strerror(err) + ")");
}

void writeOutputFile(const std::string& path, const std::string& contents)
{
    if (path.empty())
        throw Error("no output file given (the path is empty)");
    const fs::path target = resolveOutput(path);
    removeDeadProcessesFiles(target.has_parent_path() ? target.parent_path().string() : ".", tempPrefixFor(target));
    try {
        writeFileAtomic(target.string(), contents);
    } catch (const Error& e) {
        if (target.string() == path)
            throw;
        throw Error(path, 0, std::string("through its link to ") + printable(target.string()) + ": " + e.what());
    }
}

void writeFileAtomic(const std::string& path, const std::function<void(const std::string&)>& write)
{
    const std::string tmp = tempNameFor(path);
    const int slot = registerPending(tmp);
    struct Release {
        int slot;
        ~Release()
        {
            if (slot >= 0)
                g_pending[slot].state.store(0);
        }
    } release { slot };
    try {
        write(tmp);
        syncFile(tmp);
        std::error_code ec;
        // Readable by its owner whatever the umask (444 made a run's files write-only: a run that
        // could not be read back; found by an outside pass).
        fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ec);
        fs::rename(tmp, path, ec);
        if (ec)
            throw Error(path, 0, "cannot replace file: " + ec.message());
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
}

void removeTempFilesInProgress() noexcept
{
    for (PendingSlot& slot : g_pending)
        if (slot.state.load() == 2)
            ::unlink(slot.path);
}

void writeFileAtomic(const std::string& path, const std::string& contents)
{
    writeFileAtomic(path, [&](const std::string& tmp) {
        std::FILE* f = std::fopen(tmp.c_str(), "wb");
        if (!f)
            throw Error(path, 0, std::string("cannot write file: ") + std::strerror(errno));
        errno = 0;
        const size_t n = std::fwrite(contents.data(), 1, contents.size(), f);
        bool ok = n == contents.size() && std::fflush(f) == 0;
        int err = errno;
        if (std::fclose(f) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok) {
            // Say where and how much room there is: the usual cause is a full disk. The part
            // written goes first, so the free space is what a retry would have.
            std::error_code ec;
            fs::remove(tmp, ec);
            ec.clear();
            const fs::path folder = fs::absolute(fs::path(path)).parent_path();
            const auto space = fs::space(folder, ec);
            std::string why
                = "write failed (" + std::string(err ? std::strerror(err) : "short write") + ") in " + folder.string();
            if (const std::string limit = err == EFBIG ? fileSizeLimitNote(contents.size()) : std::string();
                !limit.empty())
                why += ": " + limit;
            else if (!ec)
                why += "; " + mebibytes(space.available, false) + " MiB free there, " + mebibytes(contents.size(), true)
                    + " MiB needed";
            throw Error(path, 0, why);
        }
    });
}

std::string fileSizeLimitNote(uintmax_t bytes)
{
    struct rlimit limit { };
    if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || bytes <= limit.rlim_cur)
        return {};
    return "this process may write files of at most " + sizeInWords(limit.rlim_cur)
        + " (the file-size limit, ulimit -f) and this one takes " + sizeInWords(bytes) + "; raise the limit";
}

void removeOwnTempFiles(const std::string& folder)
{
    const std::string mine = ".tmp-" + std::to_string(::getpid()) + "-";
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
        if (const std::string name = it->path().filename().string();
            name.size() > 1 && name[0] == '.' && name.find(mine) != std::string::npos) {
            std::error_code e2;
            fs::remove(it->path(), e2);
        }
}

std::string temporaryFolder(const std::string& use)
{
    const char* dir = std::getenv("TMPDIR");
    if (!dir || !*dir)
        return "/tmp";
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw Error("TMPDIR=" + printable(dir) + " is not a folder (" + (ec ? ec.message() : "not a directory") + "); "
            + use + ": set TMPDIR to a writable folder, or unset it");
    return dir;
}

} // namespace chatbench
