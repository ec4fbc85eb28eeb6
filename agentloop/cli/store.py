"""`agentloop store seal`: seal, once, a store written before AGENTLOOP_CODEC_KEYS was set.

With the keys set, the store refuses every row that is not sealed (`agentloop.store.sealed`);
this seals the rows written before, under the active key (`agentloop.store.sealing`). Safe to
run again, and while workers run.
"""

from __future__ import annotations

import argparse
import sys

from agentloop.cli.output import CommandError, ExitCode, print_json
from agentloop.cli.transcript import open_transcript_store
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import CODEC_KEYS_VARIABLE
from agentloop.runtime.config import Settings
from agentloop.store import StoreError, StoreUnavailable
from agentloop.store.sealing import SealedRows, seal_plaintext_rows


async def store_command(settings: Settings, args: argparse.Namespace) -> int:
    """`seal` (the only one): exit 0 when every row is sealed now, 1 when some row could not
    be (its content does not match its address), 2 when the keys are unset or the store
    cannot be opened."""
    keys = settings.codec_key_ring()
    if keys is None:
        raise CommandError(
            f"agentloop store seal: {CODEC_KEYS_VARIABLE} is not set: set it to the keys the"
            " workers use (the store is sealed under the first, the active one)",
            ExitCode.USAGE,
        )
    where = f"the store at {mask_url(settings.store_url)} (AGENTLOOP_STORE_URL)"
    try:
        store = open_transcript_store(settings.store_url, keys)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot open {where}: {exc}", ExitCode.USAGE) from None
    try:
        sealed = await seal_plaintext_rows(store)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot reach {where}: {exc}", ExitCode.USAGE) from None
    except StoreError as exc:
        raise CommandError(f"cannot seal {where}: {exc}", ExitCode.FAILED) from None
    finally:
        await store.close()
    if args.json:
        print_json(sealed)
    else:
        print(_said(sealed, where), file=sys.stderr if sealed.mismatched else sys.stdout)
    return ExitCode.FAILED if sealed.mismatched else ExitCode.OK


def _said(sealed: SealedRows, where: str) -> str:
    done = (
        f"sealed {sealed.nodes} nodes and {sealed.artifacts} artifacts under key"
        f" {sealed.key_id!r} in {where}"
    )
    if not sealed.mismatched:
        return f"{done}: every row is sealed"
    return (
        f"{done}; left {len(sealed.mismatched)} rows unsealed, whose content does not match"
        " their address (agentloop did not write them: someone with access to the database"
        " did), so they stay refused: " + ", ".join(sealed.mismatched)
    )
