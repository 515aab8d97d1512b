#pragma once
// Word-level tokenizer and vocabulary.
//
//   chatbench::TokenizerOptions opt;          // Keras-compatible by default
//   auto tok = chatbench::Tokenizer::build(pairs, opt);
//   auto enc = tok.encode("Hello there!");    // ids, words, and the words that were unknown
//   std::string back = tok.decode(enc.ids);
//   tok.save("run/vocab.json");               // saved with every model
//
// Ids 0..3 are the special tokens <pad>, <unk>, <start>, <end>.

#include "chatbench/corpus.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace chatbench {

struct TokenizerOptions {
    TokenizerMode mode = TokenizerMode::Keras;
    int minFrequency = 1; // words seen fewer times become <unk>
    int maxSize = 0; // most frequent words kept, specials included; 0 = no limit
    // Unknown words are left out of the ids instead of becoming <unk> (a Keras Tokenizer made
    // without oov_token does this; imported Keras models keep its behaviour).
    bool dropUnknown = false;
    // Keras mode: lowercase as Python's str.lower (every script), as Keras' Tokenizer does. false:
    // ASCII letters only, as vocabularies saved before this was recorded were built. The
    // punctuation mode lowercases ASCII letters only, whatever this says (its vocabularies record "ascii").
    bool unicodeLowercase = true;
    // An imported Keras model's start and end words, as its tokenizer keeps them ("start", "end"):
    // Keras' tokenizer gives such a word in a prompt the id of the start or end token, and so does
    // encode. Empty for chatbench's own vocabularies, whose specials are no word of the text.
    std::string startWord, endWord;
};

struct Encoded {
    std::vector<int64_t> ids; // one per word, <unk> for unknown words (none with dropUnknown)
    std::vector<std::string> words; // the words the text split into
    std::vector<std::string> unknown; // the words that became <unk>, in order
    size_t wordsLeftOut = 0; // words after the maxIds-th id: not encoded, not in `words`
};

class Tokenizer {
public:
    static constexpr int64_t kPad = 0;
    static constexpr int64_t kUnk = 1;
    static constexpr int64_t kStart = 2;
    static constexpr int64_t kEnd = 3;

    Tokenizer() = default;
    // Counts the words of every prompt and response.
    static Tokenizer build(const std::vector<Pair>& pairs, const TokenizerOptions& options);
    // A vocabulary given word by word (ids 4, 5, … in order after the specials). Throws Error
    // for an empty or repeated word.
    static Tokenizer fromWords(const std::vector<std::string>& words, const TokenizerOptions& options);
    // Loads what save wrote. Throws Error(file, line) for a missing or malformed file.
    static Tokenizer load(const std::string& path);
    void save(const std::string& path) const; // atomic

    // Splits text into words the way this tokenizer's mode does (no vocabulary lookup).
    std::vector<std::string> split(const std::string& text) const;
    // At most maxIds ids: the words after the one that gave the last are left out and counted.
    Encoded encode(const std::string& text, size_t maxIds = SIZE_MAX) const;
    // Joins words, skipping special tokens and stopping at <end>.
    std::string decode(const std::vector<int64_t>& ids) const;

    const std::string& word(int64_t id) const;
    int64_t id(const std::string& word) const; // kUnk when unknown
    int64_t size() const { return static_cast<int64_t>(m_words.size()); }
    const TokenizerOptions& options() const { return m_options; }
    // How often each kept word was seen while building (empty after load).
    const std::unordered_map<std::string, int64_t>& counts() const { return m_counts; }

private:
    TokenizerOptions m_options;
    std::vector<std::string> m_words;
    std::unordered_map<std::string, int64_t> m_ids;
    std::unordered_map<std::string, int64_t> m_counts;
};

// Fraction of the word occurrences in `pairs` that `tok` maps to <unk>.
double oovRate(const Tokenizer& tok, const std::vector<Pair>& pairs);

} // namespace chatbench
