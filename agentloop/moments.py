"""Moments as people read them next to a duration: the clock time alone within a day of now
("in 3 h (18:40)"), the date with it farther away ("in 2 d 1 h (2026-12-09 18:40)"), so a
deadline tomorrow never reads like one that passed today. Local time of the reader's machine.
"""

from __future__ import annotations

from datetime import datetime, timedelta

SAME_DAY = timedelta(hours=24)


def clock_of(moment: datetime, now: datetime) -> str:
    """`18:40` when `moment` is within 24 h of `now`, else `2026-12-09 18:40`."""
    local = moment.astimezone()
    if abs(moment - now) < SAME_DAY:
        return local.strftime("%H:%M")
    return local.strftime("%Y-%m-%d %H:%M")
