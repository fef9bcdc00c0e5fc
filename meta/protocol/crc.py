"""The CRC-32 of every checksum metaq-py computes: the one place that chooses its implementation.

``crc32(data, value=0) -> int`` is the IEEE CRC-32 of zlib (the same function as
``zlib.crc32`` and Java's ``java.util.zip.CRC32``: same polynomial, same result, same
continuation through ``value``), taken from **zlib-ng** (``zlib_ng.zlib_ng.crc32``, a
dependency of the package) and from the stdlib's ``zlib`` only when zlib-ng cannot be
imported on a platform. Every message, record, journal, checkpoint and recover-store checksum
imports ``crc32`` from here, so the choice is made once and a test can run the whole
protocol on either implementation.

Why zlib-ng: ``python -m meta.bench.crc`` times zlib, zlib-ng and isal (ISA-L) in one run
on the project's record sizes. On the 2-core development VM (CPU ms per MiB checked, best of
20 rounds): one call per 1 KiB payload 0.55 / 0.22 / 0.21, per 4 KiB payload 0.34 / 0.10 /
0.12, per 16 KiB payload 0.31 / 0.08 / 0.10, one call over 1 MiB 0.29 / 0.07 / 0.08; only on
100-byte payloads, where the call itself dominates, is isal ahead (1.5 vs 1.6 ms per MiB).
zlib-ng ties isal on the 1 KiB message and leads on everything larger.

One check computes its CRCs elsewhere: the async slave's check of a fetched batch, when the
install built its C extension (``meta.slave.record_check``), calls ISA-L's
``crc32_gzip_refl`` (the same values; the library ``isal`` wraps) over the whole batch with the
GIL released.

``IMPLEMENTATION`` names the implementation in use (``"zlib-ng"`` or ``"zlib"``). Pure and
thread-safe.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTATION", "crc32"]

try:
    from zlib_ng.zlib_ng import crc32

    IMPLEMENTATION = "zlib-ng"
except ImportError:  # No zlib-ng wheel for this platform: the stdlib's, same results.
    from zlib import crc32

    IMPLEMENTATION = "zlib"
