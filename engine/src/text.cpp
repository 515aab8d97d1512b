#include "text.h"

#include "chatbench/error.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

namespace chatbench::text {

namespace {

// "cannot open file (Permission denied)": the system's reason when the open left one.
std::string cannotOpen(int error)
{
    return error != 0 ? "cannot open file (" + std::string(std::strerror(error)) + ")"
                      : std::string("cannot open file");
}

} // namespace

std::string readFile(const std::string& path, int64_t maxBytes, const char* raise)
{
    // Opening a FIFO for reading blocks until a writer comes: look before opening.
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!ec && std::filesystem::is_directory(st))
        throw Error(path, 0, "is a folder, not a file");
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
        throw Error(path, 0, "not a regular file (a pipe, device or socket); only regular files are read here");
    auto tooBig = [&](uint64_t size) {
        return Error(path, 0,
            "the file is " + std::to_string(size >> 20) + " MiB, more than the limit of "
                + std::to_string(maxBytes >> 20) + " MiB"
                + (raise ? std::string("; ") + raise : std::string(" for a file of this kind: is it the file meant?")));
    };
    // Checked before reading: a file far larger than memory is refused, not read.
    if (const auto size = std::filesystem::file_size(path, ec); !ec && maxBytes >= 0 && size > uint64_t(maxBytes))
        throw tooBig(size);
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw Error(path, 0, cannotOpen(errno));
    std::string out;
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) { // files that report no size (/proc) too
        out.append(buf, static_cast<size_t>(in.gcount()));
        if (maxBytes >= 0 && out.size() > uint64_t(maxBytes))
            throw tooBig(out.size());
    }
    if (in.bad())
        throw Error(path, 0, "read error");
    return out;
}

std::string unreachable(const std::string& path)
{
    struct stat st { };
    if (::stat(path.c_str(), &st) == 0)
        return {};
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR)
        return kNotThere;
    return "cannot reach it (" + std::string(std::strerror(error)) + ")";
}

std::string readHead(const std::string& path, size_t n)
{
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw Error(path, 0, cannotOpen(errno));
    std::string out(n, '\0');
    in.read(out.data(), static_cast<std::streamsize>(n));
    out.resize(static_cast<size_t>(in.gcount()));
    return out;
}

size_t invalidUtf8Offset(std::string_view s)
{
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        const auto b = static_cast<unsigned char>(s[i]);
        size_t len = 0;
        unsigned cp = 0;
        if (b < 0x80) {
            ++i;
            continue;
        } else if ((b & 0xE0) == 0xC0) {
            len = 2;
            cp = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            len = 3;
            cp = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            len = 4;
            cp = b & 0x07;
        } else {
            return i;
        }
        if (i + len > n)
            return i;
        for (size_t k = 1; k < len; ++k) {
            const auto cb = static_cast<unsigned char>(s[i + k]);
            if ((cb & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (cb & 0x3F);
        }
        // Overlong forms, surrogates and values past U+10FFFF are invalid too.
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
            || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return i;
        i += len;
    }
    return std::string_view::npos;
}

std::string latin1ToUtf8(std::string_view bytes)
{
    // Bytes 0x80-0x9F as Windows-1252 has them (the WHATWG decoding of "latin1"); its five
    // unassigned ones stay C1 control characters, which the loaders refuse.
    static constexpr char16_t kC1[32] = { 0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030,
        0x0160, 0x2039, 0x0152, 0x8D, 0x017D, 0x8F, 0x90, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
        0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E, 0x0178 };
    std::string out;
    out.reserve(bytes.size() + bytes.size() / 8);
    for (char ch : bytes) {
        const auto b = static_cast<unsigned char>(ch);
        const char32_t cp = b >= 0x80 && b < 0xA0 ? kC1[b - 0x80] : b;
        if (cp < 0x80) {
            out.push_back(ch);
        } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else {
            out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
    }
    return out;
}

long lineOfOffset(std::string_view bytes, size_t offset)
{
    // CRLF, a lone CR and LF each end a line, as normalise counts them.
    long line = 1;
    for (size_t i = 0; i < offset && i < bytes.size(); ++i)
        if (bytes[i] == '\n' || (bytes[i] == '\r' && (i + 1 >= bytes.size() || bytes[i + 1] != '\n')))
            ++line;
    return line;
}

namespace {

// "UTF-16 (little-endian, …)" when the bytes are UTF-16 or UTF-32 text by their byte-order mark,
// or by NUL bytes in every other place of an ASCII-looking start; empty otherwise.
std::string wideEncoding(std::string_view b)
{
    auto starts = [&](std::string_view mark) { return b.substr(0, mark.size()) == mark; };
    if (starts(std::string_view("\xFF\xFE\0\0", 4)))
        return "UTF-32 (little-endian, byte-order mark FF FE 00 00)";
    if (starts(std::string_view("\0\0\xFE\xFF", 4)))
        return "UTF-32 (big-endian, byte-order mark 00 00 FE FF)";
    if (starts("\xFF\xFE"))
        return "UTF-16 (little-endian, byte-order mark FF FE)";
    if (starts("\xFE\xFF"))
        return "UTF-16 (big-endian, byte-order mark FE FF)";
    const size_t n = std::min<size_t>(b.size() & ~size_t(1), 256);
    if (n < 8)
        return {};
    size_t zeros[2] = { 0, 0 };
    for (size_t i = 0; i < n; ++i)
        zeros[i & 1] += b[i] == '\0';
    const size_t half = n / 2;
    if (zeros[1] * 10 >= half * 9 && zeros[0] == 0)
        return "UTF-16 (little-endian, no byte-order mark)";
    if (zeros[0] * 10 >= half * 9 && zeros[1] == 0)
        return "UTF-16 (big-endian, no byte-order mark)";
    return {};
}

} // namespace

std::string normalise(const std::string& file, std::string bytes, bool latin1, size_t maxLineBytes)
{
    if (const std::string wide = wideEncoding(bytes); !wide.empty())
        throw Error(file, 0,
            "the file is " + wide + ", not UTF-8: convert it, e.g. iconv -f " + wide.substr(0, wide.find(' '))
                + " -t UTF-8");
    // Text holds no NUL (YAML's cannot, and a tokenizer would keep it inside a word): a binary
    // file, or text damaged on the way.
    if (const size_t nul = bytes.find('\0'); nul != std::string::npos)
        throw Error(file, lineOfOffset(bytes, nul),
            "a NUL byte (byte " + std::to_string(nul) + " of the file): text cannot hold one; is it a binary file?");
    // UTF-8 is checked on the bytes as they are in the file, so the offset and line it names
    // are the file's own.
    if (!latin1) {
        if (const size_t bad = invalidUtf8Offset(bytes); bad != std::string_view::npos)
            throw Error(file, lineOfOffset(bytes, bad),
                "invalid UTF-8 (byte " + std::to_string(bad)
                    + " of the file); if the file is Latin-1, load it with the Latin-1 option");
    }
    const size_t skip = bytes.size() >= 3 && bytes.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
    if (skip)
        bytes.erase(0, skip);
    // Latin-1 bytes are converted first: what reads as U+FEFF in UTF-8 is three letters there.
    std::string out = normaliseBreaks(latin1 ? latin1ToUtf8(bytes) : std::move(bytes));
    size_t start = 0;
    long line = 1;
    while (maxLineBytes > 0 && start <= out.size()) {
        size_t end = out.find('\n', start);
        if (end == std::string::npos)
            end = out.size();
        if (end - start > maxLineBytes)
            throw Error(file, line, longLine(end - start, maxLineBytes));
        start = end + 1;
        ++line;
    }
    return out;
}

std::string normaliseBreaks(std::string text)
{
    if (text.find('\r') == std::string::npos && text.find("\xEF\xBB\xBF") == std::string::npos)
        return text;
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < text.size() && text[i + 1] == '\n')
                ++i;
        } else if (text.compare(i, 3, "\xEF\xBB\xBF") == 0) {
            i += 2;
        } else {
            out.push_back(text[i]);
        }
    }
    return out;
}

std::string longLine(size_t bytes, size_t limit)
{
    return "line is " + std::to_string(bytes) + " bytes long; the limit is " + std::to_string(limit)
        + " bytes (--max-line-kb raises it)";
}

std::vector<std::string_view> splitLines(std::string_view text)
{
    std::vector<std::string_view> lines;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos)
            end = text.size();
        lines.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return lines;
}

std::string asciiLower(std::string s)
{
    for (char& ch : s)
        if (ch >= 'A' && ch <= 'Z')
            ch = static_cast<char>(ch - 'A' + 'a');
    return s;
}

std::string trim(std::string_view s)
{
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos)
        return {};
    const size_t e = s.find_last_not_of(ws);
    return std::string(s.substr(b, e - b + 1));
}

uint32_t crc32(std::string_view bytes, uint32_t previous)
{
    uLong crc = previous;
    // zlib takes lengths as uInt: large files go in pieces.
    for (size_t at = 0; at < bytes.size(); at += (1u << 30))
        crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at),
            static_cast<uInt>(std::min<size_t>(bytes.size() - at, 1u << 30)));
    return static_cast<uint32_t>(crc);
}

} // namespace chatbench::text

namespace chatbench {

std::string printable(std::string_view s)
{
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size());
    auto escape = [&](unsigned char b) {
        out += "\\x";
        out.push_back(hex[b >> 4]);
        out.push_back(hex[b & 15]);
    };
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x20 || b == 0x7F) {
            escape(b);
            ++i;
        } else if (b < 0x80) {
            out.push_back(s[i++]);
        } else {
            const size_t len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
            const std::string_view seq = s.substr(i, len);
            // C1 controls (U+0080–U+009F: 0xC2 0x80–0x9F), the bidirectional overrides and
            // isolates (U+202A–U+202E, U+2066–U+2069) and marks (U+200E, U+200F, U+061C), and the
            // line and paragraph separators (U+2028, U+2029) act on a terminal, reorder text or
            // break a line; the zero-width space, the word joiner (U+2060) and U+FEFF show
            // nothing, so that a word holding one looks like another: escaped. The zero-width
            // non-joiner and joiner (U+200C, U+200D), which emoji and scripts need, print.
            const auto b1 = seq.size() > 1 ? static_cast<unsigned char>(seq[1]) : 0;
            const auto b2 = seq.size() > 2 ? static_cast<unsigned char>(seq[2]) : 0;
            const bool control = (b == 0xC2 && b1 >= 0x80 && b1 <= 0x9F) || (b == 0xD8 && b1 == 0x9C)
                || (b == 0xE2 && b1 == 0x80 && ((b2 >= 0xA8 && b2 <= 0xAE) || b2 == 0x8B || b2 == 0x8E || b2 == 0x8F))
                || (b == 0xE2 && b1 == 0x81 && ((b2 >= 0xA6 && b2 <= 0xA9) || b2 == 0xA0))
                || (b == 0xEF && b1 == 0xBB && b2 == 0xBF);
            if (control) {
                for (char ch : seq)
                    escape(static_cast<unsigned char>(ch));
                i += len;
            } else if (len > 1 && seq.size() == len && text::invalidUtf8Offset(seq) == std::string_view::npos) {
                out += seq;
                i += len;
            } else {
                escape(b);
                ++i;
            }
        }
    }
    return out;
}

} // namespace chatbench
