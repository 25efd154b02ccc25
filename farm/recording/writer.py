"""Writing one episode directory, crash-consistently.

:class:`EpisodeWriter` does the file work synchronously:

* ``episode.json`` is written to a temporary file, fsynced and renamed over
  (readers see the old or the new version, never a mix);
* each ``steps.jsonl`` record is one complete line, written with a single
  ``write`` on an ``O_APPEND`` descriptor, then fsynced; a write that fails
  half-way is cut back (``ftruncate``) to the last complete line when possible,
  and in any case readers ignore a torn last line;
* a frame is written (temp file, fsync, rename) *before* the first line that
  references it, so no complete line ever names a frame that is not on disk.

All file operations go through a :class:`FileOps` object, so tests can inject
failures (``ENOSPC``) without a full disk. After any failure the writer is
*failed*: every later call raises :class:`RecordingFailed` at once and nothing
else is written for that episode.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from typing import Any

import numpy as np

from farm.recording import format as F
from farm.recording.errors import RecordingError
from farm.recording.frames import encode_png


class RecordingFailed(RecordingError):
    """Writing an episode failed (disk full, permissions, ...); its recording stopped."""


class FileOps:
    """The file layer of the writer (replace methods in tests to inject failures)."""

    def open_append(self, path: str) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write_file(self, path: str, data: bytes, *, fsync: bool) -> None:
        """Write ``path`` atomically (temp file in the same directory, then rename)."""
        tmp = f"{path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = self.write(fd, view)
                if n <= 0:
                    raise OSError(errno.EIO, "write returned 0", tmp)
                view = view[n:]
            if fsync:
                self.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=False)


class EpisodeWriter:
    """Writes one episode directory ``ROOT/<episode_id>`` (see module doc)."""

    def __init__(
        self, root: str, meta: F.EpisodeMeta, *, fsync: bool = True, ops: FileOps | None = None
    ) -> None:
        self.root = root
        self.meta = meta
        self.path = os.path.join(root, meta.episode_id)
        self.fsync = fsync
        self.ops = ops or FileOps()
        self.failed: str | None = None
        self.ended = False
        self.lines = 0
        self.bytes_written = 0
        self._fd: int | None = None
        self._offset = 0
        self._frames: set[str] = set()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Create the directory, ``episode.json`` and an empty ``steps.jsonl``."""
        self._guard()
        try:
            os.makedirs(self.root, exist_ok=True)
            self.ops.makedirs(self.path)
            os.mkdir(os.path.join(self.path, F.FRAMES_DIR))
            if not self.meta.host:
                self.meta.host = socket.gethostname()
            self.meta.pid = self.meta.pid or os.getpid()
            self._write_meta()
            self._fd = self.ops.open_append(os.path.join(self.path, F.STEPS_FILE))
            if self.fsync:
                self.ops.fsync_dir(self.path)
                self.ops.fsync_dir(self.root)
        except OSError as e:
            self._fail(f"cannot create episode directory {self.path}: {e}")

    def append(self, record: dict[str, Any], frames: dict[str, np.ndarray] | None = None) -> None:
        """Write the frames ``record`` references, then ``record`` as one line."""
        self._guard()
        if self._fd is None:
            raise RecordingFailed(f"episode {self.meta.episode_id} was not started or is closed")
        try:
            new = [h for h in (frames or {}) if h not in self._frames]
            for h in new:
                assert frames is not None
                data = encode_png(frames[h])
                self.ops.write_file(F.frame_path(self.path, h), data, fsync=self.fsync)
                self.bytes_written += len(data)
                self._frames.add(h)
            if new and self.fsync:
                self.ops.fsync_dir(os.path.join(self.path, F.FRAMES_DIR))
            line = F.dumps_line(record)
        except OSError as e:
            self._fail(f"cannot write a frame of {self.path}: {e}")
        except (TypeError, ValueError) as e:
            self._fail(f"cannot encode a record of {self.path}: {e}")
        self._write_line(line)

    def end(self, record: dict[str, Any]) -> None:
        """Append the end record, store the summary in ``episode.json``, close."""
        self.append(record)
        self.ended = True
        self.meta.end = {k: v for k, v in record.items() if k != "type"}
        try:
            self._write_meta()
        except OSError as e:
            # the end line is on disk, which is what readers trust; episode.json lags
            self._fail(f"cannot update {F.META_FILE} of {self.path}: {e}")
        finally:
            self.close()

    def append_late(self, record: dict[str, Any]) -> None:
        """Append a record (an annotation) after :meth:`end`: the file is reopened."""
        self._guard()
        if self._fd is not None:
            self.append(record)
            return
        try:
            self._fd = self.ops.open_append(os.path.join(self.path, F.STEPS_FILE))
        except OSError as e:
            self._fail(f"cannot reopen {self.path}: {e}")
        try:
            self._write_line(F.dumps_line(record))
        finally:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                self.ops.close(fd)

    # ------------------------------------------------------------ internals

    def _guard(self) -> None:
        if self.failed is not None:
            raise RecordingFailed(self.failed)

    def _fail(self, message: str) -> None:
        self.failed = message
        self.close()
        raise RecordingFailed(message)

    def _write_meta(self) -> None:
        data = json.dumps(self.meta.to_json(), indent=1, ensure_ascii=False).encode() + b"\n"
        self.ops.write_file(os.path.join(self.path, F.META_FILE), data, fsync=self.fsync)

    def _write_line(self, line: bytes) -> None:
        assert self._fd is not None
        try:
            n = self.ops.write(self._fd, line)
            if n != len(line):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(line)} bytes)")
            if self.fsync:
                self.ops.fsync(self._fd)
        except OSError as e:
            # cut a torn line back so the file ends with a complete record
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._offset)
            self._fail(f"cannot append to {os.path.join(self.path, F.STEPS_FILE)}: {e}")
        self._offset += len(line)
        self.lines += 1
        self.bytes_written += len(line)
