#pragma once
// QCustomPlot spells Qt's signals/slots/emit/foreach as keywords, which QT_NO_KEYWORDS turns off for the rest
// of the project. Include it through this header: the keywords exist only for its declarations.
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef emit
#undef foreach
