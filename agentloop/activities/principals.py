"""Whether a fresh run's start may be taken, by the worker's starter keys and the nonces the
workers' store remembers (`describe_run` asks it).

Like an approval's, the signature is checked here, in the worker, never in the workflow: the
run acts on the verdict recorded in history, so a replay needs neither the keys, the crypto
nor the store.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity

from agentloop.activity_io import CheckPrincipalInput, PrincipalCheck
from agentloop.runtime.audit import audit
from agentloop.runtime.start_signing import (
    NONCE_RETENTION,
    PrincipalSignatures,
    StartVerdict,
    nonce_problem,
)
from agentloop.store.base import StartNonces


async def check_principal(
    signatures: PrincipalSignatures, nonces: StartNonces, request: CheckPrincipalInput
) -> PrincipalCheck:
    """The verdict on `request` (recorded in history as part of `describe_run`'s answer), and
    its audit record. A run's own signature claims its nonce for the run chain: the same
    run asking again (a retried activity) is taken, any other run refused."""
    verdict = signatures.verdict(request)
    signed = verdict.signed
    problem = verdict.problem
    if signed is not None and not request.delegated:
        problem = nonce_problem(signed, datetime.now(UTC))
        if problem is None and not await nonces.claim_nonce(
            signed.nonce, request.run, signed.expires_at + NONCE_RETENTION
        ):
            problem = (
                "the signature was used to start another run already (its nonce was seen):"
                " a signed start counts for one run; sign this one anew"
            )
    _audit(request, verdict, problem)
    return PrincipalCheck(problem=problem or "", signer=None if problem else verdict.signer)


def _audit(request: CheckPrincipalInput, verdict: StartVerdict, problem: str | None) -> None:
    audit(
        "principal.checked",
        workflow_id=activity.info().workflow_id,
        signed_for=request.workflow_id,
        subject=request.principal.subject,
        tenant=request.principal.tenant,
        signer=verdict.signer,
        nonce=verdict.signed.nonce if verdict.signed is not None else None,
        taken=problem is None,
        problem=problem,
    )
