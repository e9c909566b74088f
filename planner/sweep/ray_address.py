"""``--ray ADDRESS`` checked before Ray is asked, so each form either connects or fails in one line.

The three forms Ray documents, as Ray 2.5x+ treats them (docs/sweep.md, "Ray"):

* ``auto``: the cluster whose head runs on this machine (``ray start --head``); Ray finds its
  address and, where the cluster uses token authentication (Ray's default), its token.
* ``HOST:PORT``, the address ``ray start --head`` prints: Ray sends a token to an address given
  explicitly only with ``RAY_AUTH_MODE=token``, and otherwise retries for some 20 s printing one
  ``InvalidAuthToken`` warning a second. Where the user has a token (``RAY_AUTH_TOKEN``,
  ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, the file ``ray start`` writes) and did not set
  ``RAY_AUTH_MODE``, it is set to ``token`` for this process: the address was named on purpose.
* ``ray://HOST:PORT``: the Ray Client, which needs Ray's client extra (grpcio); the ``[ray]``
  extra installs it. Without it, one line says so instead of Ray's traceback.

An explicit address that accepts no TCP connection within ``CONNECT_TIMEOUT_S`` is refused at once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import MutableMapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.text import excerpt

CONNECT_TIMEOUT_S = 3.0
AUTH_MODE = "RAY_AUTH_MODE"
FORMS = "auto, HOST:PORT (as `ray start --head` prints it) or ray://HOST:PORT"
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})$")


def has_token(environ: MutableMapping[str, str], home: Path) -> bool:
    """Whether Ray would find a token for this process (its own three places)."""
    if environ.get("RAY_AUTH_TOKEN"):
        return True
    path = environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (home / ".ray" / "auth_token").is_file()


def split_host_port(text: str) -> tuple[str, int] | None:
    m = _HOST_PORT.match(text)
    if m is None or not 0 < int(m.group("port")) < 65536:
        return None
    return m.group("host").strip("[]"), int(m.group("port"))


MAX_HOST_CHARS = 253   # a DNS name (RFC 1035)
MAX_LABEL_CHARS = 63   # one label of it (longer: the idna codec's UnicodeError, an internal error before)
# HTTP/2's connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, its client server)
# answers with a SETTINGS frame of its own (type 4); an HTTP/1 server, SSH or a silent port does not.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_host(host: str, address: str) -> None:
    """A host name Ray (and the resolver) can take: labels of 1 to 63 characters, 253 in all."""
    if host.startswith("["):
        return
    labels = host.rstrip(".").split(".")
    if len(host) > MAX_HOST_CHARS or any(not 0 < len(label) <= MAX_LABEL_CHARS for label in labels):
        raise BadInput("options", "--ray", f"{excerpt(address)} is not a host name: each part between dots has "
                       f"1 to {MAX_LABEL_CHARS} characters, {MAX_HOST_CHARS} in all")


def reachable(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    return speaks_grpc(host, port, timeout_s) is not None


def speaks_grpc(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> bool | None:
    """None: nothing accepts a connection; else whether what does answers HTTP/2 (gRPC, as Ray's GCS and
    client server do) within the timeout."""
    import socket

    try:
        conn = socket.create_connection((host, port), timeout=timeout_s)
    except (OSError, UnicodeError, ValueError):
        return None
    with conn:
        try:
            conn.settimeout(timeout_s)
            conn.sendall(_H2_HELLO)
            head = b""
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:
            return False
    return len(head) == 9 and head[3] == 4


def prepare(address: str | None, environ: MutableMapping[str, str] | None = None,
            home: Path | None = None) -> str | None:
    """The address to give ``ray.init``, after the checks above (``environ`` may gain RAY_AUTH_MODE);
    BadInput naming ``--ray`` when it cannot work."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if address is None or address == "auto":
        return address
    text = address.strip()
    client = text.startswith("ray://")
    hp = split_host_port(text[len("ray://"):] if client else text)
    if hp is None:
        raise BadInput("options", "--ray", f"{excerpt(address)} is not a Ray address: give {FORMS}")
    if client:
        try:
            import grpc  # noqa: F401  (Ray's client talks gRPC: ray[client])
        except ImportError:
            raise BadInput("options", "--ray", "ray:// needs Ray's client (grpcio): pip install 'csa-plan[ray]' "
                           "(it installs ray[client]), or give HOST:PORT or auto") from None
    check_host(hp[0], address)
    port_name = 'client server port (10001 by default)' if client else 'GCS port (6379 by default)'
    answer = speaks_grpc(*hp)
    if answer is None:
        raise BadInput("options", "--ray", f"nothing accepts a connection at {hp[0]}:{hp[1]} within "
                       f"{CONNECT_TIMEOUT_S:g} s (is the head running, and is that its {port_name}?)")
    if not answer:
        raise BadInput("options", "--ray", f"what listens at {hp[0]}:{hp[1]} does not answer as Ray does (gRPC over "
                       f"HTTP/2) within {CONNECT_TIMEOUT_S:g} s: is that the head's {port_name}?")
    if AUTH_MODE not in environ and has_token(environ, home):
        environ[AUTH_MODE] = "token"  # Ray sends the token to an explicit address only when told to
    return text
