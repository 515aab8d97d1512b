#pragma once
// Checks made before any library's initialisers run (the executable's .preinit_array), for both
// front ends. A current folder that was deleted made the MKL inside LibTorch stop every start,
// even `--version`, with "Intel oneMKL FATAL ERROR: Cannot load …/libtorch_cpu.so"; said in
// words instead. A closed standard stream is opened on /dev/null, so that no file opened later
// (a run's lock, a checkpoint) takes its number and receives what is printed. A file-size limit
// (`ulimit -f`) makes a write past it fail with EFBIG, which every writer reports naming the file
// and the limit, instead of ending the process by SIGXFSZ mid-save (ignored before anything
// starts, the Keras reader's child process included).

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace chatbench::startcheck {

// Whether standard output was closed when the program started (it is /dev/null now).
inline bool& stdoutWasClosed()
{
    static bool closed = false;
    return closed;
}

inline void beforeStart(int, char**, char**)
{
    ::signal(SIGXFSZ, SIG_IGN);
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
