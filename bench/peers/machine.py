"""What the peers' reports say about the CPU they ran on (the Compare view tells machines apart by it)."""

import platform


def cpu_model():
    """The CPU's model name as the kernel reports it (Linux), else what Python's platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
