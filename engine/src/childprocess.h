#pragma once
// Work done in a child process, so that a library crashing or hanging on a malformed file (HDF5
// does both) costs the child and not the caller (private; no Torch).

#include <chrono>
#include <cstdint>
#include <functional>
#include <sys/types.h>
#include <vector>

namespace chatbench {

struct ChildLimits {
    // The longest the child may take in all: long enough for gigabytes of weights.
    std::chrono::milliseconds total { std::chrono::seconds(600) };
    // The longest it may go without using the CPU while not waiting on the disk. The child has
    // one thread, so a lock it waits for is never released: a heap that a library overran can
    // send free() to wait on a lock word that is not one.
    std::chrono::milliseconds idle { std::chrono::seconds(15) };
    // The CPU time it may use beyond what the bytes it reads and writes earn (cpuPerMiB each MiB).
    // A library looping on a malformed file keeps the CPU busy without reading on (HDF5 does, on a
    // global heap whose object sizes were changed); gigabytes of weights earn their time as they
    // are read. Not applied where the system does not show the child's input and output.
    std::chrono::milliseconds cpu { std::chrono::seconds(10) };
    std::chrono::milliseconds cpuPerMiB { 100 };
    // The most bytes that earn time (0: all): a loop that reads one block over and over must not
    // earn its way past `cpu`.
    uint64_t creditedBytes = 0;
    // The memory it may take beyond what it starts with (RLIMIT_DATA), so that a library asked by
    // a malformed file for gigabytes fails an allocation instead of pushing the machine into swap
    // or the out-of-memory killer; 0: no limit.
    uint64_t memory = 0;
};

struct ChildOutcome {
    enum class End {
        Replied, // exited 0 after its reply
        TimedOut, // ran past limits.total and was killed
        Idle, // made no progress for limits.idle and was killed
        Looping, // used more CPU than limits.cpu and its reading allow, and was killed
        Failed, // ended otherwise: see status
    };
    End end = End::Failed;
    pid_t pid = 0;
    int status = 0; // from waitpid, when end is Failed
    std::chrono::milliseconds cpu { 0 }; // the CPU time it had used when last looked at
    long long bytesMoved = 0; // the bytes it had read and written then (-1: not shown by the system)
    std::vector<uint8_t> reply;
};

// Forks; the child runs `work`, writes the bytes it returns to the parent and exits without the
// parent's exit handlers. In the child: crashes end it at once (no inherited crash handlers),
// only the reply pipe and the standard streams stay open, and it dies with its parent. Throws
// std::system_error when no child can be started.
ChildOutcome runInChild(const std::function<std::vector<uint8_t>()>& work, const ChildLimits& limits = {});

} // namespace chatbench
