// Benchmark reports (chatbench-bench JSON, read by the Compare view's import and its list of saved
// reports; written by `bench --out`, the peers' scripts, or anyone). Read in memory, as
// readBenchReport does after reading the file, and written back.
#include "chatbench/bench.h"
#include "fuzzutil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expectCleanOutcome([&] {
        const chatbench::BenchReport r = chatbench::benchReportFromJson(text, "report.json");
        // What the Compare view derives from a report: labels, workloads, and the JSON again.
        for (const auto& row : r.rows)
            (void)chatbench::precisionLabel(row);
        (void)chatbench::describeWorkload(r, r.rows.empty() ? 0 : r.rows.front().batch);
        (void)chatbench::sameWorkload(r, 0, r, 0);
        (void)chatbench::toJson(r);
    });
    return 0;
}
