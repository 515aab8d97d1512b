// chatbench: the workbench window. `--screenshot DIR` runs the screenshot tour instead.

#include "chatbench/corpus.h"
#include "chatbench/devices.h"
#include "corpusview.h"
#include "mainwindow.h"
#include "screenshottour.h"
#include "startcheck.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>

#include <cstdio>
#include <memory>
#include <string>

namespace {

struct Options {
    QCommandLineOption corpus { "corpus", "Corpus to open (default: the last one, or the bundled corpus).", "path" };
    QCommandLineOption runs { "runs", "Folder for training runs.", "dir" };
    QCommandLineOption screenshot { "screenshot", "Run the screenshot tour and save PNGs into DIR.", "dir" };
};

void describe(QCommandLineParser& parser, const Options& o)
{
    parser.setApplicationDescription("Train LSTM seq2seq chatbots and see the encoder→decoder state handoff.");
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOptions({ o.corpus, o.runs, o.screenshot });
}

} // namespace

int main(int argc, char** argv)
{
    chatbench::prepareProcess(); // before anything starts CUDA
    const Options options;
    // --help and --version need no display: answer them before a window system is required.
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h" || a == "--help-all" || a == "--version" || a == "-v") {
            QCoreApplication core(argc, argv);
            QCoreApplication::setApplicationName("chatbench");
            QCoreApplication::setApplicationVersion("0.1.0");
            QCommandLineParser p;
            describe(p, options);
            p.process(core); // prints and exits
            return 0;
        }
    }
    // The window's thread is the main thread (the command line moves its work to a thread with a
    // larger stack instead).
    if (chatbench::startcheck::mainStackLimit() < chatbench::startcheck::kStackNeeded) {
        std::fprintf(stderr,
            "error: the stack limit (ulimit -s) is %llu KiB and its hard limit (ulimit -Hs) allows no more; the "
            "window needs 1024 KiB: start it where the hard limit is higher\n",
            static_cast<unsigned long long>(chatbench::startcheck::mainStackLimit() >> 10));
        return 1;
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName("chatbench");
    QApplication::setApplicationName("chatbench");
    QApplication::setApplicationVersion("0.1.0");
    QApplication::setWindowIcon(QIcon(":/chatbench.svg"));

    QCommandLineParser parser;
    describe(parser, options);
    parser.process(app);

    QString corpus = parser.value(options.corpus);
    if (corpus.isEmpty())
        corpus = QString::fromStdString(chatbench::defaultCorpusPath());

    // The tour starts from clean settings and a scratch runs folder, whatever the user has.
    std::unique_ptr<QTemporaryDir> scratch;
    const bool tour = parser.isSet(options.screenshot);
    QString runs = parser.value(options.runs);
    if (tour) {
        scratch = std::make_unique<QTemporaryDir>();
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, scratch->filePath("settings"));
        if (runs.isEmpty())
            runs = scratch->filePath("runs");
    }

    MainWindow window(runs);
    window.show();
    if (parser.isSet(options.corpus) || tour)
        window.corpusView()->load(corpus);
    else
        window.restore(corpus);
    if (!tour)
        return app.exec();

    QStringList reports;
    // The side-by-side run of chatbench, PyTorch-Python and Keras on the chatterbot corpus.
    const QDir peers(CHATBENCH_SOURCE_DIR "/bench/reports/peers");
    for (const QString& f : peers.entryList({ "peer-*.json" }, QDir::Files, QDir::Name))
        reports << peers.filePath(f);
    ScreenshotTour shots(&window, parser.value(options.screenshot), reports);
    int code = 0;
    QTimer::singleShot(0, &app, [&] {
        code = shots.run();
        app.quit();
    });
    app.exec();
    return code;
}
