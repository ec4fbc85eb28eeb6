"""A run's page in the inbox (its links, the notices') holds its workflow id so that
neither the server's routing (which decodes percent-escapes) nor a browser (which resolves
`.` and `..`) reads another path in it."""

from __future__ import annotations

from urllib.parse import unquote, urljoin

from hypothesis import given
from hypothesis import strategies as st

from agentloop.waiting import decode_id, encode_id, run_path

IDS = {
    "book-carol-ws-101": "/runs/book-carol-ws-101",
    "run.1": "/runs/run.1",
    "ops/refund-7": "/runs/ops~2Frefund-7",
    "..": "/runs/~2E.",
    ".": "/runs/~2E",
    "a b": "/runs/a~20b",
    "ü": "/runs/~C3~BC",
    "a~b%2F": "/runs/a~7Eb~252F",
}


def test_each_id_has_one_path_that_stays_one_segment_in_a_browser_and_the_router() -> None:
    for workflow_id, path in IDS.items():
        assert run_path(workflow_id) == path
        assert urljoin("http://inbox.example/runs/", path) == "http://inbox.example" + path
        segment = unquote(path.removeprefix("/runs/"))  # what routing sees
        assert "/" not in segment and decode_id(segment) == workflow_id


def test_a_segment_no_encoding_wrote_names_no_run() -> None:
    for segment in ("..", ".x", "a b", "ü", "a~2f", "a~", "~C3", "a~41", "a/b", ""):
        assert decode_id(segment) is None, segment


@given(st.text(min_size=1, max_size=60))
def test_every_id_comes_back_from_its_path(workflow_id: str) -> None:
    assert decode_id(encode_id(workflow_id)) == workflow_id
