#pragma once
// Files the window writes where the user chose (charts, curves, reports).

#include <QByteArray>
#include <QString>

// Writes `bytes` to `path` whole or not at all (chatbench::writeOutputFile): a full disk leaves the
// old file as it was, a pipe or device there is refused before anything is opened (the window would
// wait on a pipe's reader for good). False with the reason in `why`.
bool writeExport(const QString& path, const QByteArray& bytes, QString* why);
