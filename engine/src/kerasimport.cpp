#include "chatbench/kerasimport.h"

#include "atomicfile.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "checkpoint.h"
#include "kerasfile.h"
#include "runstate.h"
#include "trainstep.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

// The logit given to <unk> when the Keras vocabulary has no oov word: its softmax share is 0 in
// float, so the other probabilities are Keras' own.
constexpr float kAbsentLogit = -1e4f;

// Keras (rows, cols) row-major → a (cols, rows) tensor: kernels become PyTorch's weight layout.
torch::Tensor transposed(const KerasTensor& t)
{
    auto m = torch::from_blob(const_cast<float*>(t.data.data()), { t.shape[0], t.shape[1] }, torch::kFloat32);
    return m.t().contiguous();
}

torch::Tensor vectorOf(const KerasTensor& t)
{
    return torch::from_blob(const_cast<float*>(t.data.data()), { t.shape[0] }, torch::kFloat32).clone();
}

// Removes a folder we created unless the import finished.
class FolderGuard {
public:
    FolderGuard(std::string dir, std::string made)
        : m_dir(std::move(dir))
        , m_made(std::move(made))
    {
    }
    ~FolderGuard()
    {
        if (m_armed)
            removeFailedStart(m_dir, m_made);
    }
    FolderGuard(const FolderGuard&) = delete;
    FolderGuard& operator=(const FolderGuard&) = delete;
    void release() { m_armed = false; }

private:
    std::string m_dir;
    std::string m_made;
    bool m_armed = true;
};

int64_t kerasId(const KerasTokenizer& t, const std::string& word, int64_t limit, const char* what)
{
    for (const auto& [k, w] : t.words) // in order of id: the lowest id a word has, as before
        if (k < limit && w == word)
            return k;
    throw Error(t.file, 0,
        std::string("the tokenizer has no ") + what + " word '" + word
            + "' among the model's ids; give the word the recipe wraps replies in, as the tokenizer keeps it "
              "(lowercased, with < and > removed: '<START>' is 'start')");
}

} // namespace

void checkKerasInputFiles(const KerasImportOptions& opt)
{
    requireModelFile(opt.model);
    (void)readKerasTokenizer(opt.tokenizer); // small: read whole, for every error it can have
}

KerasImport importKeras(const KerasImportOptions& opt, const std::string& runDir)
{
    const std::string advice = "choose another folder";
    requireNewRunPlace(runDir, advice); // before the model is read
    requireThreadsStart(torch::get_num_threads()); // before anything is written: the diagnosis needs them
    const KerasSeq2Seq m = readKerasSeq2Seq(opt.model);
    const KerasTokenizer kt = readKerasTokenizer(opt.tokenizer);
    if (opt.startWord == opt.endWord)
        throw Error("the start and end words must differ");

    KerasImport r;
    r.runDir = runDir;
    r.kerasVocabulary = m.vocabulary;
    r.notes = m.notes;
    // Without num_words every id of the word index reaches the embedding: ids past it are another
    // model's tokenizer (Keras itself fails on them in the embedding lookup).
    if (kt.numWords <= 0 && kt.maxId >= m.vocabulary)
        throw Error(kt.file, 0,
            "the word index reaches id " + std::to_string(kt.maxId) + " but the model's ids are 0-"
                + std::to_string(m.vocabulary - 1) + " (its embedding's input_dim is " + std::to_string(m.vocabulary)
                + "): is it this model's tokenizer?");
    // Ids the tokenizer can produce for this model: below the embedding size and num_words.
    const int64_t limit = kt.numWords > 0 ? std::min(m.vocabulary, kt.numWords) : m.vocabulary;
    const int64_t start = kerasId(kt, opt.startWord, limit, "start");
    const int64_t end = kerasId(kt, opt.endWord, limit, "end");
    int64_t oov = -1;
    if (kt.oovToken)
        oov = kerasId(kt, *kt.oovToken, limit, "oov_token");
    if (oov >= 0 && (start == oov || end == oov))
        throw Error(kt.file, 0,
            "the " + std::string(start == oov ? "start" : "end") + " word '" + printable(*kt.oovToken)
                + "' is the tokenizer's oov_token (the word unknown words become): choose the words the model was "
                  "trained to start and end replies with");

    // Keras id → chatbench id: 0 stays <pad>; oov → <unk>, start → <start>, end → <end>; the other
    // words follow in Keras' order. Rows the tokenizer names no word for keep a placeholder.
    std::vector<int64_t> ours(static_cast<size_t>(m.vocabulary), -1);
    ours[0] = Tokenizer::kPad;
    if (oov >= 0)
        ours[static_cast<size_t>(oov)] = Tokenizer::kUnk;
    ours[static_cast<size_t>(start)] = Tokenizer::kStart;
    ours[static_cast<size_t>(end)] = Tokenizer::kEnd;
    std::vector<std::string> words;
    int64_t unnamed = 0;
    for (int64_t k = 1; k < m.vocabulary; ++k) {
        if (ours[static_cast<size_t>(k)] >= 0)
            continue;
        ours[static_cast<size_t>(k)] = 4 + static_cast<int64_t>(words.size());
        // A word holding white space (a tokenizer split on another character) is never one our
        // tokenizer produces: a placeholder too.
        const auto word = k < limit ? kt.words.find(k) : kt.words.end();
        const bool named = word != kt.words.end() && word->second.find_first_of(" \t\n\r\f\v") == std::string::npos;
        words.push_back(named ? word->second : "<keras-" + std::to_string(k) + ">");
        unnamed += named ? 0 : 1;
    }
    if (unnamed > 0)
        r.notes.push_back(std::to_string(unnamed)
            + " model id(s) have no word the tokenizer can produce (beyond num_words or the word index); they keep "
              "placeholder names like <keras-N>");
    const int64_t V = 4 + static_cast<int64_t>(words.size());

    TokenizerOptions topt;
    topt.mode = TokenizerMode::Keras;
    topt.dropUnknown = oov < 0;
    topt.startWord = opt.startWord; // typed in a prompt, Keras reads them as the start and end ids
    topt.endWord = opt.endWord;
    const Tokenizer tok = [&] {
        try {
            return Tokenizer::fromWords(words, topt);
        } catch (const Error& e) { // a word the tokenizer maps to a model id twice, or one of ours
            throw Error(kt.file, 0, e.message() + " (<pad>, <unk>, <start> and <end> are chatbench's own words)");
        }
    }();
    r.notes.push_back(oov < 0 ? "the tokenizer has no oov_token: unknown words are left out, as Keras does"
                              : "unknown words become '" + *kt.oovToken + "' (<unk>)");
    r.notes.push_back("replies never contain padding (id 0) or '" + opt.startWord
        + "': where a plain argmax loop in Keras would emit padding, chatbench takes the best word instead");

    TrainConfig cfg = preset("seed");
    cfg.model.vocabSize = V;
    cfg.model.embedDim = static_cast<int>(m.embed);
    cfg.model.hidden = static_cast<int>(m.hidden);
    cfg.model.layers = m.layers;
    cfg.model.dropout = 0;
    cfg.model.attention = false;
    cfg.model.sharedEmbedding = m.sharedEmbedding;
    cfg.model.maxSourceLength
        = opt.maxSourceLength > 0 ? opt.maxSourceLength : m.sourceLength.value_or(cfg.model.maxSourceLength);
    const int ownTargetLength = m.targetLength.value_or(cfg.model.maxTargetLength); // without --max-target
    cfg.model.maxTargetLength = opt.maxTargetLength > 0 ? opt.maxTargetLength : ownTargetLength;
    cfg.tokenizer = topt;
    cfg.epochs = 1; // fine-tuning (train --resume with a corpus) trains this many unless told otherwise
    cfg.device = "cpu";
    cfg.precision = Precision::FP32;
    validate(cfg);
    if (!m.sourceLength && opt.maxSourceLength <= 0)
        r.notes.push_back("the model declares no prompt length; prompts keep at most "
            + std::to_string(cfg.model.maxSourceLength) + " words");
    if (!m.targetLength && opt.maxTargetLength <= 0)
        r.notes.push_back("the model declares no reply length; replies stop after "
            + std::to_string(cfg.model.maxTargetLength - 1) + " tokens");

    // The weights.
    torch::NoGradGuard noGrad;
    Stepper step = makeStepper(cfg, torch::Device(torch::kCPU), Precision::FP32);
    Seq2SeqImpl& model = *step.model;
    auto index = torch::tensor(ours, torch::kInt64); // Keras row k → our row ours[k]
    auto scatterRows = [&](torch::Tensor dst, const torch::Tensor& src) { // src (Vk, ...) in Keras order
        dst.zero_();
        dst.index_copy_(0, index, src);
    };
    auto emb = [](const KerasTensor& t) {
        return torch::from_blob(const_cast<float*>(t.data.data()), { t.shape[0], t.shape[1] }, torch::kFloat32);
    };
    scatterRows(model.encoderEmbedding->weight, emb(m.encoderEmbedding));
    if (!m.sharedEmbedding)
        scatterRows(model.decoderEmbedding->weight, emb(m.decoderEmbedding));
    auto copyLstm = [](torch::nn::LSTM& lstm, const std::vector<KerasLstm>& layers) {
        auto p = lstm->named_parameters();
        for (size_t l = 0; l < layers.size(); ++l) {
            const std::string k = "_l" + std::to_string(l);
            p["weight_ih" + k].copy_(transposed(layers[l].kernel)); // (4u, in), gates i, f, g(=c), o
            p["weight_hh" + k].copy_(transposed(layers[l].recurrent)); // (4u, u)
            p["bias_ih" + k].copy_(vectorOf(layers[l].bias));
            p["bias_hh" + k].zero_();
        }
    };
    copyLstm(model.encoder, m.encoder);
    copyLstm(model.decoder, m.decoder);
    scatterRows(model.output->weight, transposed(m.denseKernel)); // (V, H)
    model.output->bias.zero_();
    model.output->bias.index_copy_(0, index, vectorOf(m.denseBias));
    if (oov < 0) {
        model.output->bias[Tokenizer::kUnk] = kAbsentLogit; // no Keras class: never chosen, probability 0
        r.notes.push_back("<unk> has no Keras output class: its logit is fixed at -10000 (probability 0)");
    }

    // The run folder; removed again if anything below fails.
    requireNewRunPlace(runDir, advice); // again: reading the model and the diagnosis take a while
    std::string made;
    const RunLock lock
        = lockNewRunFolder(runDir, made); // before the guard: a folder another writer holds is never cleaned
    requireNewRunFolder(runDir, advice);
    FolderGuard guard(runDir, made);
    writeFileAtomic(configPath(runDir), toJson(cfg));
    tok.save(vocabPath(runDir));
    RunState state; // step 0, no corpus yet: the first resume binds the corpus it is given
    state.vocabFingerprint = vocabularyFingerprint(tok);
    saveCheckpoint(runDir, step.model, *step.optimizer, state);
    writeMetricsCsv(runDir, {});
    r.config = cfg;

    nlohmann::ordered_json j;
    j["format"] = "chatbench-keras-import";
    j["version"] = 1;
    j["model"] = fs::absolute(opt.model).string();
    j["tokenizer"] = fs::absolute(opt.tokenizer).string();
    j["start_word"] = opt.startWord;
    j["end_word"] = opt.endWord;
    j["oov_token"] = kt.oovToken ? nlohmann::ordered_json(*kt.oovToken) : nlohmann::ordered_json();
    j["keras_vocabulary"] = m.vocabulary;
    j["notes"] = r.notes;
    writeFileAtomic((fs::path(runDir) / "keras-import.json").string(),
        j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    guard.release();

    if (!opt.prompts.empty()) {
        r.diagnosis = diagnoseHandoff(Chatbot::load(runDir), opt.prompts);
        // Replies that all run to a length the user shortened were cut by it: the verdict blamed
        // the tokenizer and the end word (found by an outside pass with --max-target 3).
        const auto& handedOver = r.diagnosis.modes.front();
        const int n = r.diagnosis.prompts;
        if (opt.maxTargetLength > 0 && opt.maxTargetLength < ownTargetLength && n >= 2
            && handedOver.unended * 10 >= n * 9)
            r.diagnosis.verdict = "Replies were cut by --max-target " + std::to_string(opt.maxTargetLength) + ": "
                + std::to_string(handedOver.unended) + " of " + std::to_string(n) + " ran to its "
                + std::to_string(opt.maxTargetLength - 1) + " words without the end word. Import with a larger "
                + "--max-target (without it, replies may have " + std::to_string(ownTargetLength - 1)
                + " words) to see whether they end; until they do, their count says nothing about the decoding loop.";
    }
    return r;
}

std::vector<std::string> samplePrompts(const std::vector<Pair>& pairs, int n)
{
    std::vector<std::string> out;
    std::set<std::string> seen;
    const size_t stride = std::max<size_t>(1, pairs.size() / static_cast<size_t>(std::max(1, n)));
    for (size_t i = 0; i < pairs.size() && static_cast<int>(out.size()) < n; i += stride)
        if (seen.insert(pairs[i].prompt).second)
            out.push_back(pairs[i].prompt);
    return out;
}

std::string describe(const KerasImport& r)
{
    std::ostringstream o;
    const ModelConfig& mc = r.config.model;
    o << "imported into " << printable(r.runDir) << ": " << mc.layers << " layer(s), E=" << mc.embedDim
      << ", H=" << mc.hidden << ", vocabulary " << mc.vocabSize << " (Keras " << r.kerasVocabulary << "), prompts ≤ "
      << mc.maxSourceLength << " words, replies ≤ " << mc.maxTargetLength - 1 << " tokens\n";
    for (const auto& n : r.notes)
        o << "note: " << n << "\n";
    if (!r.diagnosis.modes.empty())
        o << "\n" << describe(r.diagnosis);
    return o.str();
}

} // namespace chatbench
