#include "jsondoc.h"

#include "chatbench/error.h"
#include "text.h"

#include <limits>
#include <set>
#include <type_traits>
#include <vector>

namespace chatbench {

std::string jsonMessage(const nlohmann::json::exception& e)
{
    const std::string what = e.what();
    const size_t tag = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
    return tag == std::string::npos ? what : what.substr(tag + 2);
}

namespace {

// Where the n-th (0-based) key, or the n-th opening bracket, of well-formed JSON text starts.
// The parser's callback is told neither, only the order in which it meets them, and the text up
// to that point has parsed, so counting them in the text finds the place.
size_t offsetOfNth(std::string_view text, bool key, size_t n)
{
    size_t seen = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"') {
            const size_t start = i;
            for (++i; i < text.size() && text[i] != '"'; ++i)
                if (text[i] == '\\')
                    ++i;
            size_t next = i + 1;
            while (next < text.size()
                && (text[next] == ' ' || text[next] == '\t' || text[next] == '\n' || text[next] == '\r'))
                ++next;
            if (key && next < text.size() && text[next] == ':' && seen++ == n)
                return start;
        } else if (!key && (c == '{' || c == '[') && seen++ == n) {
            return i;
        }
    }
    return 0;
}

} // namespace

nlohmann::json parseUniqueKeys(std::string_view text)
{
    using Event = nlohmann::json::parse_event_t;
    std::vector<std::set<std::string>> objects; // the keys of each object open at this point
    size_t keys = 0, opened = 0; // how many keys and brackets the parser has met
    const nlohmann::json::parser_callback_t seen = [&](int depth, Event event, nlohmann::json& parsed) {
        if (event == Event::object_start || event == Event::array_start) {
            if (depth >= kMaxJsonDepth)
                throw RefusedJson("values are nested more than " + std::to_string(kMaxJsonDepth)
                        + " levels deep (lists or objects inside each other): not a file this reads",
                    offsetOfNth(text, false, opened));
            ++opened;
        }
        if (event == Event::object_start) {
            objects.emplace_back();
        } else if (event == Event::object_end) {
            if (!objects.empty())
                objects.pop_back();
        } else if (event == Event::key && !objects.empty()) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (key.find('\0') != std::string::npos) // no C string of ours could hold it whole
                throw RefusedJson(
                    "the key '" + printable(key) + "' holds a NUL character (\\u0000)", offsetOfNth(text, true, keys));
            if (!objects.back().insert(key).second)
                throw RefusedJson("the key '" + printable(key)
                        + "' appears twice in one object (which one counts is not defined): keep one",
                    offsetOfNth(text, true, keys));
            ++keys;
        }
        return true;
    };
    return nlohmann::json::parse(text, seen);
}

nlohmann::json parseDocument(
    const std::string& text, const std::string& file, const std::string& format, const std::string& notThis)
{
    // A file of NUL bytes (a crash on some file systems leaves one) is named as such, not as JSON
    // that ended early.
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
        throw Error(file, text::lineOfOffset(text, nul + 1),
            "holds a NUL byte (byte " + std::to_string(nul + 1) + "): a damaged file, not JSON");
    nlohmann::json j;
    try {
        j = parseUniqueKeys(text);
    } catch (const RefusedJson& e) {
        throw Error(file, text::lineOfOffset(text, e.offset), e.what());
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(file, text::lineOfOffset(text, e.byte), "not valid JSON: " + jsonMessage(e));
    } catch (const nlohmann::json::exception& e) { // e.g. a number too large for a double (found by fuzzing)
        throw Error(file, 0, "not valid JSON: " + jsonMessage(e));
    }
    // A "format" that is not a string is not ours either (j.value would throw a type error).
    const auto f = j.is_object() ? j.find("format") : j.end();
    if (!j.is_object() || f == j.end() || !f->is_string() || f->get<std::string>() != format)
        throw Error(file, 1, notThis);
    // Version 1 is the only one there is; a later one may mean something this build would misread.
    if (const auto v = j.find("version"); v != j.end() && !(v->is_number_integer() && v->get<int64_t>() == 1))
        throw Error(file, 1,
            "version " + printable(v->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
                + ": this chatbench reads version 1 (written by a newer chatbench?)");
    return j;
}

namespace {

// A cursor over well-formed JSON text, stepping over whole values without building them.
struct JsonScan {
    std::string_view t;
    size_t i = 0;

    bool at(char c) const { return i < t.size() && t[i] == c; }
    void space()
    {
        while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
            ++i;
    }
    bool string()
    {
        if (!at('"'))
            return false;
        for (++i; i < t.size(); ++i) {
            if (t[i] == '\\')
                ++i;
            else if (t[i] == '"')
                return ++i, true;
        }
        return false;
    }
    bool value()
    {
        space();
        if (at('"'))
            return string();
        if (at('{') || at('[')) {
            int depth = 0;
            while (i < t.size()) {
                if (at('"')) {
                    if (!string())
                        return false;
                    continue;
                }
                if (at('{') || at('['))
                    ++depth;
                else if ((at('}') || at(']')) && --depth == 0)
                    return ++i, true;
                ++i;
            }
            return false;
        }
        const size_t start = i;
        while (i < t.size() && !at(',') && !at('}') && !at(']') && t[i] != ' ' && t[i] != '\t' && t[i] != '\n'
            && t[i] != '\r')
            ++i;
        return i > start;
    }
    // Past the comma after a member or item, true; false at the end of the object or list.
    bool next()
    {
        space();
        return at(',') ? (++i, true) : false;
    }
};

} // namespace

size_t offsetOfPath(std::string_view text, std::string_view path)
{
    constexpr size_t none = std::string_view::npos;
    JsonScan s { text };
    size_t found = none;
    size_t p = 0;
    while (p < path.size()) {
        s.space();
        if (path[p] == '[') { // a list item
            const size_t close = path.find(']', p);
            if (close == none || !s.at('['))
                return none;
            size_t index = 0;
            for (size_t k = p + 1; k < close; ++k) {
                if (path[k] < '0' || path[k] > '9' || index > (size_t(1) << 40))
                    return none;
                index = index * 10 + static_cast<size_t>(path[k] - '0');
            }
            p = close + 1;
            ++s.i;
            for (size_t k = 0; k < index; ++k)
                if (!s.value() || !s.next())
                    return none;
            s.space();
            if (s.at(']') || s.i >= text.size())
                return none;
            found = s.i;
        } else { // a member of an object
            if (path[p] == '.')
                ++p;
            const size_t end = std::min(path.find_first_of(".[", p), path.size());
            const std::string_view key = path.substr(p, end - p);
            p = end;
            if (!s.at('{'))
                return none;
            ++s.i;
            for (;;) {
                s.space();
                const size_t keyAt = s.i;
                if (!s.string())
                    return none;
                const std::string_view name = text.substr(keyAt + 1, s.i - keyAt - 2);
                s.space();
                if (!s.at(':'))
                    return none;
                ++s.i;
                if (name == key) {
                    found = keyAt;
                    break;
                }
                if (!s.value() || !s.next())
                    return none;
            }
        }
    }
    return found;
}

Error fieldError(const std::string& file, std::string_view text, const std::string& prefix, const FieldError& e)
{
    const size_t at = offsetOfPath(text, e.path);
    return Error(file, at == std::string_view::npos ? 0 : text::lineOfOffset(text, at), prefix + e.what());
}

std::string pathOf(const JsonObject& obj, const std::string& key)
{
    return obj.path.empty() ? key : obj.path + "." + key;
}

namespace {

std::string named(const JsonObject& obj, const std::string& key)
{
    return "'" + pathOf(obj, key) + "'";
}

std::string shown(const nlohmann::json& v)
{
    std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 40)
        text = text.substr(0, 37) + "...";
    return printable(text);
}

const nlohmann::json& member(const JsonObject& obj, const std::string& key)
{
    if (!obj.json.is_object())
        throw FieldError((obj.path.empty() ? std::string("the document") : "'" + obj.path + "'")
                + " must be an object, not " + shown(obj.json),
            obj.path);
    const auto it = obj.json.find(key);
    if (it == obj.json.end())
        throw FieldError(named(obj, key) + " is missing", obj.path);
    return *it;
}

} // namespace

JsonObject section(const JsonObject& obj, const std::string& key)
{
    const nlohmann::json& v = member(obj, key);
    if (!v.is_object())
        throw FieldError(named(obj, key) + " must be an object, not " + shown(v), pathOf(obj, key));
    return { v, pathOf(obj, key) };
}

template <typename T> T field(const JsonObject& obj, const std::string& key)
{
    const nlohmann::json& v = member(obj, key);
    if constexpr (std::is_same_v<T, bool>) {
        if (v.is_boolean())
            return v.get<bool>();
        throw FieldError(named(obj, key) + " must be true or false, not " + shown(v), pathOf(obj, key));
    } else if constexpr (std::is_same_v<T, std::string>) {
        // "\u0000" is valid JSON, but a name or path would end there for every C API it reaches.
        if (v.is_string() && v.get_ref<const std::string&>().find('\0') != std::string::npos)
            throw FieldError(named(obj, key) + " holds a NUL character (\\u0000): " + shown(v), pathOf(obj, key));
        if (v.is_string())
            return v.get<std::string>();
        throw FieldError(named(obj, key) + " must be a string, not " + shown(v), pathOf(obj, key));
    } else if constexpr (std::is_floating_point_v<T>) {
        if (v.is_number())
            return v.get<T>();
        throw FieldError(named(obj, key) + " must be a number, not " + shown(v), pathOf(obj, key));
    } else {
        static_assert(std::is_integral_v<T>);
        bool fits = false;
        if (v.is_number_unsigned())
            fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
        else if (v.is_number_integer())
            fits = std::is_signed_v<T> && v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min())
                && v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
        if (fits)
            return v.get<T>();
        throw FieldError(named(obj, key) + " must be a whole number"
                + (std::is_signed_v<T> ? std::string() : std::string(" of 0 or more")) + " that fits, not " + shown(v),
            pathOf(obj, key));
    }
}

template bool field<bool>(const JsonObject&, const std::string&);
template std::string field<std::string>(const JsonObject&, const std::string&);
template double field<double>(const JsonObject&, const std::string&);
template int field<int>(const JsonObject&, const std::string&);
template int64_t field<int64_t>(const JsonObject&, const std::string&);
template uint32_t field<uint32_t>(const JsonObject&, const std::string&);
template uint64_t field<uint64_t>(const JsonObject&, const std::string&);

} // namespace chatbench
