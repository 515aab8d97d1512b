// chatbench-cli corpus stats|validate — what a corpus holds, or its first problem as file:line.

#include "chatbench/corpusstats.h"
#include "common.h"

#include <iostream>
#include <memory>

namespace cli {

namespace {

struct CorpusArgs {
    std::string path;
    std::string format = chatbench::formatName(chatbench::CorpusFormat::Auto);
    bool latin1 = false;
    int minFrequency = 1;
    std::string mode = chatbench::tokenizerModeName(chatbench::TokenizerOptions {}.mode);
    bool json = false;
};

int stats(const CorpusArgs& a)
{
    const chatbench::Corpus c = loadCorpusArg(a.path, a.format, a.latin1);
    chatbench::TokenizerOptions topt;
    topt.minFrequency = a.minFrequency;
    topt.mode = *chatbench::parseTokenizerMode(a.mode);
    const chatbench::CorpusStats s = chatbench::corpusStats(c, topt);
    std::cout << (a.json ? chatbench::toJson(s, a.path) : chatbench::describe(s, a.path));
    return 0;
}

int validate(const CorpusArgs& a)
{
    const chatbench::Corpus c = loadCorpusArg(a.path, a.format, a.latin1);
    std::cout << "ok: " << c.pairs.size() << " pairs in " << c.files.size() << " file(s), format "
              << chatbench::formatName(c.format) << "\n";
    for (const auto& w : c.warnings)
        std::cout << "warning: " << w << "\n";
    return 0;
}

} // namespace

void addCorpusCommand(CLI::App& app, int& exitCode)
{
    auto args = std::make_shared<CorpusArgs>();
    auto* corpus = app.add_subcommand("corpus", "Inspect a corpus");
    corpus->require_subcommand(1);
    auto* statsCmd = corpus->add_subcommand("stats", "Pairs, vocabulary, OOV rate and lengths");
    auto* validateCmd = corpus->add_subcommand("validate", "Load every record; report the first problem as file:line");
    for (auto* sub : { statsCmd, validateCmd }) {
        sub->add_option("path", args->path, "Corpus file or folder")->required();
        sub->add_option("--format", args->format, chatbench::joinNames(chatbench::formatNames()))
            ->check(oneOf(chatbench::formatNames()));
        sub->add_flag("--latin1", args->latin1, "Decode as Latin-1 instead of UTF-8");
    }
    statsCmd->add_option("--min-freq", args->minFrequency, "Minimum word frequency")->check(CLI::Range(1, 1000000));
    statsCmd->add_option("--tokenizer", args->mode, chatbench::joinNames(chatbench::tokenizerModeNames()))
        ->check(oneOf(chatbench::tokenizerModeNames()));
    statsCmd->add_flag("--json", args->json, "Print JSON");
    statsCmd->callback([args, &exitCode] { exitCode = stats(*args); });
    validateCmd->callback([args, &exitCode] { exitCode = validate(*args); });
}

} // namespace cli
