"""A real broker process that kills itself (SIGKILL) at a chosen point of a commit.

``python -m tests.integration.crash_broker --crash-at POINT --batch-bytes N -f server.ini``
runs ``meta.server.main`` with a file layer that watches writes to segment files: the first
write of at least N bytes (a transaction's batch; single puts are smaller) triggers

* ``before-batch``: SIGKILL before any byte of the batch is written (the COMMIT record is
  already in the journal);
* ``mid-batch``: half of the batch is written, then SIGKILL (a torn append).

The kill is a real ``kill -9`` of this process, as an operator or the OOM killer would do.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import meta.store.manager
from meta.server.main import main
from meta.store.files import Files


def crashing_files(point: str, batch_bytes: int) -> type[Files]:
    class CrashingFiles(Files):
        def write(self, fd: int, data, position: int) -> int:
            if len(data) >= batch_bytes and _is_segment(fd):
                if point == "mid-batch":
                    os.pwrite(fd, bytes(data[: len(data) // 2]), position)
                os.kill(os.getpid(), signal.SIGKILL)
            return super().write(fd, data, position)

    return CrashingFiles


def _is_segment(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".meta")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crash-at", choices=["before-batch", "mid-batch"], required=True)
    parser.add_argument("--batch-bytes", type=int, required=True)
    arguments, rest = parser.parse_known_args()
    meta.store.manager.Files = crashing_files(arguments.crash_at, arguments.batch_bytes)
    sys.exit(main(rest))
