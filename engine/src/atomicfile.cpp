#include "atomicfile.h"

#include "chatbench/error.h"

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
    return (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(rd()))).string();
}

void syncFile(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

} // namespace

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
