"""`agentloop keys`: an approver's Ed25519 key pair for signed approvals, and the inbox's key.

`keys new NAME` writes NAME.pem (the private key, readable by its owner only) and prints the
line that goes into the workers' AGENTLOOP_APPROVER_KEYS; `keys public NAME FILE` prints that
line again from the private key file. `keys inbox` prints the inbox's AGENTLOOP_INBOX_KEY from
the workers' AGENTLOOP_STREAM_KEY (`waiting.memo_key`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentloop.cli.output import ApproverKey, ExitCode, InboxKey, print_json
from agentloop.runtime.config import ConfigError, load_config
from agentloop.runtime.config_variables import VARIABLES, present
from agentloop.runtime.signing import (
    APPROVER_NAME,
    SigningError,
    load_private_key,
    new_private_key_pem,
    public_key_text,
)
from agentloop.stream_seals import derived_key
from agentloop.waiting import memo_key


def approver_keys(args: argparse.Namespace) -> int:
    if args.keys_command == "inbox":
        return _inbox_key(as_json=args.json)
    if not APPROVER_NAME.fullmatch(args.approver):
        print(
            f"agentloop keys: {args.approver!r} is not an approver name "
            "(letters, digits, '_', '.', '@', '-')",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.keys_command == "new":
        return _new(args.approver, Path(args.dir), as_json=args.json)
    try:
        key = load_private_key(args.key_file)
    except SigningError as exc:
        print(f"agentloop keys: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    _show(args.approver, public_key_text(key), Path(args.key_file), as_json=args.json)
    return ExitCode.OK


def _show(approver: str, public: str, key_file: Path, as_json: bool) -> None:
    """The public line (what AGENTLOOP_APPROVER_KEYS takes), or the JSON document."""
    line = f"{approver}={public}"
    if as_json:
        print_json(ApproverKey(approver=approver, public_key=public, line=line, key_file=key_file))
    else:
        print(line)


def _new(approver: str, folder: Path, as_json: bool) -> int:
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
    _show(approver, public, path, as_json=as_json)
    return ExitCode.OK


def _inbox_key(as_json: bool) -> int:
    """The inbox's key, from the stream key this command's configuration holds."""
    try:
        stream_key = load_config(skip=set(VARIABLES) - {"stream_key"}).settings.stream_key
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return ExitCode.USAGE
    if present(stream_key) is None:
        print(
            "agentloop keys inbox: AGENTLOOP_STREAM_KEY (or AGENTLOOP_STREAM_KEY_FILE) is not"
            " set: set it to the workers' stream key",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    assert stream_key is not None
    key = memo_key(derived_key(stream_key))
    assert key is not None
    if as_json:
        print_json(InboxKey(inbox_key=key.hex()))
    else:
        print(key.hex())
    return ExitCode.OK
