// Tokenizer and vocabulary: Keras-compatible splitting, punctuation mode, specials, limits,
// round trips through encode/decode and save/load, unknown words.

#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "testutil.h"

using namespace chatbench;

namespace {
std::vector<Pair> pairs(std::initializer_list<std::pair<const char*, const char*>> list)
{
    std::vector<Pair> out;
    for (const auto& [p, r] : list)
        out.push_back({ p, r, "", 0 });
    return out;
}
QStringList q(const std::vector<std::string>& v)
{
    QStringList out;
    for (const auto& s : v)
        out << QString::fromStdString(s);
    return out;
}
} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void split_data();
    void split();
    void specialsAndOrder();
    void minFrequencyAndMaxSize();
    void roundTrip();
    void unknownWords();
    void saveLoad();
    void oldVocabulariesKeepAsciiLowercasing();
    void loadRejectsBadFiles_data();
    void loadRejectsBadFiles();
    void oov();
};

void TestTokenizer::split_data()
{
    QTest::addColumn<bool>("keras");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QStringList>("words");
    // Keras' text_to_word_sequence: lowercase, filters ! " # $ % & ( ) * + , - . / : ; < = > ? @ [ \ ] ^ _ ` { | } ~ \t
    // \n become spaces; the apostrophe is kept.
    QTest::newRow("keras-basic") << true << "Hello, World!" << QStringList { "hello", "world" };
    QTest::newRow("keras-apostrophe") << true << "I don't know." << QStringList { "i", "don't", "know" };
    QTest::newRow("keras-filters") << true << "a-b_c/d(e)f[g]h{i}j@k#l$m%n^o&p*q+r=s<t>u|v~w`x\ty\nz"
                                   << QStringList { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
                                          "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z" };
    QTest::newRow("keras-spaces") << true << "  many   spaces  " << QStringList { "many", "spaces" };
    // Keras lowercases with Python's str.lower: every script, İ → i̇, a word-final Σ → ς (the
    // words below are Python's own output for this text).
    QTest::newRow("keras-unicode-lower") << true
                                         << QString::fromUtf8("CAF\xC3\x89 au lait? Stra\xC3\x9F"
                                                              "e \xC4\xB0stanbul \xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 "
                                                              "\xCE\xA3\xCE\x91\xCE\xA3 \xC7\x84"
                                                              "emal \xC3\x80\xC3\x89\xC3\x8E\xC3\x95\xC3\x9C")
                                         << QStringList { QString::fromUtf8("caf\xc3\xa9"), "au", "lait",
                                                QString::fromUtf8("stra\xc3\x9f"
                                                                  "e"),
                                                QString::fromUtf8("i\xcc\x87stanbul"),
                                                QString::fromUtf8("\xce\xbf\xce\xb4\xce\xbf\xcf\x82"),
                                                QString::fromUtf8("\xcf\x83\xce\xb1\xcf\x82"),
                                                QString::fromUtf8("\xc7\x86"
                                                                  "emal"),
                                                QString::fromUtf8("\xc3\xa0\xc3\xa9\xc3\xae\xc3\xb5\xc3\xbc") };
    QTest::newRow("punct") << false << "Hello, World! Isn't it?"
                           << QStringList { "hello", ",", "world", "!", "isn't", "it", "?" };
    QTest::newRow("punct-utf8") << false << QString::fromUtf8("Caf\xC3\xA9 ok.")
                                << QStringList { QString::fromUtf8("caf\xC3\xA9"), "ok", "." };
}

void TestTokenizer::split()
{
    QFETCH(bool, keras);
    QFETCH(QString, text);
    QFETCH(QStringList, words);
    TokenizerOptions opt;
    opt.mode = keras ? TokenizerMode::Keras : TokenizerMode::Punctuation;
    const Tokenizer tok = Tokenizer::build({}, opt);
    QCOMPARE(q(tok.split(text.toStdString())), words);
}

void TestTokenizer::specialsAndOrder()
{
    const Tokenizer tok = Tokenizer::build(pairs({ { "b a a", "c a b" } }), {});
    QCOMPARE(tok.word(Tokenizer::kPad), std::string("<pad>"));
    QCOMPARE(tok.word(Tokenizer::kUnk), std::string("<unk>"));
    QCOMPARE(tok.word(Tokenizer::kStart), std::string("<start>"));
    QCOMPARE(tok.word(Tokenizer::kEnd), std::string("<end>"));
    // Most frequent first: a (3), b (2), c (1).
    QCOMPARE(tok.id("a"), int64_t(4));
    QCOMPARE(tok.id("b"), int64_t(5));
    QCOMPARE(tok.id("c"), int64_t(6));
    QCOMPARE(tok.size(), int64_t(7));
}

void TestTokenizer::minFrequencyAndMaxSize()
{
    const auto data = pairs({ { "x x x y y z", "w" } });
    TokenizerOptions opt;
    opt.minFrequency = 2;
    QCOMPARE(Tokenizer::build(data, opt).size(), int64_t(4 + 2)); // x, y
    opt.minFrequency = 1;
    opt.maxSize = 5;
    const Tokenizer small = Tokenizer::build(data, opt);
    QCOMPARE(small.size(), int64_t(5)); // specials + x
    QCOMPARE(small.id("y"), Tokenizer::kUnk);
}

void TestTokenizer::roundTrip()
{
    TokenizerOptions punct;
    punct.mode = TokenizerMode::Punctuation;
    const Tokenizer tok = Tokenizer::build(pairs({ { "hello, how are you?", "i am fine." } }), punct);
    const Encoded e = tok.encode("Hello, how are you?");
    QVERIFY(e.unknown.empty());
    QCOMPARE(tok.decode(e.ids), std::string("hello, how are you?"));
    // decode stops at <end> and skips <start>/<pad>.
    std::vector<int64_t> ids = { Tokenizer::kStart, tok.id("i"), tok.id("am"), Tokenizer::kEnd, tok.id("fine") };
    QCOMPARE(tok.decode(ids), std::string("i am"));
    const Tokenizer keras = Tokenizer::build(pairs({ { "Hello there", "General Kenobi" } }), {});
    QCOMPARE(keras.decode(keras.encode("HELLO there!").ids), std::string("hello there"));
}

void TestTokenizer::unknownWords()
{
    const Tokenizer tok = Tokenizer::build(pairs({ { "hello there", "hi" } }), {});
    const Encoded e = tok.encode("hello zorblax <unk> there");
    QCOMPARE(e.ids.size(), size_t(4));
    QCOMPARE(e.ids[1], Tokenizer::kUnk);
    QCOMPARE(q(e.unknown), (QStringList { "zorblax", "unk" })); // Keras filters drop < and >
    QCOMPARE(tok.decode(e.ids), std::string("hello <unk> <unk> there"));
    QVERIFY(tok.encode("").ids.empty());

    // At most maxIds ids: the words after the last one read are counted, not kept.
    const Encoded cut = tok.encode("hello zorblax there hello", 2);
    QCOMPARE(cut.ids.size(), size_t(2));
    QCOMPARE(q(cut.words), (QStringList { "hello", "zorblax" }));
    QCOMPARE(cut.wordsLeftOut, size_t(2));
    QCOMPARE(tok.encode("hello there", 2).wordsLeftOut, size_t(0));
    // A Keras tokenizer without an oov token drops unknown words: they take no id, so the cut
    // falls after the second known word and the unknown words before it are still listed.
    TokenizerOptions drop;
    drop.dropUnknown = true;
    const Tokenizer dropping = Tokenizer::build(pairs({ { "hello there", "hi" } }), drop);
    const Encoded d = dropping.encode("zorblax hello quux there hello", 2);
    QCOMPARE(d.ids, (std::vector<int64_t> { dropping.id("hello"), dropping.id("there") }));
    QCOMPARE(q(d.words), (QStringList { "zorblax", "hello", "quux", "there" }));
    QCOMPARE(q(d.unknown), (QStringList { "zorblax", "quux" }));
    QCOMPARE(d.wordsLeftOut, size_t(1));
}

void TestTokenizer::saveLoad()
{
    QTemporaryDir dir;
    TokenizerOptions opt;
    opt.mode = TokenizerMode::Punctuation;
    opt.minFrequency = 1;
    const Tokenizer tok = Tokenizer::build(pairs({ { "one two, three!", "four five" } }), opt);
    const std::string path = dir.filePath("vocab.json").toStdString();
    tok.save(path);
    const Tokenizer back = Tokenizer::load(path);
    QCOMPARE(back.size(), tok.size());
    QCOMPARE(back.options().mode, TokenizerMode::Punctuation);
    for (int64_t i = 0; i < tok.size(); ++i)
        QCOMPARE(back.word(i), tok.word(i));
    QCOMPARE(back.encode("two, five!").ids, tok.encode("two, five!").ids);

    // Found by an outside pass: a corpus line of 270 MB without a space trained into a vocab.json
    // that load refuses (over its 256 MiB), so the run could neither chat nor resume. Save refuses
    // it first, and writes nothing.
    std::vector<std::string> huge;
    for (char c : { 'p', 'q', 'r', 's', 't' })
        huge.emplace_back(size_t(55) << 20, c);
    const Tokenizer big = Tokenizer::fromWords(huge, opt);
    huge.clear();
    const std::string bigPath = dir.filePath("big.json").toStdString();
    try {
        big.save(bigPath);
        QFAIL("a vocabulary load refuses was saved");
    } catch (const Error& e) {
        QVERIFY2(
            QString(e.what()).contains("MiB a vocabulary file may hold (its longest word: 57671680 bytes)"), e.what());
        QCOMPARE(QString::fromStdString(e.file()), QString::fromStdString(bigPath));
    }
    QVERIFY(!QFile::exists(QString::fromStdString(bigPath)));
}

void TestTokenizer::oldVocabulariesKeepAsciiLowercasing()
{
    // A Keras-mode vocabulary saved before the lowercasing was recorded was built with ASCII
    // lowercasing: it keeps it (its "CAFÉ" stays "cafÉ"), while a new one lowercases as Python.
    QTemporaryDir dir;
    const Tokenizer fresh = Tokenizer::build(pairs({ { "CAF\xC3\x89 ok", "fine" } }), {});
    QCOMPARE(fresh.split("CAF\xC3\x89"), std::vector<std::string> { "caf\xC3\xA9" });
    const std::string path = dir.filePath("vocab.json").toStdString();
    fresh.save(path);
    QVERIFY(Tokenizer::load(path).options().unicodeLowercase);
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QByteArray json = f.readAll();
    f.close();
    QVERIFY(json.contains("\"lowercase\": \"unicode\""));
    json.replace("\"lowercase\": \"unicode\",", "");
    testutil::writeFile(dir, "vocab.json", json);
    const Tokenizer old = Tokenizer::load(path);
    QVERIFY(!old.options().unicodeLowercase);
    QCOMPARE(old.split("CAF\xC3\x89"), std::vector<std::string> { "caf\xC3\x89" });
    json.replace("\"tokens\"", "\"lowercase\": \"turkish\", \"tokens\"");
    testutil::writeFile(dir, "vocab.json", json);
    QVERIFY_THROWS_EXCEPTION(Error, Tokenizer::load(path));
    // The punctuation mode lowercases ASCII letters only, and its vocabulary says so (found by an
    // outside pass: it said "unicode").
    TokenizerOptions punct;
    punct.mode = TokenizerMode::Punctuation;
    const Tokenizer p = Tokenizer::build(pairs({ { "CAF\xC3\x89 ok", "fine" } }), punct);
    QCOMPARE(p.split("CAF\xC3\x89!"), (std::vector<std::string> { "caf\xC3\x89", "!" }));
    p.save(path);
    QVERIFY(testutil::readFile(QString::fromStdString(path)).contains("\"lowercase\": \"ascii\""));
    QVERIFY(!Tokenizer::load(path).options().unicodeLowercase);
}

void TestTokenizer::loadRejectsBadFiles_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<long>("line");
    QTest::newRow("not-json") << QByteArray("{\n \"format\": \"chatbench-vocab\",\n oops\n}") << 3L;
    QTest::newRow("wrong-format") << QByteArray("{\"format\": \"other\"}") << 1L;
    QTest::newRow("missing-field") << QByteArray("{\"format\": \"chatbench-vocab\", \"mode\": \"keras\"}") << 0L;
    QTest::newRow("no-specials") << QByteArray("{\"format\": \"chatbench-vocab\", \"mode\": \"keras\", "
                                               "\"min_frequency\": 1, \"max_size\": 0, \"tokens\": [\"a\"]}")
                                 << 0L;
    QTest::newRow("duplicate") << QByteArray(
        "{\"format\": \"chatbench-vocab\", \"mode\": \"keras\", \"min_frequency\": 1, \"max_size\": 0, "
        "\"tokens\": [\"<pad>\", \"<unk>\", \"<start>\", \"<end>\", \"a\", \"a\"]}")
                               << 0L;
}

void TestTokenizer::loadRejectsBadFiles()
{
    QFETCH(QByteArray, bytes);
    QFETCH(long, line);
    QTemporaryDir dir;
    const std::string path = testutil::writeFile(dir, "vocab.json", bytes);
    try {
        Tokenizer::load(path);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), path);
        QCOMPARE(e.line(), line);
    }
}

void TestTokenizer::oov()
{
    const Tokenizer tok = Tokenizer::build(pairs({ { "a b", "c d" } }), {});
    QCOMPARE(oovRate(tok, pairs({ { "a x", "y d" } })), 0.5);
    QCOMPARE(oovRate(tok, {}), 0.0);
}

QTEST_GUILESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
