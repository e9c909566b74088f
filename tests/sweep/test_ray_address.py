"""``--ray ADDRESS`` checked before Ray is asked (``planner/sweep/ray_address.py``; issue 36 item 7).

Quick and without Ray: the real head runs in ``test_ray_head.py`` (slow, CI)."""

from __future__ import annotations

import socket

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.sweep.ray_address import prepare


@pytest.fixture
def listening():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


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
