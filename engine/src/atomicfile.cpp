#include "atomicfile.h"

#include "chatbench/error.h"
#include "chatbench/outputfile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

std::string tempNameFor(const std::string& path)
{
    std::random_device rd;
    const fs::path p(path);
    // Short enough for any name the folder takes (255 bytes): a long name is cut in its temporary one.
    const std::string name = p.filename().string();
    return (p.parent_path() / ("." + name.substr(0, 200) + ".tmp-" + std::to_string(rd()))).string();
}

void syncFile(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

// The file a user's output path names: through symbolic links (at most 40, as the kernel allows).
fs::path resolveOutput(const std::string& path)
{
    fs::path p(path);
    std::error_code ec;
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
    if (fs::exists(st) && !fs::is_regular_file(st))
        throw Error(path, 0,
            std::string("is not a regular file (a pipe, device or socket")
                + (p.string() != path ? ", through its link" : "") + "); outputs are written to files");
    const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_directory(folder, ec))
        throw Error(path, 0, "its folder " + printable(folder.string()) + " does not exist");
    return p;
}

} // namespace

void checkOutputPath(const std::string& path)
{
    (void)resolveOutput(path);
}

void writeOutputFile(const std::string& path, const std::string& contents)
{
    if (path.empty())
        throw Error("no output file given (the path is empty)");
    const fs::path target = resolveOutput(path);
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
    try {
        write(tmp);
        syncFile(tmp);
        std::error_code ec;
        fs::rename(tmp, path, ec);
        if (ec)
            throw Error(path, 0, "cannot replace file: " + ec.message());
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
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
            // Say where and how much room there is: the usual cause is a full disk.
            std::error_code ec;
            const fs::path folder = fs::absolute(fs::path(path)).parent_path();
            const auto space = fs::space(folder, ec);
            std::string why
                = "write failed (" + std::string(err ? std::strerror(err) : "short write") + ") in " + folder.string();
            if (!ec)
                why += "; " + std::to_string(space.available / (1024 * 1024)) + " MiB free there, "
                    + std::to_string(contents.size() / (1024 * 1024) + 1) + " MiB needed";
            throw Error(path, 0, why);
        }
    });
}

} // namespace chatbench
