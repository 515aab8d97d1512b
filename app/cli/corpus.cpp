// chatbench-cli corpus stats|validate|export — what a corpus holds, its first problem as file:line,
// or its pairs as TSV or JSON Lines for other tools.

#include "chatbench/corpusstats.h"
#include "chatbench/error.h"
#include "common.h"

#include <iostream>
#include <memory>

namespace cli {

namespace {

struct CorpusArgs {
    std::string path;
    CorpusFlags corpus;
    int minFrequency = 1;
    std::string mode = chatbench::tokenizerModeName(chatbench::TokenizerOptions {}.mode);
    bool json = false;
    std::string out; // export: the file to write
};

int stats(const CorpusArgs& a)
{
    // The table (or JSON) lists the skipped records itself.
    const chatbench::Corpus c = chatbench::loadCorpus(a.path, a.corpus.options());
    chatbench::TokenizerOptions topt;
    topt.minFrequency = a.minFrequency;
    topt.mode = *chatbench::parseTokenizerMode(a.mode);
    const chatbench::CorpusStats s = chatbench::corpusStats(c, topt);
    std::cout << (a.json ? chatbench::toJson(s, a.path)
                         : chatbench::describe(s, a.path, a.corpus.verbose ? s.warnings.size() : kWarningsShown));
    if (!a.json && !a.corpus.verbose && s.warnings.size() > kWarningsShown)
        std::cout << "(--verbose lists them all)\n";
    return 0;
}

int validate(const CorpusArgs& a)
{
    const chatbench::Corpus c = loadCorpusArg(a.path, a.corpus);
    std::cout << "ok: " << c.pairs.size() << (c.pairs.size() == 1 ? " pair (" : " pairs (")
              << chatbench::pairingName(c.pairing) << " pairing) in " << c.files.size() << " file(s), format "
              << chatbench::formatName(c.format);
    if (c.skippedRecords() + c.skippedFiles() > 0)
        std::cout << "; skipped " << c.skippedRecords() << " malformed record(s) and " << c.skippedFiles()
                  << " unreadable file(s)";
    std::cout << "\n";
    return 0;
}

// The pairs exactly as training would see them (format, pairing and skipped records alike), for a
// tool that reads only TSV (the side-by-side peers), or as JSON Lines (--out NAME.jsonl), which
// keeps every character of the texts. `--out -` (or /dev/stdout, which `>> file`
// appends to) prints the pairs there, and the summary on standard error.
int exportPairs(const CorpusArgs& a)
{
    const bool toStandardOutput = namesStandardOutput(a.out);
    if (toStandardOutput)
        checkStandardOutputFile({ a.path });
    else
        checkOutputFile(a.out, { a.path }, "'-' writes the pairs there");
    if (!toStandardOutput)
        (void)chatbench::exportFormat(a.out); // a name read back as another format: said before the work
    const chatbench::Corpus c = loadCorpusArg(a.path, a.corpus);
    if (toStandardOutput) {
        std::cout << chatbench::pairsTsv(c.pairs) << std::flush;
        if (!std::cout || standardOutputWasClosed())
            return 0; // main says why the output did not arrive, and fails
    } else {
        chatbench::writePairs(c.pairs, a.out);
    }
    (toStandardOutput ? std::cerr : std::cout)
        << "wrote " << c.pairs.size() << (c.pairs.size() == 1 ? " pair (" : " pairs (")
        << chatbench::pairingName(c.pairing) << " pairing) to "
        << (toStandardOutput ? std::string("standard output") : chatbench::printable(a.out)) << "\n";
    return 0;
}

} // namespace

void addCorpusCommand(CLI::App& app, int& exitCode)
{
    auto args = std::make_shared<CorpusArgs>();
    auto* corpus = app.add_subcommand("corpus", "Inspect a corpus");
    corpus->require_subcommand(1);
    auto* statsCmd = corpus->add_subcommand("stats", "Pairs, vocabulary, OOV rate and lengths");
    auto* validateCmd = corpus->add_subcommand(
        "validate", "Load every record; report what is skipped as file:line (--strict: fail on the first)");
    auto* exportCmd = corpus->add_subcommand("export",
        "Write the pairs as training reads them: TSV (prompt<TAB>response), or JSON Lines for an --out named "
        ".jsonl, .json or .ndjson");
    for (auto* sub : { statsCmd, validateCmd, exportCmd }) {
        sub->add_option("path", args->path, "Corpus file or folder")->required();
        addCorpusFlags(sub, args->corpus);
    }
    statsCmd->add_option("--min-freq", args->minFrequency, "Minimum word frequency")->check(CLI::Range(1, 1000000));
    statsCmd->add_option("--tokenizer", args->mode, chatbench::joinNames(chatbench::tokenizerModeNames()))
        ->check(oneOf(chatbench::tokenizerModeNames()));
    statsCmd->add_flag("--json", args->json, "Print JSON");
    statsCmd->callback([args, &exitCode] { exitCode = stats(*args); });
    validateCmd->callback([args, &exitCode] { exitCode = validate(*args); });
    exportCmd
        ->add_option("--out", args->out,
            "The file to write: NAME.jsonl, .json or .ndjson for JSON Lines (one object a line), else TSV ('-': TSV on "
            "standard output)")
        ->required();
    exportCmd->callback([args, &exitCode] { exitCode = exportPairs(*args); });
}

} // namespace cli
