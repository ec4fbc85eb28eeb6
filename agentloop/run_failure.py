"""The result inside the failure of a run that ended `failed`: pure, so the workflow reads a
child run's with it and clients a run's (`agentloop.run_results.read_result`)."""

from __future__ import annotations

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from agentloop.contract import RUN_FAILED, AgentRunResult


def result_in(failure: BaseException | None) -> AgentRunResult | None:
    """The result inside the failure of a run that ended `failed` (type `RUN_FAILED`); None
    for any other failure. Pure: the workflow reads a child run's with it, clients a run's."""
    if not isinstance(failure, ApplicationError) or failure.type != RUN_FAILED:
        return None
    try:
        return AgentRunResult.model_validate(failure.details[0])
    except (IndexError, ValidationError):
        return None
