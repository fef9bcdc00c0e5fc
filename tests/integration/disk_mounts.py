"""File systems that fail on purpose, for disk-fault tests: a small tmpfs that fills up and a
loop-mounted ext4 image that an injected error turns read-only (``errors=remount-ro``).

Mounting needs root and the kernel features; when the system refuses, the caller skips with
the reason the system gave. Every mount is undone when its ``with`` block ends, whatever
happened in it: the unmount is retried (bounded) and, as a last resort, made lazy.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

UNMOUNT_TRIES = 50
UNMOUNT_PAUSE_S = 0.1
COMMAND_TIMEOUT_S = 60


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def mount_or_skip(*command: str) -> None:
    """Run a mount command; skip the test, with the system's words, when it is refused."""
    if os.geteuid() != 0:
        pytest.skip("mounting a test file system needs root")
    done = run(*command)
    if done.returncode != 0:
        pytest.skip(f"the system refused `{' '.join(command)}`: {done.stderr.strip()}")


def unmount(point: Path) -> None:
    """Unmount ``point``, retrying while it is busy; lazily when it stays busy."""
    for _ in range(UNMOUNT_TRIES):
        if run("umount", str(point)).returncode == 0 or not os.path.ismount(point):
            return
        time.sleep(UNMOUNT_PAUSE_S)
    run("umount", "-l", str(point))


@contextlib.contextmanager
def tmpfs(point: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on the (existing, empty) directory ``point``."""
    mount_or_skip("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(point))
    try:
        yield point
    finally:
        unmount(point)


def grow_tmpfs(point: Path, size_bytes: int) -> None:
    """Make room on a full tmpfs, as an operator would."""
    done = run("mount", "-o", f"remount,size={size_bytes}", str(point))
    assert done.returncode == 0, done.stderr


@contextlib.contextmanager
def ext4_image(image: Path, point: Path, size_bytes: int) -> Iterator[Path]:
    """A fresh ext4 file system in the file ``image``, loop-mounted with errors=remount-ro.

    The caller unmounts and mounts it again (``remount_ext4``) to read it back as a restart
    after a repair would; the image is unmounted at the end whatever happened.
    """
    with open(image, "wb") as file:
        file.truncate(size_bytes)
    done = run("mkfs.ext4", "-q", "-F", str(image))
    if done.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {done.stderr.strip()}")
    mount_or_skip("mount", "-o", "loop,errors=remount-ro", str(image), str(point))
    try:
        yield point
    finally:
        unmount(point)


def trigger_ext4_error(point: Path) -> None:
    """Make the kernel record an ext4 error on the file system at ``point`` (it then turns
    read-only and aborts its journal); skip when the kernel has no such trigger."""
    source = run("findmnt", "-n", "-o", "SOURCE", str(point)).stdout.strip()
    trigger = Path("/sys/fs/ext4") / os.path.basename(source) / "trigger_fs_error"
    if not trigger.exists():
        pytest.skip(f"this kernel has no {trigger} to inject an ext4 error")
    trigger.write_text("metaq-py disk fault test\n")


def remount_ext4(image: Path, point: Path) -> None:
    """Unmount the failed file system and mount it again read-write (its journal replays)."""
    unmount(point)
    assert not os.path.ismount(point)
    done = run("mount", "-o", "loop,errors=remount-ro", str(image), str(point))
    assert done.returncode == 0, done.stderr
