#include "common.h"

#include "chatbench/error.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iomanip>
#include <iostream>
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

CLI::Validator finiteIn(double lo, double hi)
{
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
            double v = 0;
            try {
                size_t used = 0;
                v = std::stod(text, &used);
                if (used != text.size())
                    return "'" + text + "' is not a number";
            } catch (const std::exception&) {
                return "'" + text + "' is not a number";
            }
            if (!std::isfinite(v) || v < lo || v > hi) {
                std::ostringstream o;
                o << "'" << text << "' must be a finite number in [" << lo << ", " << hi << "]";
                return o.str();
            }
            return {};
        },
        "NUMBER in [" + fixed(lo, 4) + ", " + fixed(hi, 4) + "]");
}

chatbench::LoadOptions CorpusFlags::options() const
{
    chatbench::LoadOptions opt;
    opt.format = *chatbench::parseFormat(format);
    opt.latin1 = latin1;
    opt.pairing = *chatbench::parsePairing(pairing);
    opt.strict = strict;
    opt.maxTextBytes = static_cast<int64_t>(maxMiB) << 20;
    return opt;
}

void addCorpusFlags(CLI::App* cmd, CorpusFlags& f)
{
    using namespace chatbench;
    cmd->add_option("--format", f.format, "Corpus format: " + joinNames(formatNames()))
        ->check(oneOf(formatNames()))
        ->capture_default_str();
    cmd->add_flag("--latin1", f.latin1, "Decode the corpus as Latin-1 instead of UTF-8");
    cmd->add_option("--pairing", f.pairing,
           "How turns become pairs: consecutive (every turn answers the one before) or first-rest (the first turn "
           "answered by the others joined, as the Keras recipe does)")
        ->check(oneOf(pairingNames()))
        ->capture_default_str();
    cmd->add_flag("--strict", f.strict, "Fail on the first malformed record instead of skipping it");
    cmd->add_flag("--verbose", f.verbose, "List every skipped record");
    cmd->add_option("--max-corpus-mb", f.maxMiB, "The most text a corpus may hold, in MiB")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
}

chatbench::Corpus loadCorpusArg(const std::string& path, const CorpusFlags& flags)
{
    chatbench::Corpus c = chatbench::loadCorpus(path, flags.options());
    const size_t shown = flags.verbose ? c.warnings.size() : kWarningsShown;
    std::cerr << chatbench::describeWarnings(c.warnings, shown);
    if (c.warnings.size() > shown)
        std::cerr << "(--verbose lists them all)\n";
    return c;
}

std::string fixed(double v, int digits)
{
    std::ostringstream o;
    o << std::fixed << std::setprecision(digits) << v;
    return o.str();
}

} // namespace cli
