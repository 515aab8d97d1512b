#include "exportfile.h"

#include "chatbench/error.h"
#include "chatbench/outputfile.h"

#include <QCoreApplication>

bool writeExport(const QString& path, const QByteArray& bytes, QString* why)
{
    try {
        chatbench::writeOutputFile(path.toStdString(), bytes.toStdString());
        return true;
    } catch (const chatbench::Error& e) {
        if (why)
            *why = QCoreApplication::translate("Export", "could not write %1").arg(QString::fromStdString(e.what()));
        return false;
    }
}
