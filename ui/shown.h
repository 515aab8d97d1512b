#pragma once
// Text from a user or a file as the window shows it.

#include "chatbench/error.h"

#include <QString>

#include <string>

// Control characters and the bidirectional overrides and isolates escaped as the CLI shows them
// (U+202E as \xE2\x80\xAE): a right-to-left override typed into a question reversed the reply,
// the checks and the title after it. At most `limit` characters (0: all), cut with an ellipsis.
inline QString shownText(const std::string& text, int limit = 0)
{
    QString s = QString::fromStdString(chatbench::printable(text));
    if (limit > 0 && s.size() > limit)
        s = s.left(limit - 1) + QChar(0x2026);
    return s;
}

inline QString shownText(const QString& text, int limit = 0) { return shownText(text.toStdString(), limit); }
