"""Falling back to another model: whether a failed model call goes to the run's next model,
and to which.

Pure: the workflow hands in the class of the failure (`policies.errors`, or `timeout` when the
call ran out of time) and where the run is in its chain of models, and acts on the answer.
Only unavailability moves a run on: a refusal is an answer, not a failure, and a request the
provider refused (bad request, context length, authentication...) would be as wrong for the
next model as it was for this one, or hides a mistake a switch would only make costlier.
"""

from __future__ import annotations

UNAVAILABLE = frozenset({"transient", "timeout"})
"""The failure classes that say the model could not be reached or did not answer in time
(5xx, 429, 408, 409, a lost connection, an expired attempt), after the call's own retries."""


def fallback_after(error_class: str, serving: int, fallbacks: int) -> int | None:
    """The place in the run's chain of models (0: its `model`, n: its n-th fallback) of the
    model the failed call goes to next; None when the run stops on the failure (the class is
    not unavailability, or no fallback is left)."""
    if error_class not in UNAVAILABLE or serving >= fallbacks:
        return None
    return serving + 1
