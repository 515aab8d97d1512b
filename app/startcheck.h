#pragma once
// Checks made before any library's initialisers run (the executable's .preinit_array), for both
// front ends. A current folder that was deleted made the MKL inside LibTorch stop every start,
// even `--version`, with "Intel oneMKL FATAL ERROR: Cannot load …/libtorch_cpu.so"; said in
// words instead. A closed standard stream is opened on /dev/null, so that no file opened later
// (a run's lock, a checkpoint) takes its number and receives what is printed. A file-size limit
// (`ulimit -f`) makes a write past it fail with EFBIG, which every writer reports naming the file
// and the limit, instead of ending the process by SIGXFSZ mid-save (ignored before anything
// starts, the Keras reader's child process included). A small stack limit (`ulimit -s 256`) is
// no limit on the program's work: MKL's products overflowed 256 KiB in a worker thread (SIGSEGV
// inside sgemm), and yaml-cpp's recursive parse 128 KiB at 400 levels of nesting. Threads started
// after this get 8 MiB; the main thread's limit is raised towards it as far as the hard limit
// allows, and where that is not enough the command line's work runs on a thread of its own.

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

namespace chatbench::startcheck {

// Whether standard output was closed when the program started (it is /dev/null now).
inline bool& stdoutWasClosed()
{
    static bool closed = false;
    return closed;
}

// The main thread's stack limit once raised (RLIM_INFINITY: none).
inline rlim_t& mainStackLimit()
{
    static rlim_t limit = RLIM_INFINITY;
    return limit;
}

constexpr rlim_t kStackNeeded = rlim_t(1) << 20, kStackWanted = rlim_t(8) << 20;

inline void roomForTheStack()
{
    struct rlimit limit { };
    if (::getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= kStackNeeded)
        return;
    // A thread's stack is memory like any other, whatever the limit: threads get 8 MiB.
    pthread_attr_t attr;
    if (::pthread_getattr_default_np(&attr) == 0) {
        ::pthread_attr_setstacksize(&attr, kStackWanted);
        ::pthread_setattr_default_np(&attr);
        ::pthread_attr_destroy(&attr);
    }
    // The main thread's stack grows up to the soft limit, which may be raised up to the hard one.
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY || limit.rlim_max > kStackWanted ? kStackWanted : limit.rlim_max;
    mainStackLimit() = ::setrlimit(RLIMIT_STACK, &limit) == 0 ? limit.rlim_cur : before;
}

// Runs main's work on a thread with a stack of 8 MiB (asked for, not left to the default) where the main thread's stack
// limit is below 1 MiB and could not be raised (`ulimit -s 256` sets the hard limit too); on the main thread otherwise.
inline int onRoomyStack(int (*work)(int, char**), int argc, char** argv)
{
    if (mainStackLimit() >= kStackNeeded)
        return work(argc, argv);
    struct Call {
        int (*work)(int, char**);
        int argc;
        char** argv;
        int status;
    } call { work, argc, argv, 1 };
    pthread_attr_t attr;
    pthread_t thread;
    int err = ::pthread_attr_init(&attr);
    if (err == 0) {
        err = ::pthread_attr_setstacksize(&attr, kStackWanted);
        if (err == 0)
            err = ::pthread_create(
                &thread, &attr,
                [](void* p) -> void* {
                    auto* c = static_cast<Call*>(p);
                    c->status = c->work(c->argc, c->argv);
                    return nullptr;
                },
                &call);
        ::pthread_attr_destroy(&attr);
    }
    if (err != 0) {
        std::fprintf(stderr,
            "error: the stack limit (ulimit -s) is %llu KiB, below the 1024 KiB this program needs, and a thread "
            "with more could not be started (%s): raise the stack limit, or the memory limit (ulimit -v)\n",
            static_cast<unsigned long long>(mainStackLimit() >> 10), std::strerror(err));
        return 1;
    }
    // Signals are handled wherever they land: the handlers set flags or end the process.
    ::pthread_join(thread, nullptr);
    return call.status;
}

inline void beforeStart(int, char**, char**)
{
    ::signal(SIGXFSZ, SIG_IGN);
    roomForTheStack();
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            (void)::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY); // the lowest free number: fd
            if (fd == 1)
                stdoutWasClosed() = true;
        }
    char buf[4096];
    if (::getcwd(buf, sizeof buf) == nullptr && errno == ENOENT) {
        const char msg[] = "error: the current folder no longer exists (deleted?): change to another folder\n";
        (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
        ::_exit(1);
    }
}

} // namespace chatbench::startcheck

// Included by exactly one source file of each executable.
__attribute__((section(".preinit_array"), used)) static void (*const chatbenchStartCheck)(int, char**, char**)
    = chatbench::startcheck::beforeStart;
