#include "common.h"

#include "chatbench/error.h"

#include <csignal>
#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace cli {

namespace {

void onSignal(int)
{
    if (cancelFlag().exchange(true))
        std::_Exit(130); // a second Ctrl-C leaves at once
}

} // namespace

std::atomic<bool>& cancelFlag()
{
    static std::atomic<bool> flag { false };
    return flag;
}

void installSignalHandlers()
{
    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
}

CLI::IsMember oneOf(const std::vector<std::string>& names)
{
    return CLI::IsMember(names);
}

chatbench::Corpus loadCorpusArg(const std::string& path, const std::string& format, bool latin1)
{
    const auto f = chatbench::parseFormat(format);
    if (!f)
        throw chatbench::Error(
            "unknown corpus format '" + format + "' (" + chatbench::joinNames(chatbench::formatNames()) + ")");
    chatbench::LoadOptions opt;
    opt.format = *f;
    opt.latin1 = latin1;
    return chatbench::loadCorpus(path, opt);
}

std::string fixed(double v, int digits)
{
    std::ostringstream o;
    o << std::fixed << std::setprecision(digits) << v;
    return o.str();
}

} // namespace cli
