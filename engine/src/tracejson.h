#pragma once
// The JSON form of a reply and its checks (private), shared by toJson(Reply), toJson(Explanation)
// and the doctor's report.

#include "chatbench/chatbot.h"

#include <nlohmann/json.hpp>

namespace chatbench {

nlohmann::ordered_json checksJson(const TraceChecks& checks);
nlohmann::ordered_json replyJson(const Reply& reply);
// Text for a document holding the user's words: invalid UTF-8 becomes U+FFFD, not an exception.
std::string dumpJson(const nlohmann::ordered_json& json, int indent);

} // namespace chatbench
