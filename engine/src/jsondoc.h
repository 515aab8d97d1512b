#pragma once
// Reading the project's own JSON files (private): config.json, vocab.json, state.json, reports.

#include "chatbench/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace chatbench {

// nlohmann-json's message for a user: without its "[json.exception.parse_error.101] " tag.
std::string jsonMessage(const nlohmann::json::exception& e);

// JSON this project refuses although it is well formed: an object holding one key twice
// (nlohmann-json, like most parsers, keeps the last), or values nested deeper than any file here
// (kMaxJsonDepth; printing such a value recurses once per level and overflows the stack).
// `offset` is where in the text (0-based) the refused key or opening bracket starts.
struct RefusedJson : std::runtime_error {
    RefusedJson(const std::string& message, size_t offset)
        : std::runtime_error(message)
        , offset(offset)
    {
    }
    size_t offset;
};
constexpr int kMaxJsonDepth = 100;
// nlohmann::json::parse, refusing repeated keys and deep nesting (RefusedJson) as it reads.
nlohmann::json parseUniqueKeys(std::string_view text);

// Parses `text` read from `file`. Throws Error(file, line) for malformed JSON and
// Error(file, 1, notThis) when the document's "format" field is not `format`.
nlohmann::json parseDocument(
    const std::string& text, const std::string& file, const std::string& format, const std::string& notThis);

// One object of a document and where it is ("model", "history[3]"; "" for the top).
struct JsonObject {
    const nlohmann::json& json;
    std::string path;
};

// A field of the wrong type, missing, or out of the type's range; the message names it
// ("'model.hidden' must be a whole number, not \"128\"") and `path` says where it is, so that
// the file's line can be found (fieldError).
struct FieldError : std::runtime_error {
    explicit FieldError(const std::string& message, std::string path = {})
        : std::runtime_error(message)
        , path(std::move(path))
    {
    }
    // The value's place, "model.hidden" or "rows[3].time.median_s"; for a missing key, the object
    // that lacks it ("" for the document itself).
    std::string path;
};

// Where the value at `path` (as FieldError::path) is in well-formed JSON `text`: the offset of
// its key, or of the list item; npos when the path is not there (or "" for the document).
size_t offsetOfPath(std::string_view text, std::string_view path);
// The Error for a FieldError in `text` read from `file`: prefix + message, at the field's line
// (0, the file as a whole, where it cannot be found).
Error fieldError(const std::string& file, std::string_view text, const std::string& prefix, const FieldError& e);
// `obj.path` + key, as FieldError::path has it.
std::string pathOf(const JsonObject& obj, const std::string& key);

// obj[key] as an object (FieldError when it is missing or not one).
JsonObject section(const JsonObject& obj, const std::string& key);
// obj[key] as T: bool, a whole number type, double or std::string, exactly (no fraction or sign
// cut off, no number taken for a bool); FieldError when missing or not that.
template <typename T> T field(const JsonObject& obj, const std::string& key);
// The same, or `fallback` when the key is absent.
template <typename T> T field(const JsonObject& obj, const std::string& key, T fallback)
{
    return obj.json.is_object() && obj.json.contains(key) ? field<T>(obj, key) : fallback;
}

} // namespace chatbench
