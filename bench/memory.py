"""Resident memory of a process (this one, or a worker the benchmark started), from
/proc/PID/status."""

from __future__ import annotations

import resource
import threading
from pathlib import Path
from types import TracebackType

_SAMPLE_SECONDS = 0.01


class ProcessMemory:
    """RSS (VmRSS) and its peak (VmHWM) of one process: `"self"`, or a pid."""

    def __init__(self, pid: int | str = "self") -> None:
        self.pid = pid
        self._status = Path(f"/proc/{pid}/status")
        self._clear_refs = Path(f"/proc/{pid}/clear_refs")

    @property
    def is_self(self) -> bool:
        return self.pid == "self"

    def _status_mib(self, field: str) -> float | None:
        try:
            text = self._status.read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # the kernel reports kB
        return None

    def rss_mib(self) -> float:
        """Resident set size now (VmRSS); the peak where /proc is missing."""
        now = self._status_mib("VmRSS")
        return now if now is not None else self.peak_mib()

    def peak_mib(self) -> float:
        """The peak resident set size (VmHWM), since the last `reset_peak()` that worked."""
        peak = self._status_mib("VmHWM")
        if peak is not None:
            return peak
        if self.is_self:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        return 0.0

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current RSS (Linux: `5` to clear_refs); False if not allowed."""
        try:
            self._clear_refs.write_text("5")
        except OSError:
            return False
        return True


_SELF = ProcessMemory()


def rss_mib() -> float:
    """This process's resident set size now."""
    return _SELF.rss_mib()


def peak_mib() -> float:
    """This process's peak resident set size."""
    return _SELF.peak_mib()


class PeakSampler:
    """The highest RSS of a process seen while the context is open: sampled every 10 ms by a
    thread, and VmHWM too when it could be reset on entry (it then catches peaks between
    samples)."""

    def __init__(self, pid: int | str = "self") -> None:
        self.memory = ProcessMemory(pid)
        self.start_mib = 0.0
        self.peak_mib = 0.0
        self._hwm_reset = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def __enter__(self) -> PeakSampler:
        self.start_mib = self.peak_mib = self.memory.rss_mib()
        self._hwm_reset = self.memory.reset_peak()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        if self._hwm_reset:
            self.peak_mib = max(self.peak_mib, self.memory.peak_mib())

    @property
    def growth_mib(self) -> float:
        return max(0.0, self.peak_mib - self.start_mib)

    def _sample(self) -> None:
        while not self._stop.wait(_SAMPLE_SECONDS):
            self.peak_mib = max(self.peak_mib, self.memory.rss_mib())
