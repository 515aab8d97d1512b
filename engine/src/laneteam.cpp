#include "laneteam.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace chatbench {

namespace {

void pause()
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// Waits until `value` no longer holds `old`: watching it for LaneTeam::kSpin, then asleep
// (std::atomic::wait, a futex on Linux).
void awaitChange(const std::atomic<uint32_t>& value, uint32_t old)
{
    const auto until = std::chrono::steady_clock::now() + LaneTeam::kSpin;
    for (;;) {
        for (int k = 0; k < 64; ++k) {
            if (value.load(std::memory_order_acquire) != old)
                return;
            pause();
        }
        if (std::chrono::steady_clock::now() >= until)
            break;
    }
    while (value.load(std::memory_order_acquire) == old)
        value.wait(old, std::memory_order_acquire);
}

} // namespace

LaneTeam::LaneTeam(int workers)
{
    m_threads.reserve(static_cast<size_t>(workers));
    for (int j = 0; j < workers; ++j)
        m_threads.emplace_back([this, j] { work(j + 1); });
}

LaneTeam::~LaneTeam()
{
    m_stop = true;
    m_generation.fetch_add(1, std::memory_order_release);
    m_generation.notify_all();
    for (auto& t : m_threads)
        t.join();
}

void LaneTeam::work(int64_t index)
{
    uint32_t seen = 0;
    for (;;) {
        awaitChange(m_generation, seen);
        seen = m_generation.load(std::memory_order_acquire);
        if (m_stop)
            return;
        if (index < m_lanes)
            (*m_lane)(index);
        // Every thread answers every round, with a lane or without: the caller then writes the
        // next round's lane only once no thread can still be reading this one's.
        if (m_pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
            m_pending.notify_one();
    }
}

void LaneTeam::run(int64_t lanes, const std::function<void(int64_t)>& lane)
{
    const int64_t others = lanes - 1;
    if (others > 0) {
        m_lane = &lane;
        m_lanes = lanes;
        m_pending.store(static_cast<uint32_t>(m_threads.size()), std::memory_order_relaxed);
        m_generation.fetch_add(1, std::memory_order_release);
        m_generation.notify_all(); // a system call only where a thread sleeps
    }
    lane(0);
    for (uint32_t left = m_pending.load(std::memory_order_acquire); left != 0;
         left = m_pending.load(std::memory_order_acquire))
        awaitChange(m_pending, left);
}

} // namespace chatbench
