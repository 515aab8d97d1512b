#include "childprocess.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

namespace chatbench {

namespace {

constexpr int kReplyFd = 3;
constexpr int kExitCannotReply = 3;
constexpr int kExitWorkThrew = 4;

// The private writable memory this process has mapped (VmData, what RLIMIT_DATA bounds), in bytes;
// 0 when unreadable.
uint64_t dataMapped()
{
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "VmData:") {
            uint64_t kib = 0;
            in >> kib;
            return kib << 10;
        }
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return 0;
}

[[noreturn]] void childMain(const std::function<std::vector<uint8_t>()>& work, pid_t parent, uint64_t memory)
{
    for (int sig : { SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTRAP })
        std::signal(sig, SIG_DFL);
    // Killed with the parent, however it ends, so that nothing holds the parent's output open.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) // the parent ended before the line above
        ::_exit(kExitCannotReply);
    ::close_range(kReplyFd + 1, ~0U, 0);
    rlimit data {};
    if (const uint64_t mapped = memory > 0 ? dataMapped() : 0; mapped > 0 && ::getrlimit(RLIMIT_DATA, &data) == 0) {
        data.rlim_cur = std::min<rlim_t>(mapped + memory, data.rlim_cur); // a lower limit of the user's stays
        ::setrlimit(RLIMIT_DATA, &data); // where it cannot be set, the other limits still hold
    }
    std::vector<uint8_t> bytes;
    try {
        bytes = work();
    } catch (...) {
        ::_exit(kExitWorkThrew);
    }
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(kReplyFd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            ::_exit(kExitCannotReply);
        done += static_cast<size_t>(n);
    }
    ::_exit(0);
}

// The child's state letter and CPU clock ticks (user + system), from /proc; nullopt when unreadable.
std::optional<std::pair<char, long long>> cpuProgress(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')'); // the command name may hold spaces and parentheses
    if (close == std::string::npos)
        return std::nullopt;
    std::vector<std::string> fields; // from field 3 (state) on
    size_t pos = close + 1;
    while (fields.size() < 13) {
        pos = stat.find_first_not_of(' ', pos);
        if (pos == std::string::npos)
            return std::nullopt;
        const size_t end = stat.find(' ', pos);
        fields.push_back(stat.substr(pos, end - pos));
        pos = end;
    }
    try {
        return std::make_pair(fields[0].empty() ? '?' : fields[0][0], std::stoll(fields[11]) + std::stoll(fields[12]));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// The bytes the child has read and written (rchar + wchar: files, pipes and all); nullopt where
// the system does not show them.
std::optional<long long> bytesMoved(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/io");
    long long total = 0;
    int found = 0;
    std::string key;
    long long value = 0;
    while (in >> key >> value)
        if (key == "rchar:" || key == "wchar:") {
            total += value;
            ++found;
        }
    return found == 2 ? std::optional<long long>(total) : std::nullopt;
}

} // namespace

ChildOutcome runInChild(const std::function<std::vector<uint8_t>()>& work, const ChildLimits& limits)
{
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe");
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(fds[0]);
        ::close(fds[1]);
        throw std::system_error(err, std::generic_category(), "fork");
    }
    if (pid == 0) {
        ::dup2(fds[1], kReplyFd); // dup2 clears close-on-exec on the copy
        childMain(work, parent, limits.memory);
    }
    ::close(fds[1]);
    ChildOutcome out;
    out.pid = pid;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto lastProgress = start;
    long long lastTicks = -1;
    constexpr auto kTick = std::chrono::milliseconds(250);
    const long ticksPerSecond = std::max(1L, ::sysconf(_SC_CLK_TCK));
    bool killed = false;
    try {
        uint8_t buf[1 << 16];
        for (;;) {
            const auto now = Clock::now();
            if (now - start >= limits.total) {
                out.end = ChildOutcome::End::TimedOut;
                killed = true;
                break;
            }
            if (const auto p = cpuProgress(pid)) {
                if (p->second != lastTicks || p->first == 'D' || p->first == 'R') {
                    lastTicks = p->second;
                    lastProgress = now;
                } else if (now - lastProgress >= limits.idle) {
                    out.end = ChildOutcome::End::Idle;
                    killed = true;
                    break;
                }
                out.cpu = std::chrono::milliseconds(p->second * 1000 / ticksPerSecond);
                const auto moved = bytesMoved(pid);
                out.bytesMoved = moved.value_or(-1);
                if (moved) {
                    const long long credited = limits.creditedBytes > 0
                        ? std::min<long long>(*moved, static_cast<long long>(limits.creditedBytes))
                        : *moved;
                    if (out.cpu.count()
                        > limits.cpu.count() + static_cast<double>(limits.cpuPerMiB.count()) * credited / (1 << 20)) {
                        out.end = ChildOutcome::End::Looping;
                        killed = true;
                        break;
                    }
                }
            }
            const auto wait = std::min<std::chrono::milliseconds>(
                kTick, std::chrono::duration_cast<std::chrono::milliseconds>(limits.total - (now - start)));
            pollfd pfd { fds[0], POLLIN, 0 };
            const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, wait.count())));
            if (ready < 0 && errno == EINTR)
                continue;
            if (ready == 0)
                continue;
            const ssize_t n = ready < 0 ? -1 : ::read(fds[0], buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            out.reply.insert(out.reply.end(), buf, buf + n);
        }
    } catch (...) { // no memory for the reply: the child must not be left behind
        killed = true;
        out.end = ChildOutcome::End::Failed;
        out.reply.clear();
    }
    ::close(fds[0]);
    if (killed)
        ::kill(pid, SIGKILL);
    pid_t waited;
    while ((waited = ::waitpid(pid, &out.status, 0)) < 0 && errno == EINTR) { }
    if (!killed) {
        const bool clean = waited == pid && WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0;
        out.end = clean ? ChildOutcome::End::Replied : ChildOutcome::End::Failed;
        if (waited != pid)
            out.status = -1;
    }
    if (out.end != ChildOutcome::End::Replied)
        out.reply.clear();
    return out;
}

} // namespace chatbench
