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

Two plain C extensions (``C_EXTENSIONS``) are built by every install that has a C compiler,
with or without mypyc: the slave's record check (``record_check``, from
``meta.slave.record_check.IMPLEMENTATION``) and the group-commit flusher's C thread
(``flush_thread``, from ``meta.store.native_flush.IMPLEMENTATION``). ``stale_modules``
covers them too, against their ``.c`` sources.

``log_build`` is what the broker logs at start-up. Importing this module imports nothing of
the broker; ``compiled_modules``, ``describe`` and ``stale_modules`` import the modules they
look at. Any thread.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
from pathlib import Path

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

C_EXTENSIONS = {
    "meta.store._flush_worker": ("meta/store/_flush_worker.c", ()),
    "meta.slave._record_crc": ("meta/slave/_record_crc.c", ("isal",)),
}
"""The plain C extensions, by module name: (source, libraries). Every install builds them
when it can (``setup.py``; optional there, required with ``METAQ_COMPILE=1``): the
group-commit flusher's C thread and the slave's record check."""

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


def _built_extension(name: str) -> str | None:
    """The extension module ``name`` is imported from, or None when it would come from a
    source or is not there. Imports only its parent packages."""
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        return None
    origin = spec.origin if spec is not None else None
    return origin if _is_extension(origin) else None


def stale_modules() -> list[str]:
    """Built modules (mypyc's and the C extensions) whose source is not what the build read:
    its bytes differ from the digest the build recorded, or the build recorded none (an
    older build).

    A module whose source is missing (an installed build without its sources) has nothing
    to compare and is not stale.
    """
    sources = {name: name.replace(".", "/") + ".py" for name in COMPILED_MODULES} | {
        name: source for name, (source, _) in C_EXTENSIONS.items()
    }
    stale = []
    for name, relative in sources.items():
        extension = _built_extension(name)
        if extension is None:
            continue
        # An in-place build leaves each extension beside its source.
        try:
            digest = source_digest(os.path.join(os.path.dirname(extension), Path(relative).name))
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
C_REBUILD_COMMAND = ".venv/bin/python setup.py build_ext --inplace"
"""The in-place build of the C extensions alone (``C_EXTENSIONS``), as every install does."""


def stale_message(stale: list[str]) -> str:
    """What the suite and the broker say of the ``stale`` modules: which, and how to rebuild
    (the compiled build when one of them is mypyc's, else the C extensions alone)."""
    command = REBUILD_COMMAND if set(stale) & set(COMPILED_MODULES) else C_REBUILD_COMMAND
    return (
        f"modules built from other sources than the checkout's: {', '.join(stale)}; "
        f"rebuild them ({command}) or delete meta/**/*.so"
    )


def flush_thread() -> str:
    """Which thread runs the group-commit flusher's system calls: ``C thread (GIL never
    taken)`` when the build made its extension, else ``Python thread``."""
    return importlib.import_module("meta.store.native_flush").IMPLEMENTATION


def log_build(log: logging.Logger) -> None:
    """Log which build runs (``describe``, ``record_check``, ``flush_thread``), and warn of
    compiled modules whose sources changed since the build (``stale_modules``): what the
    broker says when it starts."""
    log.info("build: %s", describe())
    log.info("slave record check: %s", record_check())
    log.info("group-commit flusher: %s", flush_thread())
    stale = stale_modules()
    if stale:
        log.warning("%s", stale_message(stale))
