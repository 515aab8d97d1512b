#include "atomicfile.h"

#include "chatbench/error.h"

#include <cstdio>
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
            throw Error(path, 0, "cannot write file");
        const size_t n = std::fwrite(contents.data(), 1, contents.size(), f);
        const bool ok = n == contents.size() && std::fflush(f) == 0;
        std::fclose(f);
        if (!ok)
            throw Error(path, 0, "write failed (disk full?)");
    });
}

} // namespace chatbench
