// Repeated timing and its summary (bench.h); the clock is the caller's, so CUDA can sync.
#include "chatbench/bench.h"

#include <algorithm>
#include <cmath>

namespace chatbench {

Timing summarise(std::vector<double> samples)
{
    Timing t;
    t.samples = samples;
    if (samples.empty())
        return t;
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) {
        const double pos = q * static_cast<double>(samples.size() - 1);
        const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
        return samples[lo] + (samples[hi] - samples[lo]) * (pos - static_cast<double>(lo));
    };
    t.median = at(0.5);
    t.p10 = at(0.1);
    t.p90 = at(0.9);
    t.min = samples.front();
    t.max = samples.back();
    return t;
}

Timing timeRepeated(const std::function<void()>& work, int warmup, int repeats, const BenchClock& clock)
{
    for (int i = 0; i < warmup; ++i)
        work();
    std::vector<double> samples;
    for (int i = 0; i < repeats; ++i) {
        clock.sync(); // nothing queued from before may land in this sample
        const double t0 = clock.now();
        work();
        clock.sync(); // and all of this sample's work must have finished
        samples.push_back(clock.now() - t0);
    }
    return summarise(std::move(samples));
}

int warmUp(const std::function<void()>& work, int minRuns, int maxRuns, double settle, const BenchClock& clock)
{
    if (minRuns <= 0)
        return 0; // no warm-up asked for
    maxRuns = std::max(minRuns, maxRuns);
    double previous = -1;
    int runs = 0;
    while (runs < maxRuns) {
        clock.sync();
        const double t0 = clock.now();
        work();
        clock.sync();
        const double t = clock.now() - t0;
        ++runs;
        const bool settled = previous > 0 && std::abs(t - previous) <= settle * std::max(t, previous);
        previous = t;
        if (runs >= minRuns && settled)
            break;
    }
    return runs;
}

double energyPerRun(const std::function<void()>& work, const std::function<double()>& joules, double minSeconds,
    double maxSeconds, const BenchClock& clock, const std::function<bool()>& stop)
{
    clock.sync();
    const double t0 = clock.now();
    auto run = [&] {
        work();
        clock.sync();
        return stop && stop() ? -1.0 : joules();
    };
    // The first update: energy is counted from it.
    const double idle = joules();
    if (idle < 0)
        return -1;
    double e0 = idle;
    while (e0 == idle) {
        if (clock.now() - t0 > maxSeconds)
            return -1;
        if ((e0 = run()) < 0)
            return -1;
    }
    // Runs for at least minSeconds, then until the next update; every run in between is counted.
    const double t1 = clock.now();
    long runs = 0;
    double mark = -1;
    for (;;) {
        const double e = run();
        ++runs;
        if (e < 0 || clock.now() - t0 > maxSeconds)
            return -1;
        if (mark < 0) {
            if (clock.now() - t1 >= minSeconds)
                mark = e;
        } else if (e != mark) {
            return (e - e0) / static_cast<double>(runs);
        }
    }
}

} // namespace chatbench
