#pragma once
// Chatting with a trained run, and the state trace of every reply.
//
//   auto bot = chatbench::Chatbot::load("runs/demo");          // cpu by default
//   chatbench::DecodeOptions opt;                               // greedy
//   chatbench::Reply r = bot.reply("how are you?", opt);
//   std::cout << r.text << "\n";
//   bool ok = r.trace.checks.handoffEqual && r.trace.checks.stateCarried
//             && r.trace.checks.teacherForcedEqual;
//   std::cout << chatbench::toJson(r) << "\n";                  // the whole trace
//
// HandoffMode::ZeroInit reproduces the classic bug (decoder starts from zeros: the same reply
// to every question); ResetEachStep drops the state between decoder steps. Both make the
// corresponding checks fail.

#include "chatbench/config.h"
#include "chatbench/names.h"
#include "chatbench/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chatbench {

struct DecodeOptions {
    DecodeMethod method = DecodeMethod::Greedy;
    int beamWidth = 4; // beam search hypotheses
    double temperature = 1.0; // sampling temperature (> 0)
    int topK = 0; // sample among the k most likely tokens; 0 = all
    uint64_t seed = 0; // sampling seed
    int maxLength = 0; // reply tokens at most; 0 = the model's max target length
    int traceTopK = 5; // top-k entries recorded per decoder step
    HandoffMode handoff = HandoffMode::Correct;
    bool recordLogits = false; // keep every step's full logits in the trace (for device parity checks)
    // false: a greedy reply with the correct handoff on the CPU skips the state trace and its
    // checks (only the input words are kept) and takes the fast batch-1 path; other requests trace anyway.
    bool trace = true;
    // Set (from any thread) to abandon the reply: checked at every step of the traced, sampled,
    // beam and batched decoders (not the untraced greedy path, a few milliseconds in all); the
    // reply then throws Error("reply cancelled"). The window sets it when it closes.
    const std::atomic<bool>* cancel = nullptr;
    // What-if decoding: the reply's first tokens, taken instead of the decoder's own choices (the
    // state is carried through them as through any step); `method` decides the rest. Only the
    // last may be <end> (the reply ends there); <pad> and <start> are errors. Traced replies only.
    std::vector<int64_t> forcedPrefix;
};

struct LayerState {
    std::vector<float> h; // (H)
    std::vector<float> c; // (H)
};

struct TokenProbability {
    int64_t id = 0;
    std::string word;
    float probability = 0;
};

struct DecoderStep {
    int64_t inputId = 0; // token fed in
    std::string inputWord;
    int64_t chosenId = 0; // token chosen (may be <end>)
    std::string chosenWord;
    std::vector<TokenProbability> topK; // most likely next tokens (softmax at temperature 1)
    std::vector<LayerState> stateIn; // per layer, the state this step started from
    std::vector<LayerState> stateOut; // per layer, the state it produced
    std::vector<float> inputGate; // top layer, sigmoid(i)
    std::vector<float> forgetGate; // top layer, sigmoid(f)
    std::vector<float> cellGate; // top layer, tanh(g)
    std::vector<float> outputGate; // top layer, sigmoid(o)
    std::vector<float> attention; // weights over the source tokens (empty without attention)
    std::vector<float> logits; // all V logits, only with DecodeOptions::recordLogits
    double milliseconds = 0; // wall time of the step
};

struct TraceChecks {
    double handoffMaxDiff = 0; // max |decoder initial − encoder final| over layers, h and c
    bool handoffEqual = false; // exactly 0
    double carriedMaxDiff = 0; // max |step t input state − step t−1 output state|
    bool stateCarried = false; // exactly 0
    double teacherForcedMaxDiff = 0; // max |step-wise logits − one teacher-forced pass from the encoder state|
    bool teacherForcedEqual = false; // within teacherForcedTolerance
    // kLogitTolerance × the reference's largest |logit| (at least 1), 100 × that where the run
    // trained with TF32 on a GPU: sums in another order differ in proportion to the terms (on an
    // H200, a trained seed model's one-step and whole-sequence cuDNN calls came up to 6.7e-6 apart
    // in IEEE fp32 and 1.4e-3 in TF32, on logits up to ~10); the seed's bugs move logits by units.
    double teacherForcedTolerance = kLogitTolerance;
    double gateReplayMaxDiff
        = 0; // the traced states (and gates) against an LSTM step written out gate by gate from the module's weights
    static constexpr double kLogitTolerance = 1e-4;
    static double logitTolerance(double largestLogit, bool tf32 = false)
    {
        return (tf32 ? 100 : 1) * kLogitTolerance * std::max(1.0, largestLogit);
    }
};

struct StateTrace {
    std::vector<int64_t> inputIds;
    std::vector<std::string> inputWords; // as tokenized
    std::vector<std::string> unknownWords; // words that became <unk>
    size_t wordsLeftOut = 0; // words after the model's max_source_length, which the encoder never read
    std::vector<LayerState> encoderFinal; // per layer, at the last real token
    std::vector<std::vector<float>> encoderTopH; // top layer h at every source step, (S)(H)
    std::vector<LayerState> decoderInitial; // per layer, what the decoder started from
    std::vector<DecoderStep> steps;
    TraceChecks checks;
    HandoffMode handoff = HandoffMode::Correct;
    std::string device;
    int hidden = 0;
    int layers = 0;
};

// One node of a beam search's tree: a token proposed as the next word of a hypothesis.
struct BeamNode {
    int parent = -1; // index of the hypothesis it extends; -1 for the root (<start>)
    int step = 0; // 0 for the root, then the reply position + 1
    int64_t id = 0;
    std::string word;
    double logProbability = 0; // log p of this token given its parent
    double score = 0; // cumulative log-probability of the hypothesis ending here
    bool kept = false; // among the beam's best at its step (or finished); false: pruned there
    bool finished = false; // an <end>: a complete reply
    bool forced = false; // taken from DecodeOptions::forcedPrefix
    bool chosen = false; // on the path of the reply given
    // The top layer's (h, c) after this token was fed to the decoder; empty for nodes never
    // expanded (pruned, finished, or kept at the last step).
    std::vector<float> h;
    std::vector<float> c;
};

struct Reply {
    std::string text;
    std::vector<int64_t> ids; // reply tokens without <end>
    double score = 0; // mean log-probability per token of the reply
    // Sum of the chosen tokens' log-probabilities (<end> included); replyBatch leaves it 0.
    double logProbability = 0;
    StateTrace trace; // filled by reply(); replyBatch fills only encoderFinal
    // With beam search and DecodeOptions::trace: every hypothesis kept and pruned, root first.
    std::vector<BeamNode> beamTree;
};

class Chatbot {
public:
    enum class Weights {
        Latest, // the newest checkpoint
        Best, // those kept at the lowest validation loss (best.json)
    };
    // Loads config.json, vocab.json and the chosen weights of a run folder onto `device`
    // ("cpu", "cuda:N"; falls back to cpu with a note when there is no GPU). Throws Error (for
    // Best, naming best.json when the run has none).
    static Chatbot load(
        const std::string& runDir, const std::string& device = "cpu", Weights weights = Weights::Latest);

    Reply reply(const std::string& text, const DecodeOptions& options = {}) const;
    // Greedy replies to several prompts in one padded batch (no per-step trace).
    std::vector<Reply> replyBatch(const std::vector<std::string>& texts, const DecodeOptions& options = {}) const;
    // The same for prompts already tokenized (each non-empty, at most the model's source length).
    std::vector<Reply> replyBatchIds(
        const std::vector<std::vector<int64_t>>& sources, const DecodeOptions& options = {}) const;
    // The encoder's final state, per layer, of each source (ids as replyBatchIds takes them), in
    // one padded batch.
    std::vector<std::vector<LayerState>> encoderFinalStates(const std::vector<std::vector<int64_t>>& sources) const;
    // Gradient × input: for each source position, the gradient of log p(`token` as the reply's
    // first word) with respect to that position's embedding, dotted with the embedding (the
    // first-order share each word has in that log-probability). The decoder starts as `handoff`
    // says (from zeros: all 0). `source` as replyBatchIds takes it.
    std::vector<double> gradientTimesInput(
        const std::vector<int64_t>& source, int64_t token, HandoffMode handoff = HandoffMode::Correct) const;
    // The source ids the model reads for `text`: tokenized, cut at the model's source length, one
    // <unk> when nothing is left.
    std::vector<int64_t> sourceIds(const std::string& text) const;

    const Tokenizer& tokenizer() const;
    const TrainConfig& config() const;
    std::string device() const;
    std::string note() const; // device fallback note, empty when none
    int64_t step() const; // optimizer steps the loaded weights were trained for
    uint64_t corpusFingerprint() const; // of the corpus it trained on (corpusFingerprint; 0 = not known)

    struct Impl;
    explicit Chatbot(std::shared_ptr<Impl> impl);

private:
    std::shared_ptr<Impl> m_impl;
};

// What a decoding loop that drops the state would answer, measured: greedy replies to the same
// prompts with the correct handoff, with the decoder started from zeros, and with the state reset
// every step. "Your model is fine; your decoding loop drops the state" becomes a sentence with
// numbers (the verdict).
struct HandoffDiagnosis {
    struct Mode {
        HandoffMode handoff = HandoffMode::Correct;
        int distinct = 0; // different replies among the prompts
        std::string mostCommon; // the reply given most often
        int mostCommonCount = 0;
        int unended = 0; // replies that never gave the end word and ran to the length limit
    };
    int prompts = 0;
    int distinctInputs = 0; // different token lists the prompts reach the encoder as
    int unknownOnly = 0; // prompts of which the tokenizer keeps no word the model knows
    std::vector<Mode> modes; // correct, zero-init, reset-each-step
    std::string verdict;
};
HandoffDiagnosis diagnoseHandoff(const Chatbot& bot, const std::vector<std::string>& prompts);
// The three rows and the verdict, for people.
std::string describe(const HandoffDiagnosis& d);

// The reply and its whole trace as JSON.
std::string toJson(const Reply& reply, int indent = -1);
// The three checks in one line: "handoff ok (max diff 0), state carried ok (…), step-wise ==
// teacher-forced ok (…)", FAIL where one fails.
std::string describe(const TraceChecks& checks);

} // namespace chatbench
