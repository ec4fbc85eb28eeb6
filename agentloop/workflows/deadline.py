"""The run's deadline, for steps that wait on activities (workflow code, deterministic)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

from agentloop.policies import budgets
from agentloop.workflows.loop import LoopState

DEADLINE_TIMER_SUMMARY = "run deadline"
"""What the UI shows on the run's deadline timer."""


class RunDeadline:
    """A run has one Temporal timer for its deadline, started at the first wait and left
    running (not one per wait: two commands and two history events a step): when it fires,
    `passed` turns True if the deadline has passed, and otherwise (waits for humans moved the
    deadline, and they do not count) the timer starts again for what is left; so it does when
    the deadline moves after it passed (a child's wait for humans, counted when it returns)."""

    def __init__(self, state: LoopState) -> None:
        self._state = state
        self._timer: asyncio.Task[None] | None = None
        self.passed = False

    def seconds_left(self) -> float | None:
        """None without a deadline. Not during a wait for humans, whose time is not counted
        until it ends."""
        state = self._state
        return budgets.limits_left(
            state.run_input.limits, state.usage, state.active_since(), workflow.now()
        ).seconds

    def _start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        state = self._state
        while True:
            await workflow.wait_condition(lambda: state.paused_since is None)
            seconds = self.seconds_left()
            if seconds is None:
                return
            if seconds <= 0:
                self.passed = True
                # A child's wait for humans, added when it comes back, moves the deadline.
                await workflow.wait_condition(lambda: not self._still_passed())
                self.passed = False
                continue
            await workflow.sleep(max(seconds, 0.001), summary=DEADLINE_TIMER_SUMMARY)

    def _still_passed(self) -> bool:
        if self._state.paused_since is not None:
            return True  # what the wait takes is known when it ends
        seconds = self.seconds_left()
        return seconds is not None and seconds <= 0

    def _has_passed(self) -> bool:
        """`passed`, checked again against the deadline as it stands now: in the workflow
        task where the deadline moved, the watcher has not run yet to clear it."""
        if not self.passed:
            return False
        return self._still_passed()

    async def wait_for(
        self, handles: list[workflow.ActivityHandle[Any]], *, race: bool = True
    ) -> bool:
        """Wait for the activities, unless a cancel or (with `race`) the deadline comes
        first: then cancel them and return False (the next `decide` turns that into the
        stop)."""
        state = self._state

        def done_or_cancelled() -> bool:
            return all(h.done() for h in handles) or state.cancel_reason is not None

        if not race:
            await workflow.wait_condition(done_or_cancelled)
        else:
            self._start()
            await workflow.wait_condition(lambda: done_or_cancelled() or self._has_passed())
        if all(h.done() for h in handles):
            return True
        for handle in handles:
            handle.cancel()
        return False
