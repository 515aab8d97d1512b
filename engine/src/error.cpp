#include "chatbench/error.h"

#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace chatbench {

namespace {
std::string located(const std::string& file, long line, const std::string& message)
{
    if (file.empty())
        return message;
    if (line <= 0)
        return printable(file) + ": " + message;
    return printable(file) + ":" + std::to_string(line) + ": " + message;
}
} // namespace

Error::Error(const std::string& message)
    : std::runtime_error(message)
    , m_message(message)
{
}

Error::Error(const std::string& file, long line, const std::string& message)
    : std::runtime_error(located(file, line, message))
    , m_file(file)
    , m_line(line)
    , m_message(message)
{
}

std::string inWords(const std::string& what)
{
    if (what == "std::bad_alloc")
        return "out of memory (an allocation failed)";
    if (what.find("can't allocate memory") == std::string::npos)
        return what.substr(0, what.find('\n'));
    // "[enforce fail at alloc_cpu.cpp:…] … DefaultCPUAllocator: can't allocate memory: you tried
    // to allocate 5368709120 bytes. Error code 12 …"
    const std::string key = "tried to allocate ";
    const size_t at = what.find(key);
    if (at == std::string::npos)
        return "out of memory (the CPU allocator refused a tensor)";
    const double bytes = std::strtod(what.c_str() + at + key.size(), nullptr);
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o << "out of memory: the CPU allocator could not get ";
    if (bytes >= 1e9)
        o << std::setprecision(2) << bytes / 1e9 << " GB";
    else if (bytes >= 1e6)
        o << std::setprecision(1) << bytes / 1e6 << " MB";
    else
        o << std::setprecision(1) << bytes / 1e3 << " kB";
    o << " for one tensor";
    return o.str();
}

} // namespace chatbench
