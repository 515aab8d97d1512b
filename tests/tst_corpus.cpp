// Corpus loaders: every format with good input, and bad input giving an error naming file:line.

#include "chatbench/corpus.h"
#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "testutil.h"

#include <QFileInfo>

#include <algorithm>
#include <optional>
#include <sys/resource.h>
#include <sys/stat.h>

using namespace chatbench;

namespace {

// The error loading `path` gives, or none when it loads.
std::optional<Error> loadError(const std::string& path, const LoadOptions& options = {})
{
    try {
        loadCorpus(path, options);
    } catch (const Error& e) {
        return e;
    }
    return std::nullopt;
}

LoadOptions strictly()
{
    LoadOptions o;
    o.strict = true;
    return o;
}

} // namespace

class TestCorpus : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void goodInputs_data();
    void goodInputs();
    void badInputs_data();
    void badInputs();
    void innerByteOrderMarksAreDropped();
    void yamlFolder();
    void yamlFolderSkipsUnreadableFiles();
    void pairings();
    void specialFilesAreRefused();
    void aliasBombIsCapped();
    void aliasesOfManySmallTurnsAreCapped();
    void oversizedFileIsRefusedUnread();
    void tsvCommentWithATabIsNoted();
    void folderReadsEachFileOnce();
    void formatGuessIsNamedWhenWrong();
    void cornellDuplicateLineId();
    void printableEscapesControls();
    void cornellFolder();
    void cornellMissingLine();
    void cornellDroppedTurnsAreSaid();
    void emptyTurnsSplitConversations();
    void latin1Option();
    void cornellInUtf8IsReadAsUtf8();
    void longLineLimitIsAnOption();
    void folderNamesWhatItCannotRead();
    void folderFollowsLinkedFolders();
    void splitIsDeterministic();
    void exportedPairsReadBackTheSame();
    void bundledCorpusLoads();
};

void TestCorpus::goodInputs_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("format");
    QTest::addColumn<QStringList>("expected"); // prompt|response per pair

    QTest::newRow("yaml")
        << "a.yml"
        << QByteArray(
               "categories:\n- x\nconversations:\n- - Hello\n  - Hi there\n  - How are you?\n- - Bye\n  - See you\n")
        << "yaml" << QStringList { "Hello|Hi there", "Hi there|How are you?", "Bye|See you" };
    QTest::newRow("yaml-crlf-bom") << "b.yaml"
                                   << QByteArray("\xEF\xBB\xBF"
                                                 "conversations:\r\n- - Hello\r\n  - Hi\r\n")
                                   << "yaml" << QStringList { "Hello|Hi" };
    QTest::newRow("yaml-number-turn") << "n.yml" << QByteArray("conversations:\n- - what is six times seven\n  - 42\n")
                                      << "yaml" << QStringList { "what is six times seven|42" };
    QTest::newRow("tsv") << "p.tsv" << QByteArray("# comment\nhello\thi\n\nhow are you\tfine\n") << "tsv"
                         << QStringList { "hello|hi", "how are you|fine" };
    QTest::newRow("tsv-by-content") << "p.txt" << QByteArray("hello\thi\nbye\tcya\n") << "tsv"
                                    << QStringList { "hello|hi", "bye|cya" };
    QTest::newRow("tsv-named-csv") << "tabs.csv" << QByteArray("hi\thello\nbye\tsee you\n") << "tsv"
                                   << QStringList { "hi|hello", "bye|see you" };
    QTest::newRow("tsv-lone-cr") << "cr.tsv" << QByteArray("a\tb\rc\td\r") << "tsv" << QStringList { "a|b", "c|d" };
    QTest::newRow("jsonl-pairs")
        << "d.jsonl"
        << QByteArray(
               "{\"prompt\": \"hi\", \"response\": \"hello\"}\n\n{\"prompt\":\"caf\xC3\xA9?\",\"response\":\"yes\"}\n")
        << "jsonl" << QStringList { "hi|hello", QString::fromUtf8("caf\xC3\xA9?|yes") };
    QTest::newRow("jsonl-messages")
        << "m.json"
        << QByteArray(
               "{\"messages\":[{\"role\":\"system\",\"content\":\"be nice\"},{\"role\":\"user\",\"content\":\"hi\"},"
               "{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":\"user\",\"content\":\"bye\"}]}\n")
        << "jsonl" << QStringList { "hi|hello", "hello|bye" };
    QTest::newRow("jsonl-developer") // OpenAI's newer name for the system message
        << "dev.jsonl"
        << QByteArray("{\"messages\":[{\"role\":\"developer\",\"content\":\"You are terse.\"},{\"role\":\"user\","
                      "\"content\":\"hi there\"},{\"role\":\"assistant\",\"content\":\"hello\"}]}\n")
        << "jsonl" << QStringList { "hi there|hello" };
    QTest::newRow("jsonl-role-names") // other tools' names; an instruction's content in parts is skipped with it
        << "names.jsonl"
        << QByteArray("{\"messages\":[{\"role\":\"System\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]},"
                      "{\"role\":\"human\",\"content\":\"hi\"},{\"role\":\"model\",\"content\":\"hello\"}]}\n")
        << "jsonl" << QStringList { "hi|hello" };
    // Found by an outside pass: a CR or U+FEFF written as an escape reached the tokenizer, which
    // made "one\r" a word of the vocabulary that the vocabulary file then refused (a run that
    // trained, exit 0, and could neither chat nor resume). They are read as the file loaders read
    // them in a file's own bytes: CR a line break, U+FEFF dropped (a text left empty is no pair).
    QTest::newRow("jsonl-escaped-cr-and-bom")
        << "crlf.jsonl"
        << QByteArray("{\"prompt\":\"line one\\r\\nline two\",\"response\":\"ok\\rthen\"}\n"
                      "{\"prompt\":\"\\ufeff hello\",\"response\":\"there\\ufeff\"}\n"
                      "{\"prompt\":\"\\ufeff\",\"response\":\"nothing\"}\n")
        << "jsonl" << QStringList { "line one\nline two|ok\nthen", "hello|there" };
    QTest::newRow("jsonl-turn-of-a-bom") // as an empty turn: the conversation is split there
        << "turns.jsonl" << QByteArray("{\"messages\":[\"hi\",\"\\ufeff\",\"how are you\",\"fine\"]}\n") << "jsonl"
        << QStringList { "how are you|fine" };
    QTest::newRow("yaml-escaped-cr") << "cr.yml" << QByteArray("conversations:\n- - \"good\\rmorning\"\n  - hi\n")
                                     << "yaml" << QStringList { "good\nmorning|hi" };
    QTest::newRow("dialog") << "talk.txt" << QByteArray("hello\nhi\nhow are you\n\nbye\nsee you\n") << "dialog"
                            << QStringList { "hello|hi", "hi|how are you", "bye|see you" };
}

void TestCorpus::goodInputs()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, bytes);
    QFETCH(QString, format);
    QFETCH(QStringList, expected);
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, name, bytes);
    QCOMPARE(QString::fromStdString(formatName(detectFormat(path))), format);
    const Corpus c = loadCorpus(path);
    QStringList got;
    for (const auto& p : c.pairs)
        got << QString::fromStdString(p.prompt + "|" + p.response);
    QCOMPARE(got, expected);
    QCOMPARE(c.pairs.front().file, path);
    QVERIFY(c.pairs.front().line >= 1);
    // What training then chat do with the pairs: the vocabulary built from them is saved and read
    // back, in either tokenizer mode.
    for (const TokenizerMode mode : { TokenizerMode::Keras, TokenizerMode::Punctuation }) {
        TokenizerOptions opt;
        opt.mode = mode;
        const Tokenizer built = Tokenizer::build(c.pairs, opt);
        built.save(dir.filePath("vocab.json").toStdString());
        QCOMPARE(Tokenizer::load(dir.filePath("vocab.json").toStdString()).size(), built.size());
    }
}

void TestCorpus::badInputs_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<long>("line"); // expected line in the error (0 = whole file)
    QTest::addColumn<QString>("fragment");
    QTest::addColumn<int>("kept"); // pairs a tolerant load keeps (0: it fails at the same file:line)

    QTest::newRow("empty") << "e.yml" << QByteArray() << 0L << "empty" << 0;
    QTest::newRow("yaml-syntax") << "s.yml" << QByteArray("conversations:\n- - Hello\n  - [unclosed\n") << 4L << "YAML"
                                 << 0;
    QTest::newRow("yaml-no-key") << "k.yml" << QByteArray("talks:\n- - a\n  - b\n") << 1L << "conversations" << 0;
    QTest::newRow("yaml-map-turn") << "t.yml" << QByteArray("conversations:\n- - Hello\n  - {a: b}\n- - x\n  - y\n")
                                   << 3L << "turn" << 1;
    QTest::newRow("yaml-scalar-conversation")
        << "q.yml" << QByteArray("conversations:\n- - a\n  - b\n- what is two?\n  - '2'\n- - c\n  - d\n") << 4L
        << "list of turns" << 2;
    QTest::newRow("invalid-utf8") << "u.tsv" << QByteArray("good\tline\nbad \xFF\xFE byte\tx\n") << 2L << "UTF-8" << 0;
    QTest::newRow("overlong-utf8") << "o.tsv" << QByteArray("a\tb\n\xC0\xAF\tx\n") << 2L << "UTF-8" << 0;
    QTest::newRow("tsv-no-tab") << "n.tsv" << QByteArray("a\tb\nno tab here\n") << 2L << "tab" << 1;
    QTest::newRow("tsv-three-columns") << "c.tsv" << QByteArray("a\tb\tc\n") << 1L << "two" << 0;
    // Found by an outside pass: a spreadsheet's CSV loaded as dialog turns (header and rows chained
    // into pairs of one another, a quoted field cut at its line break), exit 0.
    QTest::newRow("csv") << "pairs.csv"
                         << QByteArray("prompt,response\nhi,hello there\n\"how are you, friend\",\"fine\nand you?\"\n")
                         << 0L << "comma-separated values (CSV) are not a corpus format: save the pairs as TSV" << 0;
    QTest::newRow("jsonl-syntax") << "j.jsonl"
                                  << QByteArray("{\"prompt\":\"a\",\"response\":\"b\"}\n{\"prompt\": oops}\n") << 2L
                                  << "JSON" << 1;
    QTest::newRow("jsonl-number-overflow")
        << "n.jsonl" << QByteArray("{\"prompt\": \"a\", \"response\": 1e99999}\n") << 1L << "JSON" << 0;
    QTest::newRow("jsonl-field-types") << "f.jsonl"
                                       << QByteArray("{\"messages\": [\"a\", \"b\"]}\n"
                                                     "{\"prompt\": [1], \"response\": \"x\"}\n")
                                       << 2L << "strings" << 1;
    // Found by an outside pass on OpenAI-style chat records: every message but a system one was a
    // turn, whatever its role, so a tool's output, a second question and an unknown role were
    // trained as replies, and a record holding both forms lost its messages without a word.
    const QByteArray good = "{\"prompt\": \"x\", \"response\": \"y\"}\n";
    QTest::newRow("jsonl-role-type") << "r.jsonl"
                                     << QByteArray("{\"messages\": [{\"role\": 3, \"content\": \"a\"}, \"b\"]}\n")
            + good << 1L << "message 1: 'role' must be a string"
                                     << 1;
    QTest::newRow("jsonl-tool-role")
        << "tool.jsonl"
        << QByteArray("{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\","
                      "\"content\":\"let me check\"},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"20\"},"
                      "{\"role\":\"assistant\",\"content\":\"it is 20 degrees\"}]}\n")
            + good
        << 1L << "message 3 has the role 'tool': the turns are 'user' and 'assistant' messages" << 1;
    QTest::newRow("jsonl-same-role-twice") << "twice.jsonl"
                                           << good
            + "{\"messages\":[{\"role\":\"user\",\"content\":\"what is up\"},{\"role\":\"system\",\"content\":"
              "\"s\"},{\"role\":\"user\",\"content\":\"are you there\"},{\"role\":\"assistant\",\"content\":"
              "\"yes\"}]}\n" << 2L << "messages 1 and 3 are both 'user'"
                                           << 1;
    QTest::newRow("jsonl-roles-and-none")
        << "mixed.jsonl" << QByteArray("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},\"r\"]}\n") + good << 1L
        << "some messages have a 'user' or 'assistant' role and some have none" << 1;
    QTest::newRow("jsonl-both-forms") << "both.jsonl"
                                      << QByteArray(
                                             "{\"messages\":[\"a\",\"b\"],\"prompt\":\"x\",\"response\":\"y\"}\n")
            + good << 1L << "holds both 'messages' and 'prompt'/'response'"
                                      << 1;
    QTest::newRow("jsonl-types") << "t.jsonl" << QByteArray("{\"prompt\": 3, \"response\": \"b\"}\n") << 1L << "strings"
                                 << 0;
    QTest::newRow("jsonl-key-twice") << "k.jsonl"
                                     << QByteArray("{\"prompt\":\"a\",\"response\":\"b\"}\n"
                                                   "{\"prompt\": \"q\", \"response\": \"r\", \"prompt\": \"p\"}\n")
                                     << 2L << "the key 'prompt' appears twice" << 1;
    QTest::newRow("jsonl-shape") << "x.jsonl" << QByteArray("{\"question\": \"a\"}\n") << 1L << "expected" << 0;
    // A line past the limit was an error for the whole file, in every format: in TSV and JSON Lines
    // it is one record, skipped like any malformed one.
    QTest::newRow("jsonl-long-record")
        << "long.jsonl"
        << (QByteArray("{\"prompt\":\"a\",\"response\":\"b\"}\n{\"prompt\":\"c\",\"response\":\"")
               + QByteArray(70000, 'x') + "\"}\n{\"prompt\":\"d\",\"response\":\"e\"}\n")
        << 2L << "--max-line-kb raises it" << 2;
    QTest::newRow("tsv-long-record") << "long.tsv"
                                     << (QByteArray("a\tb\nc\t") + QByteArray(70000, 'x') + "\nd\te\nf\tg\n") << 2L
                                     << "the limit is 65536 bytes" << 3;
    // C1 controls (U+0085 NEL, U+009B CSI) act on terminals like C0 ones.
    QTest::newRow("tsv-c1-control") << "c1.tsv"
                                    << QByteArray("a\tb\nhello\xC2\x9B"
                                                  "31m\tx\n")
                                    << 2L << "control character U+009B" << 1;
    QTest::newRow("absurd-line") << "l.txt" << (QByteArray("hi\nthere\n") + QByteArray(100000, 'x') + "\n") << 3L
                                 << "limit" << 0;
    QTest::newRow("no-pairs") << "one.txt" << QByteArray("only one line\n") << 0L << "no prompt/response pairs" << 0;
    // The UTF-8 error names the byte and line of the file as it is (CRLF and a BOM uncollapsed).
    QTest::newRow("invalid-utf8-crlf") << "w.tsv" << QByteArray("a\tb\r\nc\td\r\n\r\ne\xFF\tf\r\n") << 4L
                                       << "byte 13 of the file" << 0;
    // What a one-document YAML reader used to drop without a word.
    QTest::newRow("yaml-second-document")
        << "m.yml" << QByteArray("conversations:\n- - hello\n  - hi\n---\nconversations:\n- - foo\n  - bar\n") << 5L
        << "second YAML document" << 0;
    QTest::newRow("yaml-duplicate-key") << "d.yml"
                                        << QByteArray(
                                               "conversations:\n- - hello\n  - hi\nconversations:\n- - foo\n  - bar\n")
                                        << 4L << "second 'conversations:' key (the first is on line 1)" << 0;
    // Found trying hostile files: UTF-16 was called invalid UTF-8 with advice to read it as
    // Latin-1 (which then "worked", NUL bytes and all); NULs in TSV and control escapes in JSON
    // reached the vocabulary.
    QTest::newRow("tsv-utf16") << "w.tsv" << QByteArray("\xFF\xFEh\0i\0\t\0y\0o\0\n\0", 14) << 0L
                               << "UTF-16 (little-endian" << 0;
    QTest::newRow("tsv-utf16-no-mark") << "v.tsv" << QByteArray("\0h\0e\0l\0l\0o\0\t\0y\0o\0\n", 18) << 0L
                                       << "UTF-16 (big-endian, no byte-order mark" << 0;
    // UTF-32 was told to convert from UTF-16 (an outside pass).
    QTest::newRow("tsv-utf32") << "w32.tsv" << QByteArray("\xFF\xFE\0\0h\0\0\0i\0\0\0", 12) << 0L
                               << "UTF-32 (little-endian, byte-order mark FF FE 00 00), not UTF-8: convert it, e.g. "
                                  "iconv -f UTF-32 -t UTF-8"
                               << 0;
    QTest::newRow("tsv-nul") << "n.tsv" << QByteArray("good\tday\nhello\thi\0there\n", 24) << 2L << "NUL byte" << 0;
    QTest::newRow("jsonl-control")
        << "c.jsonl"
        << QByteArray("{\"prompt\":\"a\\u001bb\",\"response\":\"x\"}\n{\"prompt\":\"ok\",\"response\":\"fine\"}\n")
        << 1L << "control character U+001B" << 1;
    QTest::newRow("yaml-nul") << "z.yml" << QByteArray("conversations:\n- - hel\0lo\n  - hi\n", 31) << 2L << "NUL byte"
                              << 0;
    QByteArray deep = "conversations:\n";
    for (int i = 0; i < 600; ++i)
        deep += QByteArray(i, ' ') + "-\n";
    QTest::newRow("yaml-too-deep") << "deep.yml" << deep << 500L << "nested more than 500 levels deep" << 0;
    // yaml-cpp's LoadAll used to allocate empty documents without end on these (found by fuzzing).
    QTest::newRow("yaml-leading-comma")
        << "c.yml" << QByteArray(",onversations:\n- - hello\n  - hi\n---\nconversations:\n- - foo\n  - bar\n") << 1L
        << "a document cannot start with ','" << 0;
    QTest::newRow("yaml-comma-after-document")
        << "c2.yml" << QByteArray("conversations:\n- - hello\n  - hi\n---\n, x\n") << 5L
        << "a document cannot start with ','" << 0;
    QTest::newRow("jsonl-array") << "a.jsonl" << QByteArray("[\"hello\", \"hi\"]\n") << 1L << "not a JSON array" << 0;
    QTest::newRow("jsonl-spread-document")
        << "s.json" << QByteArray("{\n  \"prompt\": \"a\",\n  \"response\": \"b\"\n}\n") << 1L << "spread over lines"
        << 0;
}

// Files joined with cat carry each one's byte-order mark inside: U+FEFF, a zero-width character,
// is dropped wherever it is (it once stayed inside the first word of a TSV line, and YAML refused
// the whole file).
void TestCorpus::innerByteOrderMarksAreDropped()
{
    QTemporaryDir dir;
    const Corpus tsv = loadCorpus(testutil::writeFile(dir, "j.tsv",
        "\xEF\xBB\xBF"
        "a\tb\n\xEF\xBB\xBFhow\tfi\xEF\xBB\xBFne\n"));
    QCOMPARE(tsv.pairs.size(), size_t(2));
    QCOMPARE(tsv.pairs[1].prompt, std::string("how"));
    QCOMPARE(tsv.pairs[1].response, std::string("fine"));
    const Corpus yaml = loadCorpus(
        testutil::writeFile(dir, "j.yml", "conversations:\n- - hello\n  - hi\n\xEF\xBB\xBF- - foo\n  - bar\n"));
    QCOMPARE(yaml.pairs.size(), size_t(2));
    QCOMPARE(yaml.pairs[1].prompt, std::string("foo"));
    QCOMPARE(yaml.pairs[1].line, 4L);
}

void TestCorpus::badInputs()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, bytes);
    QFETCH(long, line);
    QFETCH(QString, fragment);
    QFETCH(int, kept);
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, name, bytes);
    auto expectError = [&](const LoadOptions& opt) {
        try {
            loadCorpus(path, opt);
            QFAIL("expected an error");
        } catch (const Error& e) {
            QCOMPARE(QString::fromStdString(e.file()), QString::fromStdString(path));
            QCOMPARE(e.line(), line);
            QVERIFY2(QString::fromStdString(e.message()).contains(fragment, Qt::CaseInsensitive), e.what());
            if (line > 0)
                QVERIFY(QString(e.what()).startsWith(QString::fromStdString(path) + ":" + QString::number(line) + ":"));
        }
    };
    // Strict: the first problem is an error, with its file and line.
    LoadOptions strict;
    strict.strict = true;
    expectError(strict);
    // Tolerant (the default): a bad record is skipped and reported where it is; a file with
    // nothing usable left still fails there.
    if (kept == 0) {
        expectError({});
        return;
    }
    const Corpus c = loadCorpus(path);
    QCOMPARE(c.pairs.size(), size_t(kept));
    QCOMPARE(c.skippedRecords(), int64_t(1));
    const auto bad = std::find_if(c.warnings.begin(), c.warnings.end(),
        [](const CorpusWarning& w) { return w.kind == CorpusWarning::Kind::Record; });
    QCOMPARE(bad->file, path);
    QCOMPARE(bad->line, line);
    QVERIFY2(QString::fromStdString(bad->message).contains(fragment, Qt::CaseInsensitive), bad->message.c_str());
    QCOMPARE(QString::fromStdString(toString(*bad)),
        QString::fromStdString(path) + ":" + QString::number(line) + ": " + QString::fromStdString(bad->message));
}

// corpus export: another tool (the side-by-side peers) trains on exactly the pairs chatbench does.
void TestCorpus::exportedPairsReadBackTheSame()
{
    QTemporaryDir dir;
    // A YAML corpus whose turns hold what one TSV line cannot: tabs, line breaks, a leading '#',
    // a non-ASCII word; and one malformed record, which the export leaves out as training does.
    const std::string yaml = testutil::writeFile(dir, "c.yml",
        "conversations:\n"
        "- - \"tab\\there\"\n  - \"two\\nlines\\n here\"\n  - \"#hashtag first\"\n"
        "- - café\n  - \"  padded  \"\n"
        "- just text\n");
    const Corpus original = loadCorpus(yaml);
    QCOMPARE(original.skippedRecords(), int64_t(1));
    const std::string tsv = dir.filePath("pairs.tsv").toStdString();
    writePairs(original.pairs, tsv);
    const Corpus back = loadCorpus(tsv, {});
    QCOMPARE(back.format, CorpusFormat::Tsv);
    QCOMPARE(back.warnings.size(), size_t(0));
    QCOMPARE(back.pairs.size(), original.pairs.size());
    const std::vector<std::pair<std::string, std::string>> expected
        = { { "tab here", "two lines  here" }, { "two lines  here", "#hashtag first" }, { "café", "padded" } };
    for (size_t i = 0; i < expected.size(); ++i) {
        QCOMPARE(back.pairs[i].prompt, expected[i].first);
        QCOMPARE(back.pairs[i].response, expected[i].second);
    }
    // The words are the same, so is everything a tokenizer makes of them.
    const Tokenizer words = Tokenizer::build(original.pairs, {});
    for (size_t i = 0; i < back.pairs.size(); ++i) {
        QCOMPARE(words.split(back.pairs[i].prompt), words.split(original.pairs[i].prompt));
        QCOMPARE(words.split(back.pairs[i].response), words.split(original.pairs[i].response));
    }
    // JSON Lines (found by an outside pass: an export named .jsonl was TSV, which the next
    // command could not read) keep the texts exactly, tabs and line breaks too.
    const std::string jsonl = dir.filePath("pairs.jsonl").toStdString();
    writePairs(original.pairs, jsonl);
    const Corpus exact = loadCorpus(jsonl, {});
    QCOMPARE(exact.format, CorpusFormat::Jsonl);
    QCOMPARE(exact.pairs.size(), original.pairs.size());
    for (size_t i = 0; i < exact.pairs.size(); ++i) {
        QCOMPARE(exact.pairs[i].prompt, original.pairs[i].prompt);
        QCOMPARE(exact.pairs[i].response, original.pairs[i].response);
    }
    QCOMPARE(exportFormat(dir.filePath("pairs.txt").toStdString()), CorpusFormat::Tsv);
    QCOMPARE(exportFormat("PAIRS.NDJSON"), CorpusFormat::Jsonl);
    for (const char* yamlName : { "pairs.yml", "p.YAML" })
        try {
            exportFormat(yamlName);
            QFAIL("a YAML name was taken");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("name the file .tsv, or .jsonl") != std::string::npos, e.what());
        }
    // An unwritable destination is an error naming it.
    const std::string nowhere = dir.filePath("missing/pairs.tsv").toStdString();
    try {
        writePairs(original.pairs, nowhere);
        QFAIL("no error");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find(nowhere) != std::string::npos, e.what());
    }
}

void TestCorpus::yamlFolder()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "c/b.yml", "conversations:\n- - two\n  - 2\n");
    testutil::writeFile(dir, "c/a.yml", "conversations:\n- - one\n  - 1\n");
    testutil::writeFile(dir, "c/sub/z.yaml", "conversations:\n- - three\n  - 3\n");
    testutil::writeFile(dir, "c/empty.yml", "");
    testutil::writeFile(dir, "c/notes.md", "ignored");
    const Corpus c = loadCorpus(dir.filePath("c").toStdString());
    QCOMPARE(c.format, CorpusFormat::ChatterbotYaml);
    QCOMPARE(c.pairs.size(), size_t(3));
    QCOMPARE(c.pairs[0].prompt, std::string("one")); // files in sorted order
    QCOMPARE(c.files.size(), size_t(3));
    // The empty file, and the file of another name, which a folder does not read (it was left
    // out without a word, as a .tsv or .jsonl beside the YAML files was).
    QCOMPARE(c.warnings.size(), size_t(2));
    QCOMPARE(c.warnings[0].kind, CorpusWarning::Kind::Note);
    QVERIFY2(c.warnings[0].message.find("1 file(s) not read") != std::string::npos
            && c.warnings[0].message.find("notes.md") != std::string::npos,
        c.warnings[0].message.c_str());
    QVERIFY(c.warnings[1].message.find("empty file skipped") != std::string::npos);

    // A pipe named .yml (it would block a reader) is skipped with a warning, an error when strict,
    // and named when it is all the folder holds ("holds no .yml files" said nothing of it).
    const QString fifo = dir.filePath("c/pipe.yml");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    const Corpus withPipe = loadCorpus(dir.filePath("c").toStdString());
    QCOMPARE(withPipe.pairs.size(), size_t(3));
    QCOMPARE(withPipe.skippedFiles(), int64_t(1));
    LoadOptions strict;
    strict.strict = true;
    for (const QString& folder : { dir.filePath("c"), dir.filePath("only-pipe") }) {
        if (folder.endsWith("only-pipe")) {
            QVERIFY(QDir().mkpath(folder));
            QCOMPARE(::mkfifo((folder + "/a.yml").toLocal8Bit().constData(), 0600), 0);
        }
        try {
            (void)loadCorpus(folder.toStdString(), strict);
            QFAIL("a pipe named .yml was read or passed over");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("pipe.yml") != std::string::npos
                    || std::string(e.what()).find("a.yml") != std::string::npos,
                e.what());
            QVERIFY2(std::string(e.what()).find("not a regular file") != std::string::npos, e.what());
        }
    }
}

void TestCorpus::yamlFolderSkipsUnreadableFiles()
{
    // One file among several that cannot be parsed at all is skipped and named; strict fails on it.
    QTemporaryDir dir;
    testutil::writeFile(dir, "c/a.yml", "conversations:\n- - one\n  - 1\n");
    const std::string broken = testutil::writeFile(dir, "c/b.yml", "conversations:\n- - two\n  - [unclosed\n");
    testutil::writeFile(dir, "c/c.yml", "categories:\n- x\n");
    testutil::writeFile(dir, "c/d.yml", "conversations:\n- - bad \xFF byte\n  - 2\n");
    testutil::writeFile(dir, "c/e.yml", "conversations:\n- - three\n  - 3\n- just text\n");
    const std::string path = dir.filePath("c").toStdString();
    const Corpus c = loadCorpus(path);
    QCOMPARE(c.pairs.size(), size_t(2));
    QCOMPARE(c.skippedFiles(), int64_t(3));
    QCOMPARE(c.skippedRecords(), int64_t(1));
    QCOMPARE(c.files.size(), size_t(2)); // only the files read
    QCOMPARE(c.warnings[0].file, broken);
    QCOMPARE(c.warnings[0].line, 4L);
    QVERIFY(c.warnings[0].message.find("file skipped") != std::string::npos);
    QCOMPARE(c.warnings[1].line, 1L); // c.yml: no conversations key
    QCOMPARE(c.warnings[2].line, 2L); // d.yml: the bad byte
    QCOMPARE(c.warnings[3].kind, CorpusWarning::Kind::Record);
    QCOMPARE(c.warnings[3].line, 4L);
    const auto e = loadError(path, strictly());
    QVERIFY(e);
    QCOMPARE(e->file(), broken);
    QCOMPARE(e->line(), 4L);
    // A folder whose only file is unreadable is an error, not an empty corpus.
    QTemporaryDir one;
    const std::string only = testutil::writeFile(one, "c/only.yml", "conversations: [\n");
    try {
        loadCorpus(one.filePath("c").toStdString());
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), only);
    }
}

void TestCorpus::specialFilesAreRefused()
{
    // A FIFO would block the reader until a writer came (it hung `corpus validate`).
    QTemporaryDir dir;
    const std::string fifo = dir.filePath("pipe.tsv").toStdString();
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    for (int i = 0; i < 2; ++i) {
        try {
            if (i == 0)
                loadCorpus(fifo);
            else
                detectFormat(fifo);
            QFAIL("expected an error");
        } catch (const Error& e) {
            QCOMPARE(e.file(), fifo);
            QVERIFY2(QString(e.what()).contains("not a regular file"), e.what());
        }
    }
    LoadOptions tsv;
    tsv.format = CorpusFormat::Tsv;
    QVERIFY_THROWS_EXCEPTION(Error, loadCorpus(fifo, tsv));
    QVERIFY_THROWS_EXCEPTION(Error, Tokenizer::load(fifo));
    // A file that cannot be opened says the system's reason ("cannot open file" named none; found
    // by an outside pass with a file it had no permission for). Root reads any file, so a limit
    // of open files stands in: every open fails with EMFILE.
    const std::string plain = testutil::writeFile(dir, "plain.tsv", "hi\tthere\n");
    struct rlimit before { };
    QVERIFY(::getrlimit(RLIMIT_NOFILE, &before) == 0);
    struct rlimit none = before;
    none.rlim_cur = 0;
    QVERIFY(::setrlimit(RLIMIT_NOFILE, &none) == 0);
    std::string what;
    try {
        (void)loadCorpus(plain, tsv);
    } catch (const Error& e) {
        what = e.what();
    }
    ::setrlimit(RLIMIT_NOFILE, &before);
    QVERIFY2(what.find(plain + ": cannot open file (Too many open files)") != std::string::npos, what.c_str());
}

void TestCorpus::aliasBombIsCapped()
{
    // A 100 KB file whose aliases repeat one 50 KB text 3000 times expands to 150 MB: over the cap
    // it is an error (strict or not), raised it loads. (Uncapped, such files took gigabytes.)
    QTemporaryDir dir;
    QByteArray yaml = "conversations:\n- - &big " + QByteArray(50000, 'x') + "\n  - hi\n";
    for (int i = 0; i < 1500; ++i)
        yaml += "- - *big\n  - *big\n";
    const std::string path = testutil::writeFile(dir, "bomb.yml", yaml);
    LoadOptions opt;
    opt.maxTextBytes = int64_t(64) << 20;
    try {
        loadCorpus(path, opt);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), path);
        QVERIFY(e.line() > 1);
        QVERIFY2(QString(e.what()).contains("takes more than 64 MiB"), e.what());
    }
    opt.maxTextBytes = int64_t(256) << 20; // raised: it loads
    QCOMPARE(loadCorpus(path, opt).pairs.size(), size_t(1501));
}

void TestCorpus::aliasesOfManySmallTurnsAreCapped()
{
    // Each turn and pair costs memory and time beyond its text: a 200 KB file aliasing a list
    // of 20 000 one-letter turns 20 000 times took gigabytes, and one of empty turns minutes
    // (the text counted nothing). Both now stop at the cap, at once.
    QTemporaryDir dir;
    QByteArray tiny = "t: &t\n";
    QByteArray empty = "t: &t\n";
    for (int i = 0; i < 20000; ++i) {
        tiny += "  - a\n";
        empty += "  - ~\n";
    }
    tiny += "conversations:\n";
    empty += "conversations:\n";
    for (int i = 0; i < 20000; ++i) {
        tiny += "  - *t\n";
        empty += "  - *t\n";
    }
    LoadOptions opt;
    opt.maxTextBytes = int64_t(20) << 20;
    for (const auto& [name, bytes] : { std::pair { "tiny.yml", tiny }, std::pair { "empty.yml", empty } }) {
        const std::string path = testutil::writeFile(dir, name, bytes);
        try {
            loadCorpus(path, opt);
            QFAIL("expected an error");
        } catch (const Error& e) {
            QCOMPARE(e.file(), path);
            QVERIFY2(QString(e.what()).contains("takes more than 20 MiB"), e.what());
        }
    }
}

void TestCorpus::oversizedFileIsRefusedUnread()
{
    // A 3 GiB file (sparse: no disk used) over a 1 MiB cap is refused by its size, not read.
    QTemporaryDir dir;
    QFile f(dir.filePath("huge.tsv"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    QVERIFY(f.resize(qint64(3) << 30));
    f.close();
    LoadOptions opt;
    opt.maxTextBytes = int64_t(1) << 20;
    try {
        loadCorpus(f.fileName().toStdString(), opt);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("the file is 3072 MiB, more than the limit of 1 MiB"), e.what());
    }
}

void TestCorpus::tsvCommentWithATabIsNoted()
{
    // '#' starts a comment; one that looks like a record is not dropped silently.
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, "h.tsv", "#hashtag\treply\n# plain comment\nhello\thi\n");
    const Corpus c = loadCorpus(path);
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.warnings.size(), size_t(1));
    QCOMPARE(c.warnings[0].kind, CorpusWarning::Kind::Note);
    QCOMPARE(c.warnings[0].line, 1L);
    QVERIFY(QString::fromStdString(c.warnings[0].message).contains("comment"));
}

void TestCorpus::folderReadsEachFileOnce()
{
    // A link beside its target is read once; a broken link is named, not silently passed over.
    QTemporaryDir dir;
    const std::string a = testutil::writeFile(dir, "c/a.yml", "conversations:\n- - one\n  - 1\n");
    QVERIFY(QFile::link(QString::fromStdString(a), dir.filePath("c/b.yml")));
    QVERIFY(QFile::link(dir.filePath("c/gone.yml"), dir.filePath("c/c.yml")));
    const Corpus c = loadCorpus(dir.filePath("c").toStdString());
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.files.size(), size_t(1));
    QStringList notes;
    for (const auto& w : c.warnings)
        notes << QString::fromStdString(toString(w));
    QVERIFY2(notes.join('\n').contains("b.yml: the same file as " + QString::fromStdString(a)),
        qPrintable(notes.join('\n')));
    QVERIFY2(notes.join('\n').contains("c.yml: broken link skipped"), qPrintable(notes.join('\n')));
}

void TestCorpus::formatGuessIsNamedWhenWrong()
{
    // A dialog file whose first line starts with '{' is guessed to be JSON Lines: the error says
    // it was a guess.
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, "talk.txt", "{braces} are fun\nthey are\n");
    try {
        loadCorpus(path);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("read as jsonl, guessed from the content"), e.what());
    }
    LoadOptions dialog;
    dialog.format = CorpusFormat::DialogText;
    QCOMPARE(loadCorpus(path, dialog).pairs.size(), size_t(1));
}

void TestCorpus::printableEscapesControls()
{
    // What error messages and the chat print: C0 and C1 controls, bidirectional overrides and
    // bytes that are not UTF-8 as \xNN; every other character as it is.
    QCOMPARE(printable("a\x1B[31m b\xC2\x9B c\xE2\x80\xAE d\xE2\x81\xA6 e\xFF caf\xC3\xA9 \xE2\x82\xAC"),
        std::string("a\\x1B[31m b\\xC2\\x9B c\\xE2\\x80\\xAE d\\xE2\\x81\\xA6 e\\xFF caf\xC3\xA9 \xE2\x82\xAC"));
    // The marks that reorder text (U+200E, U+200F, U+061C) and the line and paragraph separators
    // (U+2028, U+2029) too (an outside pass found them printed as they were); their neighbours not.
    QCOMPARE(
        printable(
            "l\xE2\x80\x8E r\xE2\x80\x8F a\xD8\x9C s\xE2\x80\xA8 p\xE2\x80\xA9 \xE2\x80\x8D \xE2\x80\xA7 \xD8\x9B"),
        std::string("l\\xE2\\x80\\x8E r\\xE2\\x80\\x8F a\\xD8\\x9C s\\xE2\\x80\\xA8 p\\xE2\\x80\\xA9 \xE2\x80\x8D "
                    "\xE2\x80\xA7 \xD8\x9B"));
    // What shows nothing: the zero-width space, the word joiner and U+FEFF (a chat's "unknown
    // word" that looked like a known one held one); zero-width joiners print (emoji need them).
    QCOMPARE(printable("\xEF\xBB\xBFhello z\xE2\x80\x8Bw j\xE2\x81\xA0k \xE2\x80\x8C"),
        std::string("\\xEF\\xBB\\xBFhello z\\xE2\\x80\\x8Bw j\\xE2\\x81\\xA0k \xE2\x80\x8C"));
}

void TestCorpus::pairings()
{
    QTemporaryDir dir;
    const std::string yml = testutil::writeFile(
        dir, "p.yml", "conversations:\n- - hi\n  - hello\n  - how are you\n  - fine\n- - bye\n  - see you\n");
    const std::string txt = testutil::writeFile(dir, "p.txt", "a\nb\nc\n\nd\ne\n");
    const std::string jsonl = testutil::writeFile(
        dir, "p.jsonl", "{\"messages\": [\"q\", {\"role\": \"system\", \"content\": \"s\"}, \"r1\", \"r2\"]}\n");
    auto load = [](const std::string& path, Pairing p) {
        LoadOptions opt;
        opt.pairing = p;
        const Corpus c = loadCorpus(path, opt);
        QStringList got;
        for (const auto& x : c.pairs)
            got << QString::fromStdString(x.prompt + "|" + x.response);
        return std::make_pair(got, c.pairing);
    };
    QCOMPARE(load(yml, Pairing::Consecutive).first,
        (QStringList { "hi|hello", "hello|how are you", "how are you|fine", "bye|see you" }));
    QCOMPARE(load(yml, Pairing::FirstRest).first, (QStringList { "hi|hello how are you fine", "bye|see you" }));
    QCOMPARE(load(yml, Pairing::FirstRest).second, Pairing::FirstRest);
    QCOMPARE(load(txt, Pairing::FirstRest).first, (QStringList { "a|b c", "d|e" }));
    QCOMPARE(load(jsonl, Pairing::FirstRest).first, (QStringList { "q|r1 r2" }));
    QCOMPARE(pairingName(Pairing::FirstRest), std::string("first-rest"));
    QCOMPARE(parsePairing("consecutive"), std::optional<Pairing>(Pairing::Consecutive));
    QVERIFY(!parsePairing("first_rest"));
}

void TestCorpus::cornellFolder()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "cornell/movie_lines.txt",
        "L1 +++$+++ u0 +++$+++ m0 +++$+++ BIANCA +++$+++ Can we go?\n"
        "L2 +++$+++ u2 +++$+++ m0 +++$+++ CAMERON +++$+++ Sure, caf\xE9 first.\n"
        "L3 +++$+++ u0 +++$+++ m0 +++$+++ BIANCA +++$+++ Great.\n");
    testutil::writeFile(
        dir, "cornell/movie_conversations.txt", "u0 +++$+++ u2 +++$+++ m0 +++$+++ ['L1', 'L2', 'L3']\r\n");
    const Corpus c = loadCorpus(dir.filePath("cornell").toStdString());
    QCOMPARE(c.format, CorpusFormat::Cornell);
    QCOMPARE(c.pairs.size(), size_t(2));
    QCOMPARE(c.pairs[0].prompt, std::string("Can we go?"));
    QCOMPARE(c.pairs[0].response, std::string("Sure, caf\xC3\xA9 first.")); // Latin-1 decoded to UTF-8
    QCOMPARE(c.pairs[1].response, std::string("Great."));
    QVERIFY(c.warnings.empty());
    // YAML files beside them are not read, and that is said (found dropped without a word).
    testutil::writeFile(dir, "cornell/greetings.yml", "conversations:\n- - hi\n  - hello\n");
    testutil::writeFile(dir, "cornell/more/other.yaml", "conversations:\n- - bye\n  - see you\n");
    LoadOptions strict;
    strict.strict = true;
    const Corpus mixed = loadCorpus(dir.filePath("cornell").toStdString(), strict);
    QCOMPARE(mixed.pairs.size(), size_t(2));
    QCOMPARE(mixed.warnings.size(), size_t(1));
    QVERIFY2(mixed.warnings[0].message.find("2 YAML file(s) not read, since a folder with movie_lines.txt is read as "
                                            "Cornell: greetings.yml and 1 more")
            != std::string::npos,
        mixed.warnings[0].message.c_str());
}

void TestCorpus::cornellMissingLine()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "cornell/movie_lines.txt", "L1 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ Hi\n");
    const std::string conv = testutil::writeFile(dir, "cornell/movie_conversations.txt",
        "u0 +++$+++ u2 +++$+++ m0 +++$+++ ['L1']\nu0 +++$+++ u2 +++$+++ m0 +++$+++ ['L1', 'L9']\n");
    try {
        loadCorpus(dir.filePath("cornell").toStdString());
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), conv);
        QCOMPARE(e.line(), 2L);
        QVERIFY(QString(e.what()).contains("L9"));
    }
}

void TestCorpus::cornellDuplicateLineId()
{
    // The second line with an id already seen is a bad record, not a silent overwrite.
    QTemporaryDir dir;
    const std::string lines = testutil::writeFile(dir, "cornell/movie_lines.txt",
        "L1 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ Hi\n"
        "L2 +++$+++ u2 +++$+++ m0 +++$+++ B +++$+++ Hello\n"
        "L1 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ Overwritten?\n");
    testutil::writeFile(dir, "cornell/movie_conversations.txt", "u0 +++$+++ u2 +++$+++ m0 +++$+++ ['L1', 'L2']\n");
    const Corpus c = loadCorpus(dir.filePath("cornell").toStdString());
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.pairs[0].prompt, std::string("Hi"));
    QCOMPARE(c.skippedRecords(), int64_t(1));
    QCOMPARE(c.warnings[0].file, lines);
    QCOMPARE(c.warnings[0].line, 3L);
    QVERIFY(QString::fromStdString(c.warnings[0].message).contains("appears twice (first on line 1)"));
}

void TestCorpus::cornellDroppedTurnsAreSaid()
{
    // A conversation listing no lines, and a line without text, went without a word (a TSV
    // record with an empty side is a warning).
    QTemporaryDir dir;
    testutil::writeFile(dir, "cornell/movie_lines.txt",
        "L1 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ Hi\n"
        "L2 +++$+++ u2 +++$+++ m0 +++$+++ B +++$+++ Hello\n"
        "L3 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ \n");
    const std::string conv = testutil::writeFile(dir, "cornell/movie_conversations.txt",
        "u0 +++$+++ u2 +++$+++ m0 +++$+++ ['L1', 'L2']\n"
        "u0 +++$+++ u1 +++$+++ m0 +++$+++ []\n"
        "u0 +++$+++ u2 +++$+++ m0 +++$+++ ['L2', 'L3', 'L1']\n");
    const Corpus c = loadCorpus(dir.filePath("cornell").toStdString());
    // Hi → Hello; L2, L3, L1 gives no pair: L3 without text splits it, and Hi never answered Hello.
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.pairs[0].response, std::string("Hello"));
    QCOMPARE(c.skippedRecords(), int64_t(1));
    const auto empty = std::find_if(c.warnings.begin(), c.warnings.end(),
        [](const CorpusWarning& w) { return w.kind == CorpusWarning::Kind::Record; });
    QCOMPARE(empty->file, conv);
    QCOMPARE(empty->line, 2L);
    QVERIFY2(empty->message.find("lists no line ids") != std::string::npos, empty->message.c_str());
    const auto note = std::find_if(c.warnings.begin(), c.warnings.end(),
        [](const CorpusWarning& w) { return w.kind == CorpusWarning::Kind::Note; });
    QVERIFY(note != c.warnings.end());
    QCOMPARE(note->line, 3L);
    QVERIFY2(note->message.find("'L3' has no text (movie_lines.txt:3)") != std::string::npos, note->message.c_str());
    QVERIFY2(note->message.find("split there") != std::string::npos, note->message.c_str());
}

void TestCorpus::emptyTurnsSplitConversations()
{
    // An empty, blank or null turn inside a conversation disappeared and its neighbours became a
    // pair (a question trained to answer a question), with no word even under --strict; a
    // conversation left with one turn vanished silently. Found by an outside pass.
    QTemporaryDir dir;
    const std::string yml = testutil::writeFile(dir, "gap.yml",
        "conversations:\n"
        "- - what is your name\n" // line 2
        "  - \"\"\n"
        "  - where do you live\n"
        "  - in a box\n" // line 5
        "- - hi\n" // line 6
        "  - \"  \"\n"
        "- - q1\n" // line 8
        "  - ~\n"
        "  - a2\n");
    const std::string jsonl = testutil::writeFile(dir, "gap.jsonl",
        "{\"messages\": [\"what is your name\", \"\", \"where do you live\", \"in a box\"]}\n"
        "{\"messages\": []}\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}]}\n");
    for (const std::string& path : { yml, jsonl }) {
        LoadOptions strict;
        strict.strict = true; // notes, not malformed records: a strict load keeps going
        const Corpus c = loadCorpus(path, strict);
        QCOMPARE(c.pairs.size(), size_t(1));
        QCOMPARE(c.pairs[0].prompt, std::string("where do you live"));
        QCOMPARE(c.pairs[0].response, std::string("in a box"));
        std::vector<std::string> said;
        for (const auto& w : c.warnings) {
            QCOMPARE(w.kind, CorpusWarning::Kind::Note);
            said.push_back(toString(w));
        }
        const std::string all = [&] {
            std::string out;
            for (const auto& w : said)
                out += w + "\n";
            return out;
        }();
        if (path == yml) {
            QVERIFY2(
                all.find("gap.yml:3: empty turn: the conversation is split there") != std::string::npos, all.c_str());
            QVERIFY2(all.find("gap.yml:7: empty turn") != std::string::npos, all.c_str());
            QVERIFY2(all.find("gap.yml:9: empty turn") != std::string::npos, all.c_str());
        } else {
            QVERIFY2(all.find("gap.jsonl:1: empty turn") != std::string::npos, all.c_str());
            QVERIFY2(all.find("gap.jsonl:2: conversation without turns skipped") != std::string::npos, all.c_str());
            QVERIFY2(all.find("gap.jsonl:3: conversation without turns skipped") != std::string::npos, all.c_str());
        }
    }
    // The same conversations with first-rest pairing: no response joins turns across the gap.
    LoadOptions firstRest;
    firstRest.pairing = Pairing::FirstRest;
    const Corpus c = loadCorpus(yml, firstRest);
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.pairs[0].response, std::string("in a box"));
}

void TestCorpus::latin1Option()
{
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, "l.tsv", "caf\xE9\tna\xEFve\n");
    QVERIFY_THROWS_EXCEPTION(Error, loadCorpus(path));
    LoadOptions opt;
    opt.latin1 = true;
    const Corpus c = loadCorpus(path, opt);
    QCOMPARE(c.pairs[0].prompt, std::string("caf\xC3\xA9"));
    QCOMPARE(c.pairs[0].response, std::string("na\xC3\xAFve"));
    // Windows text read as Latin-1: its curly quotes, apostrophe and ellipsis (0x93 0x94 0x92 0x85)
    // are those characters, not C1 controls inside words; a byte Windows-1252 leaves unassigned
    // (0x81) is one, and its record is refused.
    const std::string cp1252
        = testutil::writeFile(dir, "w.tsv", "\x93Hello\x94 she said\tIt\x92s fine \x85\nbad\x81\tx\n");
    const Corpus w = loadCorpus(cp1252, opt);
    QCOMPARE(w.pairs.size(), size_t(1));
    QCOMPARE(w.pairs[0].prompt, std::string("\u201CHello\u201D she said"));
    QCOMPARE(w.pairs[0].response, std::string("It\u2019s fine \u2026"));
    QCOMPARE(w.skippedRecords(), int64_t(1));
    QCOMPARE(w.warnings[0].line, 2L);
    QVERIFY2(w.warnings[0].message.find("U+0081") != std::string::npos, w.warnings[0].message.c_str());
}

// Cornell files were always decoded as Latin-1: a copy in UTF-8 became mojibake (cafÃ©).
void TestCorpus::cornellInUtf8IsReadAsUtf8()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "c/movie_lines.txt",
        "L1 +++$+++ u0 +++$+++ m0 +++$+++ A +++$+++ O\xC3\xB9 est le caf\xC3\xA9 ?\n"
        "L2 +++$+++ u1 +++$+++ m0 +++$+++ B +++$+++ Tr\xC3\xA8s bien\n");
    testutil::writeFile(dir, "c/movie_conversations.txt", "u0 +++$+++ u1 +++$+++ m0 +++$+++ ['L1', 'L2']\n");
    const std::string path = dir.filePath("c").toStdString();
    Corpus c = loadCorpus(path);
    QCOMPARE(c.pairs.size(), size_t(1));
    QCOMPARE(c.pairs[0].prompt, std::string("O\xC3\xB9 est le caf\xC3\xA9 ?"));
    QCOMPARE(c.pairs[0].response, std::string("Tr\xC3\xA8s bien"));
    LoadOptions latin1; // asked for: the bytes are Latin-1 whatever they look like
    latin1.latin1 = true;
    c = loadCorpus(path, latin1);
    QCOMPARE(c.pairs[0].response, std::string("Tr\xC3\x83\xC2\xA8s bien"));
}

void TestCorpus::longLineLimitIsAnOption()
{
    QTemporaryDir dir;
    const QByteArray longWord(100000, 'x');
    const std::string tsv = testutil::writeFile(dir, "l.tsv", "a\tb\nc\t" + longWord + "\n");
    const std::string yaml = testutil::writeFile(dir, "l.yml", "conversations:\n- - a\n  - " + longWord + "\n");
    LoadOptions raised;
    raised.maxLineBytes = 200 << 10;
    QCOMPARE(loadCorpus(tsv, raised).pairs.size(), size_t(2));
    QCOMPARE(loadCorpus(yaml, raised).pairs.size(), size_t(1));
    // YAML is parsed whole: there the line fails its file, saying how to raise the limit.
    try {
        loadCorpus(yaml);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.line(), 3L);
        QVERIFY2(QString(e.what()).contains("--max-line-kb"), e.what());
    }
}

// A subfolder that could not be listed ended the folder's reading without a word: the files after
// it in the listing were never read, and a corpus of 23 files loaded as one.
void TestCorpus::folderNamesWhatItCannotRead()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "c/a.yml", "conversations:\n- - one\n  - 1\n");
    testutil::writeFile(dir, "c/locked/b.yml", "conversations:\n- - two\n  - 2\n");
    for (const char* sub : { "m", "n", "z" })
        testutil::writeFile(dir, QString("c/%1/x.yml").arg(sub), "conversations:\n- - three\n  - 3\n");
    const std::string locked = dir.filePath("c/locked").toStdString();
    QVERIFY(::chmod(locked.c_str(), 0) == 0);
    testutil::DacBypassOff asUser; // as root, a mode of 0 does not stop reading
    const std::string path = dir.filePath("c").toStdString();
    const Corpus c = loadCorpus(path);
    QCOMPARE(c.pairs.size(), size_t(4)); // every readable file, before and after it
    QCOMPARE(c.skippedFiles(), int64_t(1));
    const auto w = std::find_if(c.warnings.begin(), c.warnings.end(),
        [](const CorpusWarning& x) { return x.kind == CorpusWarning::Kind::File; });
    QCOMPARE(w->file, locked);
    QVERIFY2(w->message.find("folder cannot be read") != std::string::npos, w->message.c_str());
    const auto strictError = loadError(path, strictly());
    QVERIFY(strictError);
    QCOMPARE(strictError->file(), locked);
    // The folder alone: the error says why nothing was found.
    const auto alone = loadError(locked);
    QVERIFY(alone);
    QVERIFY2(QString(alone->what()).contains("could be read"), alone->what());
    // A file inside it: not "no such file or folder", which sent users looking for a typo.
    const auto inside = loadError(locked + "/b.yml");
    QVERIFY(inside);
    QVERIFY2(QString(inside->what()).contains("b.yml: cannot reach it (Permission denied)"), inside->what());
    ::chmod(locked.c_str(), 0755);
}

// Files reached through links were read, folders reached through links silently were not; a loop
// of links ends.
void TestCorpus::folderFollowsLinkedFolders()
{
    QTemporaryDir dir;
    testutil::writeFile(dir, "c/a.yml", "conversations:\n- - one\n  - 1\n");
    for (const char* f : { "f1", "f2", "f3" })
        testutil::writeFile(
            dir, QString("more/%1.yml").arg(f), QString("conversations:\n- - q%1\n  - r\n").arg(f).toUtf8());
    QVERIFY(QFile::link(dir.filePath("more"), dir.filePath("c/more")));
    QVERIFY(QFile::link(dir.filePath("c"), dir.filePath("c/loop"))); // c/loop/loop/... is c
    const Corpus c = loadCorpus(dir.filePath("c").toStdString());
    QCOMPARE(c.pairs.size(), size_t(4));
    QCOMPARE(c.skippedFiles(), int64_t(0));
}

void TestCorpus::splitIsDeterministic()
{
    std::vector<Pair> pairs;
    for (int i = 0; i < 100; ++i)
        pairs.push_back({ "q" + std::to_string(i), "a" + std::to_string(i), "", 0 });
    const Split a = splitPairs(pairs, 0.1, 7), b = splitPairs(pairs, 0.1, 7), c = splitPairs(pairs, 0.1, 8);
    QCOMPARE(a.validation.size(), size_t(10));
    QCOMPARE(a.train.size(), size_t(90));
    auto prompts = [](const std::vector<Pair>& v) {
        std::vector<std::string> out;
        for (const auto& p : v)
            out.push_back(p.prompt);
        return out;
    };
    QVERIFY(prompts(a.validation) == prompts(b.validation));
    QVERIFY(prompts(a.validation) != prompts(c.validation));
    QCOMPARE(splitPairs({ pairs[0], pairs[1] }, 0.1, 1).validation.size(), size_t(1));
}

void TestCorpus::bundledCorpusLoads()
{
    const Corpus c = loadCorpus(CHATBENCH_DATASETS_DIR "/chatbench");
    QCOMPARE(c.format, CorpusFormat::ChatterbotYaml);
    QVERIFY2(c.pairs.size() >= 200, qPrintable(QString::number(c.pairs.size())));
    QVERIFY(c.warnings.empty());
}

QTEST_GUILESS_MAIN(TestCorpus)
#include "tst_corpus.moc"
