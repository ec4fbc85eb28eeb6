"""Whether a fresh run's principal may be taken, by the worker's starter keys (`describe_run`
asks it).

Like an approval's, the signature is checked here, in the worker, never in the workflow: the
run acts on the verdict recorded in history, so a replay needs neither the keys nor the crypto.
"""

from __future__ import annotations

from temporalio import activity

from agentloop.activity_io import CheckPrincipalInput, PrincipalCheck
from agentloop.runtime.audit import audit
from agentloop.runtime.signing import PrincipalSignatures


def check_principal(
    signatures: PrincipalSignatures, request: CheckPrincipalInput
) -> PrincipalCheck:
    """The verdict on `request` (recorded in history as part of `describe_run`'s answer), and
    its audit record."""
    problem, signer = signatures.verdict(
        request.principal, request.signature, workflow_id=request.workflow_id
    )
    audit(
        "principal.checked",
        workflow_id=activity.info().workflow_id,
        signed_for=request.workflow_id,
        subject=request.principal.subject,
        tenant=request.principal.tenant,
        signer=signer,
        taken=problem is None,
    )
    return PrincipalCheck(problem=problem or "", signer=signer)
