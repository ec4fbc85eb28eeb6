"""`agentloop scripts check PATH...`: the script files the scripted provider would play, checked
where they are written (unknown keys, wrong types, syntax), each problem with its file, line
and what was expected; `agentloop dev --scripts` makes the same check before it starts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentloop.cli.output import ExitCode, print_json
from agentloop.scripted_provider.scripts import (
    SCRIPT_FILE_SUFFIXES,
    ScriptFileError,
    ScriptFolder,
    load_script_file,
)


def check_scripts(paths: Sequence[Path], *, as_json: bool = False) -> int:
    """Each path a script file or a folder of them: exits 0 when every one is a script."""
    scripts: dict[str, str] = {}
    problems: list[str] = []
    for path in paths:
        if path.is_dir():
            folder = ScriptFolder(path)
            loaded, _ = folder.load()
            scripts.update((name, f"{path}/{name}") for name in loaded)
            problems += folder.problems
        elif path.suffix not in SCRIPT_FILE_SUFFIXES:
            problems.append(f"{path}: not a script file (*.json, *.toml) nor a folder")
        else:
            try:
                scripts[load_script_file(path).name] = str(path)
            except ScriptFileError as exc:
                problems.append(str(exc))
    if as_json:
        print_json({"scripts": sorted(scripts), "problems": problems})
    else:
        for name in sorted(scripts):
            print(f"ok       {name}")
        for problem in problems:
            print(problem)
    return ExitCode.FAILED if problems else ExitCode.OK
