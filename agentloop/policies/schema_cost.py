"""What checking a value against a JSON Schema may cost, counted where a schema arrives (the
worker: an MCP listing, a team's tool, a run's `output_schema` in `describe_run`), never in
the workflow, which acts on the verdict. The count is an upper bound on the schema nodes a
check visits along one path of a value: a `$ref` chain that fans out is refused before any
check runs (the check itself, `validation.schema_problems`, stops after its steps besides).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agentloop.policies.bounds import MAX_DEPTH
from agentloop.policies.validation import NOWHERE, objects_in, ref_target

MAX_SCHEMA_WORK = 20_000
"""How many schema nodes one check may visit along a path of the value it checks
(`schema_work`). A schema without `$ref` of the largest size taken (64,000 characters) stays
well under it; a `$ref` chain that fans out (`allOf` of two references to the next step, 40
steps deep: 2,900 characters) would visit 2^40: it is refused where it arrives, not call by
call when each check runs out of steps."""

_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_ARRAY_ONE = ("items", "contains", "unevaluatedItems", "additionalItems")
_OBJECT_ONE = ("additionalProperties", "propertyNames", "unevaluatedProperties")


def schema_cost_problem(schema: object) -> str | None:
    """Why checking a value against `schema` could cost more than a check may (None: it
    cannot). Run where the schema first arrives, on the worker; the workflow acts on it."""
    problem = _resolution_problem(schema)
    if problem:
        return problem
    work = schema_work(schema)
    if work is None:
        return "a $ref loops back to where it started without checking anything on the way"
    if work > MAX_SCHEMA_WORK:
        return (
            f"checking a value against it could visit more than {MAX_SCHEMA_WORK:,} schema "
            "nodes (its $ref, allOf, anyOf or oneOf fan out)"
        )
    return None


@dataclass
class _Count:
    """A node's count so far: visits in place, then along one path into an array's or an
    object's members (a value is one or the other: only the larger adds). Keywords that apply
    to every member add; of `properties` (or `prefixItems`), a path takes one: the largest."""

    node: object
    depth: int
    applied: Iterator[tuple[str, object, int]]
    in_place: int = 1
    array: int = 0
    object: int = 0
    array_one: int = 0
    object_one: int = 0
    waiting: str = ""
    """How the child being counted now is applied."""

    def along_array(self) -> int:
        return self.array + self.array_one

    def along_object(self) -> int:
        return self.object + self.object_one

    def total(self) -> int:
        return self.in_place + max(self.along_array(), self.along_object())

    def add(self, how: str, child: _Count) -> None:
        match how:
            case "in_place":
                self.in_place += child.in_place
                self.array += child.along_array()
                self.object += child.along_object()
            case "array":
                self.array += child.total()
            case "array_one":
                self.array_one = max(self.array_one, child.total())
            case "object":
                self.object += child.total()
            case _:
                self.object_one = max(self.object_one, child.total())

    def over(self, limit: int) -> bool:
        return max(self.in_place, self.along_array(), self.along_object()) > limit


_UNCOUNTED = ("$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveRef", "$recursiveAnchor")


def _resolution_problem(schema: object) -> str | None:
    """What makes a `$ref` resolve elsewhere than the count follows it: anchors, dynamic
    references, an `$id` below the root (refs under it are relative to it), a `$ref` that is
    no JSON pointer from the root."""
    for node in objects_in(schema):
        for key in _UNCOUNTED:
            if key in node:
                return f"it uses {key}: only $ref to a JSON pointer within it is taken"
        if node is not schema and "$id" in node:
            return "it has an $id below its root: only $ref to a JSON pointer within it is taken"
        ref = node.get("$ref")
        if isinstance(ref, str) and not (ref == "#" or ref.startswith("#/")):
            return f"its $ref {ref[:100]!r} is no JSON pointer within it (#/...)"
    return None


def schema_work(schema: object, depth: int = MAX_DEPTH, limit: int = MAX_SCHEMA_WORK) -> int | None:
    """An upper bound on the schema nodes a check visits along one path of a value nested at
    most `depth` levels, each in-place applicator (`allOf`, `$ref`, ...) counted every time it
    is reached. Past `limit` it stops counting (returns `limit + 1`), and past `4 * limit`
    (node, depth) pairs counted (what the count itself costs); None when a `$ref` goes round
    in place, which no check ever finishes. Iterative; each (node, depth) counted once."""
    counted: dict[tuple[int, int], _Count] = {}
    open_keys: set[tuple[int, int]] = set()
    frames = [_Count(schema, depth, _applied(schema, schema, depth))]
    open_keys.add((id(schema), depth))
    while frames:
        frame = frames[-1]
        for how, child, child_depth in frame.applied:
            key = (id(child), child_depth)
            if key in open_keys:
                return None
            if key not in counted:
                frame.waiting = how
                frames.append(_Count(child, child_depth, _applied(schema, child, child_depth)))
                open_keys.add(key)
                break
            frame.add(how, counted[key])
            if frame.over(limit):
                return limit + 1
        else:
            frames.pop()
            key = (id(frame.node), frame.depth)
            open_keys.discard(key)
            counted[key] = frame
            if len(counted) > 4 * limit:
                return limit + 1
            if frames:
                frames[-1].add(frames[-1].waiting, frame)
                if frames[-1].over(limit):
                    return limit + 1
    return counted[(id(schema), depth)].total()


def _applied(root: object, node: object, at: int) -> Iterator[tuple[str, object, int]]:
    """What `node` applies: in place (at the same value), or to an array's or an object's
    members (one level down, while `at` allows)."""
    if not isinstance(node, dict):
        return
    # `unevaluatedProperties`/`Items` check the in-place branches again, to learn what they
    # evaluated: each counts twice.
    rounds = 2 if "unevaluatedProperties" in node or "unevaluatedItems" in node else 1
    for _ in range(rounds):
        for key in _IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                yield from (("in_place", sub, at) for sub in node[key])
        for key in _IN_PLACE_ONE:
            if key in node:
                yield "in_place", node[key], at
    if isinstance(node.get("dependentSchemas"), dict):
        yield from (("in_place", sub, at) for sub in node["dependentSchemas"].values())
    if isinstance(node.get("$ref"), str):  # a JSON pointer (`_resolution_problem`)
        target = ref_target(root, node["$ref"])
        if target is not NOWHERE:
            yield "in_place", target, at
    if at <= 0:
        return
    for key in _ARRAY_ONE:
        if key in node:
            yield "array", node[key], at - 1
    if isinstance(node.get("prefixItems"), list):
        yield from (("array_one", sub, at - 1) for sub in node["prefixItems"])
    for key in _OBJECT_ONE:
        if key in node:
            yield "object", node[key], at - 1
    if isinstance(node.get("properties"), dict):
        yield from (("object_one", sub, at - 1) for sub in node["properties"].values())
    if isinstance(node.get("patternProperties"), dict):
        # Several patterns may match one name: each adds.
        yield from (("object", sub, at - 1) for sub in node["patternProperties"].values())


def output_schema_cost_problem(schema: object) -> str | None:
    """Why checking answers against a run's `output_schema` could cost more than a check may."""
    problem = schema_cost_problem(schema) if schema is not None else None
    return f"output_schema: {problem}" if problem else None
