#pragma once
// A scope in which the calling thread's ATen and MKL work runs on a given number of threads
// (private: ATen types). Training's lanes share the cores out with it; batch-1 replies cap their
// threads with it (fastdecode.h).

#include <ATen/Parallel.h>

#include <dlfcn.h>

namespace chatbench {

// Gives the calling thread's ATen and MKL work `threads` threads while it lives, then puts back
// what the thread had: OpenMP's and MKL's thread-local settings, looked up at run time (a
// LibTorch without MKL has only OpenMP's).
class ScopedThreads {
public:
    explicit ScopedThreads(int threads)
    {
        // ATen sets a thread's OpenMP and MKL counts on its first parallel call there: that
        // comes first, or it would undo these.
        m_omp = at::get_num_threads();
        if (api().ompSet)
            api().ompSet(threads);
        if (api().mklLocal)
            m_mkl = api().mklLocal(threads); // the thread's previous setting (0: none)
    }
    ~ScopedThreads()
    {
        if (api().ompSet)
            api().ompSet(m_omp);
        if (api().mklLocal)
            api().mklLocal(m_mkl);
    }
    ScopedThreads(const ScopedThreads&) = delete;
    ScopedThreads& operator=(const ScopedThreads&) = delete;

private:
    struct Api {
        void (*ompSet)(int) = nullptr;
        int (*mklLocal)(int) = nullptr;
    };
    static const Api& api()
    {
        static const Api a = [] {
            Api x;
            x.ompSet = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
            x.mklLocal = reinterpret_cast<int (*)(int)>(::dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
            return x;
        }();
        return a;
    }
    int m_omp = 1;
    int m_mkl = 0;
};

} // namespace chatbench
