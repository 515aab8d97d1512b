#pragma once
// The threads a CPU training step runs its lanes on beside the caller's (private). A step hands
// them work several times (the bf16 weight forms, the slices' forward and backward passes, the
// gradient sums, the update), a fraction of a millisecond apart. A thread asleep on a futex takes
// 30–50 µs to run again once woken (measured on a 2-core VM: 4–5 wake-ups a step, ≈ 3% of a bf16
// step), so between two pieces of work each thread first watches for the next one for a short
// while, then sleeps. Only the step's own threads spin, one per core, and never longer than
// kSpin: a thread that waits longer (a checkpoint being written, the corpus read) sleeps.
// 200 µs covered the gaps within a step but not the trainer's between two steps (one wake-up a
// step was left); 1 ms covers both (seed preset, bf16, 2 threads: 372 sleeps in 6 epochs → 61).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace chatbench {

class LaneTeam {
public:
    // How long a thread watches for work (or the caller for the lanes' end) before it sleeps.
    static constexpr std::chrono::microseconds kSpin { 1000 };

    explicit LaneTeam(int workers);
    ~LaneTeam();
    LaneTeam(const LaneTeam&) = delete;
    LaneTeam& operator=(const LaneTeam&) = delete;

    // The threads beside the caller's.
    int size() const { return static_cast<int>(m_threads.size()); }
    // Runs lane(0) on the calling thread and lane(1) … lane(lanes − 1) on the team's threads
    // (lanes − 1 ≤ size()), and returns when all have returned. `lane` must not throw.
    void run(int64_t lanes, const std::function<void(int64_t)>& lane);

private:
    void work(int64_t index);

    std::vector<std::thread> m_threads;
    // Each round of work bumps the generation; a thread runs its lane once per generation.
    std::atomic<uint32_t> m_generation { 0 };
    std::atomic<uint32_t> m_pending { 0 }; // the team's threads not yet done with this round
    const std::function<void(int64_t)>* m_lane = nullptr; // this round's (written before the bump)
    int64_t m_lanes = 0;
    bool m_stop = false;
};

} // namespace chatbench
