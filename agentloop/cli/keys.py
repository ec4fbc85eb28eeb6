"""`agentloop keys`: an approver's Ed25519 key pair for signed approvals.

`keys new NAME` writes NAME.pem (the private key, readable by its owner only) and prints the
line that goes into the workers' AGENTLOOP_APPROVER_KEYS; `keys public NAME FILE` prints that
line again from the private key file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentloop.cli.output import ExitCode
from agentloop.runtime.signing import (
    APPROVER_NAME,
    SigningError,
    load_private_key,
    new_private_key_pem,
    public_key_text,
)


def approver_keys(args: argparse.Namespace) -> int:
    if not APPROVER_NAME.fullmatch(args.approver):
        print(
            f"agentloop keys: {args.approver!r} is not an approver name "
            "(letters, digits, '_', '.', '@', '-')",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.keys_command == "new":
        return _new(args.approver, Path(args.dir))
    try:
        key = load_private_key(args.key_file)
    except SigningError as exc:
        print(f"agentloop keys: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"{args.approver}={public_key_text(key)}")
    return ExitCode.OK


def _new(approver: str, folder: Path) -> int:
    path = folder / f"{approver}.pem"
    pem, public = new_private_key_pem()
    try:
        # O_EXCL: never overwrite a key someone may still sign with.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"agentloop keys: {path} exists; keeping it", file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        print(f"agentloop keys: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return ExitCode.USAGE
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
    print(f"wrote {path} (the private key: keep it to {approver})", file=sys.stderr)
    print(f"{approver}={public}")
    return ExitCode.OK
