#pragma once
// Small helpers shared by the test suites.

#include "chatbench/config.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QString>
#include <QTemporaryDir>
#include <QTest>

#include <string>
#include <utility>
#include <vector>

#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace testutil {

// While it lives, this process reads and writes files as their modes say even as root: the
// capabilities that bypass file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) are dropped
// from its effective set, and raised again at the end.
class DacBypassOff {
public:
    DacBypassOff()
    {
        if (::syscall(SYS_capget, &m_header, m_saved) != 0)
            return;
        __user_cap_data_struct lowered[2] = { m_saved[0], m_saved[1] };
        lowered[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
        m_changed = ::syscall(SYS_capset, &m_header, lowered) == 0;
    }
    ~DacBypassOff()
    {
        if (m_changed)
            (void)::syscall(SYS_capset, &m_header, m_saved);
    }
    DacBypassOff(const DacBypassOff&) = delete;
    DacBypassOff& operator=(const DacBypassOff&) = delete;

private:
    __user_cap_header_struct m_header { _LINUX_CAPABILITY_VERSION_3, 0 };
    __user_cap_data_struct m_saved[2] {};
    bool m_changed = false;
};

// While it lives, files and folders this process makes get the modes `mask` leaves (as for a
// user with that umask); the umask before is restored at the end, a failed check or not.
class Umask {
public:
    explicit Umask(mode_t mask)
        : m_before(::umask(mask))
    {
    }
    ~Umask() { ::umask(m_before); }
    Umask(const Umask&) = delete;
    Umask& operator=(const Umask&) = delete;

private:
    mode_t m_before;
};

// Twelve question/answer pairs a small model learns by heart in a few seconds: the training and
// explanation suites train on them.
inline const std::vector<std::pair<std::string, std::string>> kDialog = {
    { "hello", "hi there" },
    { "how are you", "i am fine thanks" },
    { "what is your name", "my name is chatbench" },
    { "what is an lstm", "a recurrent network with gates" },
    { "what does the forget gate do", "it decides what the cell keeps" },
    { "who made you", "engineers who like charts" },
    { "do you like music", "yes especially jazz" },
    { "what time is it", "time to train a model" },
    { "are you a robot", "i am a small neural network" },
    { "tell me a joke", "my loss went down and never came back" },
    { "goodbye", "see you soon" },
    { "thank you", "you are welcome" },
};

// A model small enough to learn kDialog by heart in 80 epochs (about two seconds, one thread).
inline chatbench::TrainConfig dialogConfig()
{
    chatbench::TrainConfig c = chatbench::preset("quick");
    c.model.embedDim = 32;
    c.model.hidden = 64;
    c.batchSize = 4;
    c.epochs = 80;
    c.learningRate = 1e-2;
    c.validationFraction = 0;
    c.seed = 1;
    c.threads = 1;
    return c;
}

// Writes raw bytes to dir/name and returns the path.
inline std::string writeFile(const QTemporaryDir& dir, const QString& name, const QByteArray& bytes)
{
    const QString path = dir.filePath(name);
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly))
        qFatal("cannot write %s", qPrintable(path));
    f.write(bytes);
    return path.toStdString();
}

// The bytes of `path`, or "(unreadable)".
inline QByteArray readFile(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray("(unreadable)");
}

} // namespace testutil
