"""Which build of the broker's hot path runs: modules compiled with mypyc, or pure Python.

``COMPILED_MODULES`` names the modules the optional compiled build compiles (``setup.py``
compiles them when ``METAQ_COMPILE=1``; docs/performance.md, "The compiled build"): the
per-read path of a put, from the transport's read and the protocol's ``dataReceived``
through the decoder, the put rules and the store's append to the reply. Every one of them
is also the pure-Python module it is compiled from, and the broker behaves the same with
either; only the CPU per request differs. The broker logs at start-up which build it runs
(``describe``).

A module is compiled when it was imported from an extension module (``*.so``) rather than
from its source. An in-place build leaves the extensions next to the sources, and Python
imports an extension before a source of the same name, so a source edited after the build
is not what runs until the build is redone: ``stale_modules`` names those. The build records
the SHA-256 of each source it compiled beside the module's extension
(``write_built_digest``); a module is stale when its source's bytes differ from that record,
whatever the files' times (a rebase or a checkout that rewrites a source with the same bytes
leaves the build current).

The same build makes the slave's record check a C extension (``record_check``, from
``meta.slave.record_check.IMPLEMENTATION``).

``log_build`` is what the broker logs at start-up. Importing this module imports nothing of
the broker; ``compiled_modules``, ``describe`` and ``stale_modules`` import the modules they
look at. Any thread.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import logging
import os

COMPILED_MODULES = (
    "meta.message_id",
    "meta.protocol.codec",
    "meta.server.protocol",
    "meta.server.put_run",
    "meta.server.puts",
    "meta.server.reply_batch",
    "meta.server.request_stats",
    "meta.server.transport",
    "meta.store.append",
    "meta.store.group_commit",
    "meta.store.partition",
    # Synchronous replication: a master's forward and reply, a gregor slave's sync.
    "meta.protocol.put_reply",
    "meta.protocol.sync_frame",
    "meta.server.sync_run",
    "meta.sync.gregor",
    "meta.sync.samsa",
    "meta.sync.samsa_outcome",
    "meta.sync.slave_link",
)
"""The modules of the compiled build, in the order ``setup.py`` passes them to mypyc."""

GROUP_NAME = "metaq_compiled"
"""mypyc's name for the build: their code is in one library, the module ``GROUP_NAME +
"__mypyc"``, and each module's own extension is a small shim that loads it from there."""


def _is_extension(path: str | None) -> bool:
    return path is not None and path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> list[str]:
    """The modules of ``COMPILED_MODULES`` that run compiled (imported from an extension)."""
    return [
        name
        for name in COMPILED_MODULES
        if _is_extension(getattr(importlib.import_module(name), "__file__", None))
    ]


BUILT_DIGEST_SUFFIX = ".built-sha256"
"""The file beside a compiled module's extension that holds the SHA-256 (hex) of the source
it was compiled from: ``codec.built-sha256`` beside ``codec.cpython-311-x86_64-linux-gnu.so``."""


def source_digest(source: str) -> str:
    """The SHA-256 (hex) of the file ``source``'s bytes.

    Raises:
        OSError: the file cannot be read.
    """
    with open(source, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def built_digest_path(extension: str, name: str) -> str:
    """Where the digest of module ``name``'s source is recorded, beside its ``extension``."""
    return os.path.join(os.path.dirname(extension), name.rsplit(".", 1)[-1] + BUILT_DIGEST_SUFFIX)


def write_built_digest(extension: str, name: str, digest: str) -> None:
    """Record ``digest`` (``source_digest`` of the source as the build read it) as the source
    module ``name``'s ``extension`` was compiled from; ``setup.py`` calls it after a build."""
    with open(built_digest_path(extension, name), "w", encoding="ascii") as file:
        file.write(digest + "\n")


def stale_modules() -> list[str]:
    """Compiled modules whose source is not what the build compiled: its bytes differ from
    the digest the build recorded, or the build recorded none (an older build).

    A module whose source is missing (an installed build without its sources) has nothing
    to compare and is not stale.
    """
    stale = []
    for name in compiled_modules():
        extension = importlib.import_module(name).__file__
        assert extension is not None  # compiled_modules found it
        source = os.path.join(os.path.dirname(extension), name.rsplit(".", 1)[1] + ".py")
        try:
            digest = source_digest(source)
        except OSError:
            continue  # no source: nothing to compare
        try:
            with open(built_digest_path(extension, name), encoding="ascii") as file:
                built = file.read().strip()
        except OSError:
            built = None  # built before digests were recorded: what it compiled is unknown
        if built != digest:
            stale.append(name)
    return stale


def describe() -> str:
    """The build, as the broker logs it: ``compiled (mypyc, 18 of 18 modules)`` or ``pure
    Python``; a partial build names the modules that run from source."""
    compiled = compiled_modules()
    if not compiled:
        return "pure Python"
    text = f"compiled (mypyc, {len(compiled)} of {len(COMPILED_MODULES)} modules)"
    missing = [name for name in COMPILED_MODULES if name not in compiled]
    if missing:
        text += "; from source: " + ", ".join(missing)
    return text


def record_check() -> str:
    """Which CRC check of a fetched batch the async slave runs: ``C (ISA-L crc32_gzip_refl,
    GIL released)`` when the build made its extension, else ``pure Python``."""
    return importlib.import_module("meta.slave.record_check").IMPLEMENTATION


REBUILD_COMMAND = "METAQ_COMPILE=1 .venv/bin/python setup.py build_ext --inplace"
"""The in-place compiled build, as docs/performance.md ("The compiled build") gives it."""


def stale_message(stale: list[str]) -> str:
    """What the suite and the broker say of the ``stale`` modules: which, and how to rebuild."""
    return (
        f"compiled modules built from other sources than the checkout's: {', '.join(stale)}; "
        f"rebuild them ({REBUILD_COMMAND}) or delete meta/**/*.so"
    )


def log_build(log: logging.Logger) -> None:
    """Log which build runs (``describe``, ``record_check``), and warn of compiled modules
    whose sources changed since the build (``stale_modules``): what the broker says when it
    starts."""
    log.info("build: %s", describe())
    log.info("slave record check: %s", record_check())
    stale = stale_modules()
    if stale:
        log.warning("%s", stale_message(stale))
