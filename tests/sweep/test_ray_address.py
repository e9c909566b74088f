"""``--ray ADDRESS`` checked before Ray is asked (``planner/sweep/ray_address.py``; issue 36 item 7).

Quick and without Ray: the real head runs in ``test_ray_head.py`` (slow, CI)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.sweep.ray_address import prepare


def _server(answer: bytes | None):
    """A port whose every connection reads the client's first bytes and answers ``answer`` (None: says nothing)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    stop = threading.Event()

    def serve() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(64)
                    if answer is None:
                        stop.wait(4)
                    else:
                        conn.sendall(answer)
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return s, stop, t


@contextlib.contextmanager
def serving(answer: bytes | None):
    s, stop, t = _server(answer)
    try:
        yield s.getsockname()[1]
    finally:
        stop.set()
        t.join(6)
        s.close()


H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # what a gRPC server (Ray's GCS) answers first


@pytest.fixture
def listening():
    with serving(H2_SETTINGS) as port:
        yield port


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_auto_and_none_pass_untouched(tmp_path):
    env: dict[str, str] = {}
    assert prepare("auto", env, tmp_path) == "auto" and prepare(None, env, tmp_path) is None and env == {}


def test_an_explicit_address_sends_the_users_token(tmp_path, listening):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("x" * 64)
    env: dict[str, str] = {}
    assert prepare(f"127.0.0.1:{listening}", env, tmp_path) == f"127.0.0.1:{listening}"
    assert env == {"RAY_AUTH_MODE": "token"}
    said = {"RAY_AUTH_MODE": "disabled"}  # the user's word stands
    prepare(f"127.0.0.1:{listening}", said, tmp_path)
    assert said == {"RAY_AUTH_MODE": "disabled"}
    none: dict[str, str] = {}  # no token anywhere: nothing to send, nothing set
    prepare(f"127.0.0.1:{listening}", none, tmp_path / "nobody")
    assert none == {}
    by_env = {"RAY_AUTH_TOKEN": "t"}
    prepare(f"ray://127.0.0.1:{listening}", by_env, tmp_path / "nobody")
    assert by_env["RAY_AUTH_MODE"] == "token"


@pytest.mark.parametrize("address, words", [
    ("nonsense", "is not a Ray address: give auto, HOST:PORT"),
    ("ray://", "is not a Ray address"),
    ("127.0.0.1:70000", "is not a Ray address"),
])
def test_a_malformed_address_is_bad_input(tmp_path, address, words):
    with pytest.raises(BadInput, match=words):
        prepare(address, {}, tmp_path)


def test_nothing_listening_is_refused_at_once(tmp_path):
    port = _dead_port()
    with pytest.raises(BadInput, match=f"nothing accepts a connection at 127.0.0.1:{port}.*GCS port"):
        prepare(f"127.0.0.1:{port}", {}, tmp_path)
    with pytest.raises(BadInput, match="client server port"):
        prepare(f"ray://127.0.0.1:{port}", {}, tmp_path)


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"SSH-2.0-OpenSSH_9.6\r\n", None])
def test_a_port_where_something_else_listens_is_refused_at_once(tmp_path, answer):
    """Ray retried such a port for minutes with its warnings on stderr (issue 47): now one line within the
    connect timeout, whether it answers HTTP/1, SSH or nothing at all."""
    with serving(answer) as port:
        t = time.monotonic()
        with pytest.raises(BadInput, match="does not answer as Ray does"):
            prepare(f"127.0.0.1:{port}", {}, tmp_path)
        assert time.monotonic() - t < 5


@pytest.mark.parametrize("host", ["a" * 64, "ok." + "b" * 100 + ".example", "x." * 130 + "y", "a..b"])
def test_a_host_no_resolver_takes_is_bad_input_not_a_unicode_error(tmp_path, host):
    with pytest.raises(BadInput, match="is not a host name"):
        prepare(f"{host}:6379", {}, tmp_path)
    with pytest.raises(BadInput, match="is not a host name"):
        prepare(f"ray://{host}:10001", {}, tmp_path)
