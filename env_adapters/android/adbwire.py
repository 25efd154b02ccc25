"""The adb transport protocol, device side: what the simulator speaks to a real adb server.

An adb server (``adb connect 127.0.0.1:PORT``) talks to a device over TCP in
*messages*: a 24-byte little-endian header (command, arg0, arg1, data length,
data checksum, magic = command ^ 0xffffffff) and a payload. The server opens
with ``CNXN`` (its version and largest payload); the device answers ``CNXN``
with its banner (``device::ro.product.model=...;features=...``), or first
``AUTH`` with a token for the server to sign (``auth="accept"``: any signature
is taken; ``"reject"``: none is, and the server shows the device ``unauthorized``). Streams:
``OPEN(host_id, 0, "shell:ls")`` -> ``OKAY(dev_id, host_id)``, then
``WRTE(dev_id, host_id, data)`` answered by ``OKAY`` each (one write in
flight per stream), and ``CLSE`` when the service is done. The banner leaves
out ``shell_v2``, so the server uses plain ``shell:`` (raw output, no exit
status), as adb does with old devices.

:class:`AdbWireServer` serves services given by a callable
``service(destination) -> bytes`` (the whole output; streamed in chunks of the
negotiated payload size). It is part of the test double
(:mod:`env_adapters.android.simulator`), not of the adapter.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable

A_SYNC = 0x434E5953
A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_STLS = 0x534C5453
A_VERSION = 0x01000001  # skips checksums (the server's version is at least this)
AUTH_TOKEN, AUTH_SIGNATURE, AUTH_RSAPUBLICKEY = 1, 2, 3
TOKEN_SIZE = 20
MAX_PAYLOAD = 256 * 1024
HEADER = struct.Struct("<6I")
NAMES = {
    A_SYNC: "SYNC",
    A_CNXN: "CNXN",
    A_AUTH: "AUTH",
    A_OPEN: "OPEN",
    A_OKAY: "OKAY",
    A_CLSE: "CLSE",
    A_WRTE: "WRTE",
    A_STLS: "STLS",
}

Service = Callable[[str], bytes]


def pack(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    """One message: header and payload."""
    check = sum(data) & 0xFFFFFFFF
    return HEADER.pack(command, arg0, arg1, len(data), check, command ^ 0xFFFFFFFF) + data


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def read_message(sock: socket.socket) -> tuple[int, int, int, bytes]:
    """(command, arg0, arg1, payload); ConnectionError on EOF or a corrupt header."""
    command, arg0, arg1, length, _check, magic = HEADER.unpack(_read_exactly(sock, HEADER.size))
    if magic != command ^ 0xFFFFFFFF or length > 16 * 1024 * 1024:
        raise ConnectionError(f"corrupt adb message header ({command:#x}, magic {magic:#x})")
    return command, arg0, arg1, _read_exactly(sock, length) if length else b""


class _Stream:
    def __init__(self, host_id: int, chunks: list[bytes]) -> None:
        self.host_id = host_id
        self.chunks = chunks


class _Connection:
    """One adb server's connection: the handshake, then streams until either side closes."""

    def __init__(self, server: AdbWireServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.maxdata = MAX_PAYLOAD
        self.online = False
        self.streams: dict[int, _Stream] = {}
        self.next_id = 1
        self.send_lock = threading.Lock()

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        with self.send_lock:
            self.sock.sendall(pack(command, arg0, arg1, data))

    def run(self) -> None:
        try:
            while True:
                command, arg0, arg1, data = read_message(self.sock)
                self.handle(command, arg0, arg1, data)
        except (OSError, ConnectionError):
            pass
        finally:
            self.server._forget(self)
            with contextlib.suppress(OSError):
                self.sock.close()

    def handle(self, command: int, arg0: int, arg1: int, data: bytes) -> None:
        if command == A_CNXN:
            self.maxdata = max(4096, min(arg1 or MAX_PAYLOAD, MAX_PAYLOAD))
            self.streams.clear()
            if self.server.auth == "none":
                self._online()
            else:  # ask for a signed token, as a device with adb authentication does
                self.send(A_AUTH, AUTH_TOKEN, 0, os.urandom(TOKEN_SIZE))
        elif command == A_AUTH and not self.online:
            if arg0 == AUTH_SIGNATURE and self.server.auth == "accept":
                self._online()  # a test double: any signature will do
            elif arg0 == AUTH_SIGNATURE:
                self.send(A_AUTH, AUTH_TOKEN, 0, os.urandom(TOKEN_SIZE))  # try another key
            # AUTH_RSAPUBLICKEY: a phone would ask its user; "reject" never answers
        elif command == A_OPEN and self.online:
            destination = data.rstrip(b"\0").decode(errors="replace")
            dev_id, self.next_id = self.next_id, self.next_id + 1
            if self.server.frozen.is_set():
                return  # a hung device: the host waits for ever
            try:
                output = self.server.service(destination)
            except Exception as e:  # noqa: BLE001 - a bug in the double: report it as output
                output = f"simulator error: {type(e).__name__}: {e}\n".encode()
            self.send(A_OKAY, dev_id, arg0)
            chunks = [output[i : i + self.maxdata] for i in range(0, len(output), self.maxdata)]
            stream = _Stream(arg0, chunks)
            self.streams[dev_id] = stream
            self._advance(dev_id, stream)
        elif command == A_OKAY:
            stream = self.streams.get(arg1)
            if stream is not None:
                self._advance(arg1, stream)
        elif command == A_WRTE:
            self.send(A_OKAY, arg1, arg0)  # input to a service: taken and ignored
        elif command == A_CLSE:
            self.streams.pop(arg1, None)
        # AUTH, STLS, SYNC and unknown commands: ignored (the server then sees no CNXN)

    def _online(self) -> None:
        self.online = True
        self.send(A_CNXN, A_VERSION, self.maxdata, self.server.banner())

    def _advance(self, dev_id: int, stream: _Stream) -> None:
        """Send the next chunk of a stream, or close it when all are acknowledged."""
        if stream.chunks:
            self.send(A_WRTE, dev_id, stream.host_id, stream.chunks.pop(0))
        else:
            self.streams.pop(dev_id, None)
            self.send(A_CLSE, dev_id, stream.host_id)


class AdbWireServer:
    """A device end of the adb transport on ``host:port`` (loopback) serving ``service``.

    ``banner`` is sent in answer to the server's ``CNXN``; with ``auth="accept"``
    the device first asks for a signed token (``AUTH``) and takes any signature,
    with ``auth="reject"`` it never takes one (the server lists it as
    ``unauthorized``), with ``"none"`` it answers ``CNXN`` at once. :meth:`disconnect`
    drops every connection and refuses new ones until :meth:`reconnect`
    (a device gone offline); :attr:`frozen` set makes the device accept
    streams and never answer them (a hung device).
    """

    def __init__(
        self,
        service: Service,
        banner: Callable[[], bytes],
        host: str = "127.0.0.1",
        port: int = 0,
        auth: str = "none",
    ) -> None:
        if auth not in ("none", "accept", "reject"):
            raise ValueError(f"auth must be none, accept or reject, got {auth!r}")
        self.service = service
        self.auth = auth
        self.banner = banner
        self.host = host
        self.port = port
        self.frozen = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(16)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._thread = threading.Thread(
            target=self._accept, args=(sock,), name=f"adb-sim-{self.port}", daemon=True
        )
        self._thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, sock)
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=conn.run, name="adb-sim-conn", daemon=True).start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._connections.discard(conn)

    def drop_connections(self) -> None:
        """Close every transport connection (the server sees the device go away)."""
        with self._lock:
            conns = list(self._connections)
            self._connections.clear()
        for c in conns:
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.sock.close()

    def disconnect(self) -> None:
        """Go offline: stop listening and drop the connections."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None
        self.drop_connections()

    def reconnect(self) -> None:
        """Come back on the same port after :meth:`disconnect`."""
        if self._listener is None:
            self.start()

    def close(self) -> None:
        self.frozen.clear()
        self.disconnect()
