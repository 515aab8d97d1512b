#pragma once
// Reading a run folder's epoch history (metrics.csv) for plots and overlays.

#include "chatbench/trainer.h"

#include <QString>

#include <vector>

// Every well-formed row of runDir/metrics.csv; empty when the file is missing or unreadable.
std::vector<chatbench::EpochMetrics> readRunHistory(const QString& runDir);
