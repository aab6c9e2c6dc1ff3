"""An exclusive lock on one run of one database, held by the process that writes the run.

Two processes continuing the same run at once would both issue its next sequence numbers and
one would die on duplicate ids; the second is refused up front. The lock is `flock` on a file
beside the database, so the kernel releases it when its holder dies, even by `kill -9`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from soakgate.errors import StoreError, UsageError


class RunLock:
    """`with RunLock(db, run_id):` holds the run for this process, or raises UsageError."""

    def __init__(self, db: Path, run_id: str) -> None:
        self.run_id = run_id
        self.path = db.with_name(f"{db.name}.{run_id}.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; UsageError naming the holder when another process has it."""
        while self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot lock run {self.run_id} ({self.path}): {exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise UsageError(
                    f"run {self.run_id} is being written by another soakgate process "
                    f"(pid {holder}); let it finish or stop it first"
                ) from None
            if self._same_file(fd):
                self._fd = fd
            else:  # the holder released and removed it between our open and our lock
                os.close(fd)
        with contextlib.suppress(OSError):  # the pid is only for the message
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def _same_file(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Give the lock up and remove its file."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
