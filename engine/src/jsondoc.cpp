#include "jsondoc.h"

#include "chatbench/error.h"
#include "text.h"

namespace chatbench {

nlohmann::json parseDocument(
    const std::string& text, const std::string& file, const std::string& format, const std::string& notThis)
{
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(file, text::lineOfOffset(text, e.byte), std::string("JSON: ") + e.what());
    } catch (const nlohmann::json::exception& e) { // e.g. a number too large for a double (found by fuzzing)
        throw Error(file, 0, std::string("JSON: ") + e.what());
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

} // namespace chatbench
