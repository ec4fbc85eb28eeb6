"""The port check `agentloop dev` makes before it starts (`ensure_port_free`): a port a server
listens on is refused, naming it and what to do; the connections a stopped server leaves
behind on its port are not a reason to refuse it, as they are none for the servers the stack
starts (they reuse the address)."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator

import pytest

from agentloop.runtime.dev_server import DevStackError, ensure_port_free


@contextlib.contextmanager
def listening(port: int = 0) -> Iterator[socket.socket]:
    """A server's socket on 127.0.0.1 (`port`, or a free one), reusing the address as servers
    do."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        yield server


@pytest.mark.parametrize("reuse", [True, False], ids=["reusing", "not-reusing"])
def test_a_port_a_server_listens_on_is_refused_naming_it_and_what_to_do(reuse: bool) -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(DevStackError) as refused:
            ensure_port_free(port, "the inbox", "--inbox-port")
    message = str(refused.value)
    assert message.startswith(f"port {port} for the inbox is in use"), message
    assert f"ss -ltnp 'sport = :{port}'" in message, message
    assert re.search(r"stop it, or pass --inbox-port PORT$", message), message


def test_a_port_left_with_a_client_connection_by_a_stopped_server_is_free() -> None:
    """The server accepted a browser's connection, then stopped (closing its side first, as a
    server shutting down does) while the browser kept its side open: its port holds a
    connection but no listener."""
    with listening() as server, socket.create_connection(server.getsockname()) as browser:
        port = server.getsockname()[1]
        accepted, _ = server.accept()
        browser.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert accepted.recv(1024).startswith(b"GET / ")
        accepted.close()
        server.close()
        assert browser.recv(1024) == b""  # the server's side is closed; the browser's is not

        ensure_port_free(port, "the inbox", "--inbox-port")

        with listening(port) as again:  # as the check said: a server can listen there now
            assert again.getsockname()[1] == port
