"""Where a value comes from besides the environment: `NAME_FILE=PATH` (a file holding one
setting, as compose and Kubernetes hand out secrets) and `AGENTLOOP_CONFIG`'s TOML file; each
problem is added to the caller's list, naming the variable or file and the fix."""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Mapping
from typing import Any

from agentloop.runtime.config_checks import read_text
from agentloop.runtime.config_variables import (
    CONFIG_FILE_VARIABLE,
    FILE_SUFFIX,
    LIST_FIELDS,
    NUMBER_FIELDS,
    TABLE_FIELDS,
    VARIABLES,
    present,
)


def read_value_file(field: str, env: Mapping[str, str], problems: list[str]) -> str | None:
    """The value `NAME_FILE` gives `field` (None when unset or the file is blank)."""
    variable = f"{VARIABLES[field].name}{FILE_SUFFIX}"
    path = present(env.get(variable))
    if path is None:
        return None
    text, unreadable = read_text(path)
    if unreadable:
        problems.append(
            f"{variable}={path!r}: {unreadable}: point it at the file holding"
            f" {VARIABLES[field].name}'s value, or unset it"
        )
        return None
    if field in LIST_FIELDS:
        text = ",".join(line.strip() for line in text.splitlines())
    value: str | None = present(text.strip())
    return value


def read_config_file(path: str, problems: list[str]) -> dict[str, Any]:
    where = f"{CONFIG_FILE_VARIABLE}={path!r}"
    text, unreadable = read_text(path)
    if unreadable:
        problems.append(f"{where}: {unreadable}: point it at a TOML file of settings, or unset it")
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"{path} ({CONFIG_FILE_VARIABLE}): invalid TOML: {exc}")
        return {}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in VARIABLES:
            problems.append(f"{path} ({CONFIG_FILE_VARIABLE}): unknown key {key!r}{_hint(key)}")
            continue
        if (
            key in LIST_FIELDS
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
        ):
            value = ",".join(value)
        if key in TABLE_FIELDS and isinstance(value, dict):
            odd = _not_json(value, key)
            if odd is not None:
                problems.append(
                    f"{path} ({CONFIG_FILE_VARIABLE}): {odd} is a TOML date/time, which no"
                    " setting takes: write it as a string (in quotes)"
                )
                continue
            value = json.dumps(value)
        wanted = "a number or a string" if key in NUMBER_FIELDS else "a string"
        if key in LIST_FIELDS:
            wanted = "a string or an array of strings"
        if key in TABLE_FIELDS:
            wanted = "a table (or its JSON text)"
        ok = isinstance(value, str) or (
            key in NUMBER_FIELDS and isinstance(value, int | float) and not isinstance(value, bool)
        )
        if not ok:
            problems.append(
                f"{path} ({CONFIG_FILE_VARIABLE}): {key} must be {wanted},"
                f" not a TOML {_toml_type(value)}"
            )
            continue
        if present(value) is not None:
            values[key] = value
    return values


def _not_json(value: Any, where: str) -> str | None:
    """Where in a table a value is that JSON has no word for (TOML's dates and times), as a
    dotted key; None when there is none."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None if value is None or isinstance(value, str | int | float) else where
    for key, item in items:
        found = _not_json(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found is not None:
            return found
    return None


def _hint(key: str) -> str:
    by_variable = {v.name: field for field, v in VARIABLES.items()}
    if key.upper() in by_variable:
        return f": did you mean {by_variable[key.upper()]!r}? (keys are field names)"
    close = difflib.get_close_matches(key, list(VARIABLES), n=1)
    if close:
        return f": did you mean {close[0]!r}?"
    return f": the keys are {', '.join(VARIABLES)}"


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, int | float):
        return "number"
    return "date/time"
