#pragma once
// Byte-level text helpers shared by the corpus loaders and the tokenizer (private).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chatbench::text {

// Reads a whole file. Throws Error(file) when it cannot be opened, is not a regular file, or
// holds more than `maxBytes` (checked before reading where the size is known; < 0: no limit).
// `raise`, when given, says how to raise `maxBytes` ("--max-corpus-mb raises it").
std::string readFile(const std::string& path, int64_t maxBytes = -1, const char* raise = nullptr);
// The most a run's or a Keras tokenizer's JSON file may hold (a vocabulary of millions of words
// fits): past it, an Error naming the file, not a multi-gigabyte read.
inline constexpr int64_t kMaxJsonFileBytes = int64_t(256) << 20;

// Why `path` cannot be reached, for an error message: "no such file or folder" when it is not
// there, else the system's reason ("cannot reach it (Permission denied)", "… (Too many levels of
// symbolic links)", "… (File name too long)"); empty when it can be.
std::string unreachable(const std::string& path);
inline constexpr const char* kNotThere = "no such file or folder";

// The first `n` bytes of a file (fewer when it is shorter).
std::string readHead(const std::string& path, size_t n);

// Offset of the first byte that is not valid UTF-8, or npos.
size_t invalidUtf8Offset(std::string_view bytes);

// Latin-1 bytes to UTF-8.
// Latin-1 bytes to UTF-8, 0x80-0x9F read as Windows-1252 does (quotes, dashes, the euro sign).
std::string latin1ToUtf8(std::string_view bytes);

// 1-based line number of byte `offset` in `bytes` (CRLF, CR and LF each end a line).
long lineOfOffset(std::string_view bytes, size_t offset);

// Normalises a file's bytes for the line-based loaders: strips a UTF-8 BOM, turns CRLF and
// lone CR into LF, checks UTF-8 (or converts from Latin-1 when `latin1`), and checks that no
// line is longer than `maxLineBytes` (0: not checked here, the loader checks each record's).
// Throws Error(file, line) naming the first bad line.
std::string normalise(const std::string& file, std::string bytes, bool latin1, size_t maxLineBytes);

// Line breaks and U+FEFF in a text as the file loaders leave them: CRLF and lone CR become LF,
// and U+FEFF (a byte-order mark, or the invisible no-break space of files joined with cat) is
// dropped. For text that reached the program another way: a JSON or YAML escape ("\r",
// "\ufeff") in a corpus, a chat message. Text already so is returned as it was.
std::string normaliseBreaks(std::string text);

// The message for a line longer than `limit`.
std::string longLine(size_t bytes, size_t limit);

// Splits on '\n'; a trailing newline does not make an empty last line.
std::vector<std::string_view> splitLines(std::string_view text);

std::string trim(std::string_view s);
// A-Z to a-z; every other byte as it is (UTF-8 untouched, whatever the locale).
std::string asciiLower(std::string s);

// zlib's CRC-32 of `bytes` (checkpoints' checksums, zip members); with `previous`, the CRC-32 of
// the bytes that came before followed by these.
uint32_t crc32(std::string_view bytes, uint32_t previous = 0);

// FNV-1a over strings, each followed by a 0xFF byte (which UTF-8 text never holds), so that
// ("ab", "c") and ("a", "bc") differ: the fingerprints of a corpus' pairs and of a vocabulary.
class Fingerprint {
public:
    void add(std::string_view s)
    {
        for (const unsigned char ch : s)
            mix(ch);
        mix(0xFF);
    }
    uint64_t value() const { return m_h; }

private:
    void mix(unsigned char ch)
    {
        m_h ^= ch;
        m_h *= 1099511628211ULL;
    }
    uint64_t m_h = 1469598103934665603ULL;
};

} // namespace chatbench::text
