#pragma once
// Why this reply: what-if branches, the nearest training prompts, which words moved the state,
// and two questions compared. (The beam tree comes with every beam-search Reply.)
//
//   auto bot = chatbench::Chatbot::load("runs/demo");
//   auto index = chatbench::PromptIndex::build(bot, chatbench::trainingPairs(bot));
//   chatbench::ExplainOptions ex;
//   ex.force = { { 1, "fine" } };                      // what if step 1 had said "fine"?
//   chatbench::Explanation e = chatbench::explain(bot, "how are you?", {}, ex, &index);
//   e.occlusion[0].stateChange;                        // how far dropping word 0 moves (h, c)
//   e.neighbours[0].prompt;                            // the training prompt whose state is nearest
//   std::cout << chatbench::toJson(e) << "\n";
//
// A state here is the encoder's final (h, c) of every layer, concatenated: [h₀; c₀; h₁; c₁ …].

#include "chatbench/chatbot.h"
#include "chatbench/corpus.h"

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace chatbench {

enum class StateMetric {
    Cosine, // 1 − cos(a, b): the direction of the state
    L2, // |a − b|
};
const char* stateMetricName(StateMetric m); // "cosine", "l2"
std::optional<StateMetric> parseStateMetric(const std::string& name);

// The state vector the distances are taken over.
std::vector<float> flatState(const std::vector<LayerState>& layers);
double l2Distance(const std::vector<float>& a, const std::vector<float>& b);
double cosineSimilarity(const std::vector<float>& a, const std::vector<float>& b); // 0 when either is zero

// ---- what if ------------------------------------------------------------------------------

// The forced prefix that replaces step `step` (0-based) of `original` with `token` and keeps
// the steps before it. Throws Error when `step` is past the reply's steps or `token` is <pad>,
// <start> or outside the vocabulary.
std::vector<int64_t> forcedPrefix(const Reply& original, int step, int64_t token, const Tokenizer& tok);

// The token a typed word forces: the word as the tokenizer reads it (so "Fine" finds "fine"),
// or <end>. Throws Error naming the word when it is not one known word.
int64_t tokenToForce(const Tokenizer& tok, const std::string& word);

struct Branch {
    int step = 0; // the step forced (0-based)
    int64_t forcedId = 0;
    std::string forcedWord;
    Reply reply; // traced: the same steps before `step`, the forced token there, then decoded on
};
// What `bot` would have said had step `step` of `original` (its reply to `text`) been `token`.
// Decoding goes on with `opt`'s method from the state carried to that step.
Branch whatIf(const Chatbot& bot, const std::string& text, const Reply& original, int step, int64_t token,
    DecodeOptions opt = {});

// ---- nearest training prompts ---------------------------------------------------------------

// The training pairs of the corpus `bot`'s config names, loaded and split as training split them
// (pairs left out of training, with no words in prompt or response, are left out here too).
// Throws Error naming the corpus, or when the config names none (an imported model).
std::vector<Pair> trainingPairs(const Chatbot& bot);

struct Neighbour {
    size_t index = 0; // into the index's pairs
    std::string prompt;
    std::string response;
    std::string file;
    long line = 0;
    double l2 = 0; // |state − its state|
    double cosine = 0; // cos(state, its state)
    bool responseIsReply = false; // its response, as the model writes it, is the reply explained
};

// The encoder's final state of every training prompt under one set of weights, searched
// exactly (a scan of N × D floats: 10⁵ prompts of the seed model are 160 MB and ~50 ms a query
// on one core; well beyond that an approximate index such as HNSW would be the tool). The
// prompts are those of the corpus as it is on disk now.
class PromptIndex {
public:
    // Encodes every prompt in batches. `cancel` (when set) stops the build with Error.
    static PromptIndex build(const Chatbot& bot, std::vector<Pair> pairs, const std::atomic<bool>* cancel = nullptr);

    // The k prompts nearest to `state` (flatState of an encoder's final state), nearest first;
    // ties go to the earlier pair.
    std::vector<Neighbour> nearest(const std::vector<float>& state, int k, StateMetric metric) const;

    size_t size() const { return m_pairs.size(); }
    size_t dimension() const { return m_dimension; }
    int64_t step() const { return m_step; } // the training step of the weights indexed
    double buildMilliseconds() const { return m_buildMs; }
    const std::vector<Pair>& pairs() const { return m_pairs; }
    const float* state(size_t i) const { return m_states.data() + i * m_dimension; }

private:
    std::vector<Pair> m_pairs;
    std::vector<float> m_states; // N × D
    std::vector<double> m_norms; // N
    size_t m_dimension = 0;
    int64_t m_step = 0;
    double m_buildMs = 0;
};

// ---- which words moved the state ------------------------------------------------------------

struct Occlusion {
    int position = 0; // the source token dropped (0-based)
    std::string word; // as tokenized (<unk> for an unknown word)
    double stateChange = 0; // |state without it − state with it| (L2 over flatState)
    double relativeChange = 0; // stateChange / |state with it|
    std::string reply; // the greedy reply without it (with the handoff asked for)
    bool replyChanged = false; // differs from the greedy reply with every word
    // Gradient × input of the explained reply's first word's log-probability at this position
    // (Chatbot::gradientTimesInput); 0 when the reply has no word.
    double gradientTimesInput = 0;
};
// Drops each source token in turn (a one-token question becomes one <unk>) and re-encodes; all
// variants run as one batch. The replies compared are greedy, decoded with `handoff`; `cancel` as
// in DecodeOptions.
std::vector<Occlusion> occlude(const Chatbot& bot, const std::string& text, const std::atomic<bool>* cancel = nullptr,
    HandoffMode handoff = HandoffMode::Correct);

// ---- two questions --------------------------------------------------------------------------

struct QuestionComparison {
    std::string questions[2];
    std::vector<LayerState> encoderFinal[2];
    double l2 = 0; // between the two flat states
    double cosine = 0;
    std::vector<double> layerL2; // per layer, over [h; c]
    std::string reply[2]; // greedy, the encoder's state handed over
    std::string zeroInitReply[2]; // greedy, the decoder started from zeros (the seed's bug)
    bool repliesDiffer = false;
    bool zeroInitRepliesDiffer = false;
};
QuestionComparison compareQuestions(const Chatbot& bot, const std::string& a, const std::string& b);

// ---- all of it for one reply ----------------------------------------------------------------

struct ExplainOptions {
    int neighbours = 5; // nearest training prompts to list; 0 = none
    StateMetric metric = StateMetric::Cosine;
    std::vector<std::pair<int, std::string>> force; // what-if branches: (step, word)
    std::optional<std::string> compareWith; // a second question
};

struct Explanation {
    std::string question;
    Reply reply; // traced (with the beam tree when decoded by beam search)
    std::vector<Occlusion> occlusion;
    StateMetric metric = StateMetric::Cosine;
    std::vector<Neighbour> neighbours;
    size_t indexedPrompts = 0; // of the index searched
    double indexBuildMilliseconds = 0;
    // Empty, or why there are no neighbours (no index, or the index is of other weights).
    std::string neighboursNote;
    bool memorised = false; // the nearest neighbour's response is exactly the reply
    std::vector<Branch> branches;
    std::optional<QuestionComparison> comparison;
};
// The reply to `text` (traced, whatever `opt.trace` says) with everything `ex` asks for.
// `index` may be null (no neighbours, with a note). Words to force are looked up in the
// vocabulary; an unknown one is an Error naming it.
Explanation explain(
    const Chatbot& bot, const std::string& text, DecodeOptions opt, const ExplainOptions& ex, const PromptIndex* index);

std::string toJson(const Explanation& e, int indent = -1);

} // namespace chatbench
