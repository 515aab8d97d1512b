// chatbench-cli import-keras — a Keras seq2seq chatbot (.keras or .h5 + tokenizer JSON) into a
// run folder every --run command takes, with the handoff diagnosis on a corpus' prompts.

#include "chatbench/corpus.h"
#include "chatbench/error.h"
#include "chatbench/kerasimport.h"
#include "common.h"

#include <iostream>
#include <memory>

namespace cli {

namespace {

using namespace chatbench;

struct ImportArgs {
    std::string model;
    std::string tokenizer;
    std::string out;
    std::string startWord = KerasImportOptions {}.startWord;
    std::string endWord = KerasImportOptions {}.endWord;
    int maxSource = 0;
    int maxTarget = 0;
    std::string corpus;
    CorpusFlags corpusFlags;
    int prompts = 30;
};

int run(const ImportArgs& a)
{
    KerasImportOptions opt;
    opt.model = a.model;
    opt.tokenizer = a.tokenizer;
    opt.startWord = a.startWord;
    opt.endWord = a.endWord;
    opt.maxSourceLength = a.maxSource;
    opt.maxTargetLength = a.maxTarget;
    if (a.prompts > 0) {
        checkKerasInputFiles(opt); // a mistyped model is said before a corpus is loaded for nothing
        const std::string path = a.corpus.empty() ? defaultCorpusPath() : a.corpus;
        opt.prompts = samplePrompts(loadCorpusArg(path, a.corpusFlags, a.corpus.empty()).pairs, a.prompts);
        std::cout << "diagnosis prompts: " << opt.prompts.size() << " from " << chatbench::printable(path) << "\n";
    }
    const KerasImport r = importKeras(opt, a.out);
    std::cout << describe(r);
    std::cout << "chat with it: chatbench-cli chat --run " << shellWord(a.out) << "\n";
    return 0;
}

} // namespace

void addImportKerasCommand(CLI::App& app, int& exitCode)
{
    auto a = std::make_shared<ImportArgs>();
    auto* cmd = app.add_subcommand("import-keras",
        "Import a Keras seq2seq chatbot (.keras or legacy .h5) and its tokenizer into a run folder, and diagnose "
        "its decoding loop");
    cmd->add_option("model", a->model, "The Keras model file (.keras or .h5)")->required();
    cmd->add_option("--tokenizer", a->tokenizer, "The Keras Tokenizer's to_json() output")->required();
    cmd->add_option("--out", a->out, "Run folder to create")->required();
    cmd->add_option("--start-word", a->startWord, "The word the recipe starts replies with, as the tokenizer keeps it")
        ->capture_default_str();
    cmd->add_option("--end-word", a->endWord, "The word the recipe ends replies with")->capture_default_str();
    cmd->add_option("--max-source", a->maxSource, "Prompt words kept (default: the model's input length, else 22)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option(
           "--max-target", a->maxTarget, "Reply tokens, start and end included (default: the model's, else 74)")
        ->check(CLI::Range(3, 4096));
    cmd->add_option(
        "--corpus", a->corpus, std::string("Corpus whose prompts the diagnosis asks (") + kDefaultCorpusHelp + ")");
    addCorpusFlags(cmd, a->corpusFlags);
    cmd->add_option("--prompts", a->prompts, "Prompts the diagnosis asks; 0 = no diagnosis")
        ->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

} // namespace cli
