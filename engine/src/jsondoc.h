#pragma once
// Reading the project's own JSON files (private): config.json, vocab.json, state.json, reports.

#include <nlohmann/json.hpp>

#include <string>

namespace chatbench {

// Parses `text` read from `file`. Throws Error(file, line) for malformed JSON and
// Error(file, 1, notThis) when the document's "format" field is not `format`.
nlohmann::json parseDocument(
    const std::string& text, const std::string& file, const std::string& format, const std::string& notThis);

} // namespace chatbench
