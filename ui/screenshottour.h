#pragma once
// `chatbench --screenshot DIR`: drives the real window through the main path (bundled corpus,
// Train with live curves, chat with the handoff view, breaking the handoff, a bad corpus, Compare,
// the doctor) and saves a PNG of the window at each stop.

#include <QObject>
#include <QString>
#include <QStringList>

class MainWindow;
class QWidget;

class ScreenshotTour : public QObject {
    Q_OBJECT

public:
    // `reports`: benchmark reports to import into the Compare view next to this machine's run.
    ScreenshotTour(
        MainWindow* window, const QString& outDir, const QStringList& reports = {}, QObject* parent = nullptr);
    // Runs the tour to the end; returns 0 when every step happened, 1 otherwise.
    int run();

private:
    // Saves `widget` (default: the whole window) as NAME.png.
    void shot(const QString& name, QWidget* widget = nullptr);
    bool fail(const QString& what);
    // The open message box called `objectName`, details shown, saved as NAME.png, then closed.
    bool shotReport(const QString& objectName, const QString& name);

    MainWindow* m_window;
    QString m_dir;
    QStringList m_reports;
};
