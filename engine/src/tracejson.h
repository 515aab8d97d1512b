#pragma once
// The JSON form of a reply's checks (private), shared by toJson(Reply) and the doctor's report.

#include "chatbench/chatbot.h"

#include <nlohmann/json.hpp>

namespace chatbench {

nlohmann::ordered_json checksJson(const TraceChecks& checks);

} // namespace chatbench
