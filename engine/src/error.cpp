#include "chatbench/error.h"

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

} // namespace chatbench
