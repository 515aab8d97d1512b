#include "picklewalk.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace chatbench {

std::string malformedPickle(
    const uint8_t* p, size_t n, const std::function<std::optional<size_t>(const std::string&)>& recordSize)
{
    if (n < 2 || p[0] != 0x80)
        return {};
    struct Item {
        enum Kind { Other, Mark, Str, Int, Global, Tuple } kind = Other;
        std::string text; // Str, Global (its name)
        int64_t number = 0; // Int
        std::vector<Item> items; // Tuple (up to five kept)
    };
    // The rough stack and memo, while the walk follows LibTorch's (and they stay under kItems);
    // after that only the memo's count and the lengths are checked.
    constexpr size_t kItems = size_t(1) << 18;
    std::vector<Item> stack, memo;
    bool following = true;
    uint64_t memoCount = 0;
    auto popToMark = [&](std::vector<Item>* out) {
        size_t k = stack.size();
        while (k > 0 && stack[k - 1].kind != Item::Mark)
            --k;
        if (k == 0)
            return false;
        if (out)
            out->assign(stack.begin() + static_cast<long>(k), stack.end());
        stack.resize(k - 1);
        return true;
    };
    auto pop = [&](size_t count) {
        if (stack.size() < count)
            return false;
        stack.resize(stack.size() - count);
        return true;
    };
    auto tuple = [](std::vector<Item> items) {
        Item t;
        t.kind = Item::Tuple;
        if (items.size() <= 5) { // one level: a storage's id holds scalars only
            for (auto& item : items)
                item.items.clear();
            t.items = std::move(items);
        }
        return t;
    };
    auto le = [&](size_t at, size_t width) {
        uint64_t v = 0;
        for (size_t k = width; k-- > 0;)
            v = (v << 8) | p[at + k]; // little-endian, as pickles are
        return v;
    };
    size_t i = 2;
    while (i < n) {
        const size_t at = i;
        const uint8_t op = p[i++];
        const size_t left = n - i;
        auto need = [&](size_t k) { return left >= k; };
        bool followed = true; // whether the rough stack still follows LibTorch's
        switch (op) {
        case 'q': // BINPUT, LONG_BINPUT
        case 'r': {
            const size_t width = op == 'q' ? 1 : 4;
            if (!need(width) || (following && stack.empty()))
                return {};
            const uint64_t id = le(i, width);
            if (id > memoCount)
                return "memo index " + std::to_string(id) + " at byte " + std::to_string(at) + " ("
                    + std::to_string(memoCount) + " entries so far)";
            memoCount += id == memoCount ? 1 : 0;
            if (following) {
                if (id == memo.size())
                    memo.push_back(stack.back());
                else
                    memo[id] = stack.back();
            }
            i += width;
        } break;
        case 'h': // BINGET, LONG_BINGET
        case 'j': {
            const size_t width = op == 'h' ? 1 : 4;
            if (!need(width))
                return {};
            const uint64_t id = le(i, width);
            if (id >= memoCount)
                return {}; // LibTorch refuses it
            if (following)
                stack.push_back(memo[id]);
            i += width;
        } break;
        case 'K': // BININT1, BININT2, BININT
        case 'M':
        case 'J': {
            const size_t width = op == 'K' ? 1 : op == 'M' ? 2 : 4;
            if (!need(width))
                return {};
            Item v;
            v.kind = Item::Int;
            v.number = op == 'J' ? int64_t(int32_t(uint32_t(le(i, 4)))) : int64_t(le(i, width));
            stack.push_back(v);
            i += width;
        } break;
        case 0x8a: { // LONG1: LibTorch reads only 8 bytes
            if (!need(9) || p[i] != 8)
                return {};
            Item v;
            v.kind = Item::Int;
            v.number = int64_t(le(i + 1, 8));
            stack.push_back(v);
            i += 9;
        } break;
        case 'G': // BINFLOAT
            if (!need(8))
                return {};
            stack.emplace_back();
            i += 8;
            break;
        case 'X': { // BINUNICODE: four length bytes, then the string
            if (!need(4))
                return {};
            const uint64_t length = le(i, 4);
            if (length > left - 4)
                return "a string of " + std::to_string(length) + " bytes at byte " + std::to_string(at) + " with "
                    + std::to_string(left - 4) + " left";
            Item v;
            v.kind = Item::Str;
            v.text.assign(
                reinterpret_cast<const char*>(p + i + 4), static_cast<size_t>(std::min<uint64_t>(length, 64)));
            stack.push_back(std::move(v));
            i += 4 + static_cast<size_t>(length);
        } break;
        case 'c': { // GLOBAL: module and name, each ended by a newline
            Item v;
            v.kind = Item::Global;
            for (int k = 0; k < 2; ++k) {
                const void* nl = std::memchr(p + i, '\n', n - i);
                if (!nl)
                    return {};
                const size_t end = static_cast<size_t>(static_cast<const uint8_t*>(nl) - p);
                if (k == 1)
                    v.text.assign(reinterpret_cast<const char*>(p + i), std::min<size_t>(end - i, 64));
                i = end + 1;
            }
            stack.push_back(std::move(v));
        } break;
        case '(': { // MARK
            Item m;
            m.kind = Item::Mark;
            stack.push_back(m);
        } break;
        case ']':
        case ')':
        case '}':
        case 0x88:
        case 0x89:
        case 'N': // EMPTY_LIST/TUPLE/DICT, TRUE, FALSE, NONE
            stack.emplace_back();
            break;
        case 't': { // TUPLE
            std::vector<Item> items;
            followed = popToMark(&items);
            if (followed)
                stack.push_back(tuple(std::move(items)));
        } break;
        case 0x85: // TUPLE1, TUPLE2, TUPLE3
        case 0x86:
        case 0x87: {
            const size_t count = op - 0x84u;
            followed = stack.size() >= count;
            if (followed) {
                std::vector<Item> items(stack.end() - static_cast<long>(count), stack.end());
                stack.resize(stack.size() - count);
                stack.push_back(tuple(std::move(items)));
            }
        } break;
        case 'l': // LIST, DICT: the items since the mark become one value
        case 'd':
            followed = popToMark(nullptr);
            if (followed)
                stack.emplace_back();
            break;
        case 'e': // APPENDS, SETITEMS: the items since the mark go into the value below it
        case 'u': followed = popToMark(nullptr) && !stack.empty(); break;
        case 's': // SETITEM
            followed = pop(2) && !stack.empty();
            break;
        case 0x81: // NEWOBJ
            followed = pop(1);
            break;
        case 'b': // BUILD, REDUCE: a function and its argument become its result
        case 'R':
            followed = pop(2);
            if (followed)
                stack.emplace_back();
            break;
        case 'Q': { // BINPERSID
            if (!following)
                break;
            if (stack.empty())
                return {};
            const Item id = stack.back();
            stack.back() = Item();
            if (id.kind == Item::Tuple && id.items.size() == 5 && id.items[0].kind == Item::Str
                && id.items[0].text == "storage" && id.items[1].kind == Item::Global && id.items[2].kind == Item::Str
                && id.items[4].kind == Item::Int) {
                static const std::map<std::string, int64_t> kItemBytes
                    = { { "DoubleStorage", 8 }, { "FloatStorage", 4 }, { "HalfStorage", 2 }, { "BFloat16Storage", 2 },
                          { "LongStorage", 8 }, { "IntStorage", 4 }, { "ShortStorage", 2 }, { "CharStorage", 1 },
                          { "ByteStorage", 1 }, { "BoolStorage", 1 } };
                const auto bytesPer = kItemBytes.find(id.items[1].text);
                const int64_t count = id.items[4].number;
                const std::string& key = id.items[2].text;
                if (count < 0)
                    return "storage '" + key + "' with " + std::to_string(count) + " elements at byte "
                        + std::to_string(at);
                if (bytesPer != kItemBytes.end() && count > 0) {
                    const auto size = recordSize(key);
                    // The bytes are exact up to 2^56 elements of 8 bytes; past that, the count says it.
                    const bool huge = count > int64_t(1) << 56;
                    const uint64_t bytes = uint64_t(count) * uint64_t(bytesPer->second);
                    if (size && (huge || bytes > *size))
                        return "storage '" + key + "' of " + std::to_string(count) + " elements ("
                            + (huge ? "over 2^56" : std::to_string(bytes)) + " bytes) at byte " + std::to_string(at)
                            + ", whose record holds " + std::to_string(*size) + " bytes";
                }
            }
        } break;
        case '.': // STOP
            return {};
        default: return {};
        }
        if (following && (!followed || stack.size() > kItems || memo.size() > kItems)) {
            following = false;
            stack = {};
            memo = {};
        }
        if (!following)
            stack.clear(); // what this opcode pushed
    }
    return {};
}

} // namespace chatbench
