#pragma once
// What every harness shares: the input as a file (the parsers read files), and the rule that a
// chatbench::Error is a correct answer to bad input while anything else is a finding.

#include "chatbench/corpus.h"
#include "chatbench/error.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace fuzz {

// A file of this process in /dev/shm (memory), rewritten for every input.
inline const std::string& scratch(const char* name)
{
    static const std::string dir = [] {
        std::string d = "/dev/shm/chatbench-fuzz-" + std::to_string(::getpid());
        ::mkdir(d.c_str(), 0700);
        return d;
    }();
    static std::string path;
    path = dir + "/" + name;
    return path;
}

inline void write(const std::string& path, const uint8_t* data, size_t size)
{
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        __builtin_trap();
    if (size)
        std::fwrite(data, 1, size, f);
    std::fclose(f);
}

// Runs `parse`; an Error (bad input named with file:line) is fine, any other exception is not.
template <typename Parse> void expectCleanOutcome(Parse&& parse)
{
    try {
        parse();
    } catch (const chatbench::Error&) {
    }
}

// A corpus file in `format` (named input.<ext>): loaded strict with consecutive pairs, tolerant
// with first-rest pairs, and its format detected.
inline void corpusFile(const uint8_t* data, size_t size, chatbench::CorpusFormat format, const char* ext)
{
    const std::string path = scratch((std::string("input.") + ext).c_str());
    write(path, data, size);
    for (int mode = 0; mode < 2; ++mode)
        expectCleanOutcome([&] {
            chatbench::LoadOptions opt;
            opt.format = format;
            opt.strict = mode == 0;
            opt.pairing = mode == 0 ? chatbench::Pairing::Consecutive : chatbench::Pairing::FirstRest;
            opt.maxTextBytes = 8 << 20;
            (void)chatbench::loadCorpus(path, opt);
        });
    expectCleanOutcome([&] { (void)chatbench::detectFormat(path); });
}

} // namespace fuzz
