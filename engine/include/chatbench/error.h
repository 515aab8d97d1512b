#pragma once
// chatbench::Error — the one exception type the engine throws for bad input.
//
//   try { auto corpus = chatbench::loadCorpus("data/chat.yml"); }
//   catch (const chatbench::Error& e) { std::cerr << e.what(); }  // "data/chat.yml:12: ..."
//
// Engine functions throw it for anything a user can fix (a file, a field, a flag); the
// job boundary (CLI main, the UI controller) turns it into one message.

#include <stdexcept>
#include <string>
#include <string_view>

namespace chatbench {

class Error : public std::runtime_error {
public:
    // A message about no particular file.
    explicit Error(const std::string& message);
    // A message about `file`, at `line` (1-based; 0 = the file as a whole).
    Error(const std::string& file, long line, const std::string& message);

    const std::string& file() const { return m_file; }
    long line() const { return m_line; }
    const std::string& message() const { return m_message; }

private:
    std::string m_file;
    long m_line = 0;
    std::string m_message;
};

// `text` fit for a terminal or a message: control characters and bytes that are not UTF-8
// become \xNN escapes; valid UTF-8 stays as it is. Error messages show file names this way.
std::string printable(std::string_view text);

// A library's error for a user: the CPU allocator's refusal in words ("out of memory: the CPU
// allocator could not get 5.37 GB for one tensor"), anything else its first line (no stack trace).
std::string inWords(const std::string& what);

} // namespace chatbench
