"""Resident memory of this process (where DevStack runs its worker), from /proc/self/status."""

from __future__ import annotations

import resource
import threading
from pathlib import Path
from types import TracebackType

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_SAMPLE_SECONDS = 0.01


def _status_mib(field: str) -> float | None:
    try:
        text = _STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # the kernel reports kB
    return None


def rss_mib() -> float:
    """Resident set size now (VmRSS); the lifetime peak where /proc is missing."""
    now = _status_mib("VmRSS")
    return now if now is not None else peak_mib()


def peak_mib() -> float:
    """The peak resident set size (VmHWM), since the last `reset_peak()` that worked."""
    peak = _status_mib("VmHWM")
    if peak is not None:
        return peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: `5` to clear_refs); False if not allowed."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class PeakSampler:
    """The highest RSS seen while the context is open: sampled every 10 ms by a thread, and
    VmHWM too when it could be reset on entry (it then catches peaks between samples)."""

    def __init__(self) -> None:
        self.start_mib = 0.0
        self.peak_mib = 0.0
        self._hwm_reset = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def __enter__(self) -> PeakSampler:
        self.start_mib = self.peak_mib = rss_mib()
        self._hwm_reset = reset_peak()
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
            self.peak_mib = max(self.peak_mib, peak_mib())

    @property
    def growth_mib(self) -> float:
        return max(0.0, self.peak_mib - self.start_mib)

    def _sample(self) -> None:
        while not self._stop.wait(_SAMPLE_SECONDS):
            self.peak_mib = max(self.peak_mib, rss_mib())
