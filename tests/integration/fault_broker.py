"""A real broker process whose segment files start failing when a trigger file appears.

``python -m tests.integration.fault_broker --fail-when PATH [--refuse-cut] -f server.ini``
runs ``meta.server.main`` with a file layer that, once ``PATH`` exists, makes every
``fsync`` of a segment file (``*.meta``) fail with EIO, as a failing disk does; with
``--refuse-cut`` a truncation of a segment file fails with EIO too (a disk that refuses the
cut back to the acknowledged end as well). Writes still land in the page cache, so a
restart of the process reads them back, as after a disk error that cleared.

The test removes ``PATH`` (the disk is fixed) before it restarts the broker.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

import meta.store.manager
from meta.server.main import main
from meta.store.files import Files


def failing_files(trigger: str, refuse_cut: bool) -> type[Files]:
    class FailingFiles(Files):
        def fsync(self, fd: int) -> None:
            if os.path.exists(trigger) and _is_segment(fd):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            super().fsync(fd)

        def truncate(self, fd: int, size: int) -> None:
            if refuse_cut and os.path.exists(trigger) and _is_segment(fd):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            super().truncate(fd, size)

    return FailingFiles


def _is_segment(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".meta")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fail-when", required=True, metavar="PATH")
    parser.add_argument("--refuse-cut", action="store_true")
    arguments, rest = parser.parse_known_args()
    meta.store.manager.Files = failing_files(arguments.fail_when, arguments.refuse_cut)
    sys.exit(main(rest))
