#include "runhistory.h"

#include <QDir>
#include <QFile>

#include <cmath>

std::vector<chatbench::EpochMetrics> readRunHistory(const QString& runDir)
{
    std::vector<chatbench::EpochMetrics> out;
    QFile f(QDir(runDir).filePath("metrics.csv"));
    if (!f.open(QIODevice::ReadOnly))
        return out;
    f.readLine(); // header
    auto number = [](const QByteArray& s) { return s == "nan" || s == "-nan" ? NAN : s.toDouble(); };
    while (!f.atEnd()) {
        const QList<QByteArray> c = f.readLine().trimmed().split(',');
        if (c.size() < 9)
            continue;
        chatbench::EpochMetrics m;
        m.epoch = c[0].toInt() - 1;
        m.step = c[1].toLongLong();
        m.trainLoss = number(c[2]);
        m.validationLoss = number(c[3]);
        m.validationAccuracy = number(c[4]);
        m.perplexity = number(c[5]);
        m.seconds = number(c[6]);
        m.tokensPerSecond = number(c[7]);
        m.elapsedSeconds = number(c[8]);
        out.push_back(m);
    }
    return out;
}
