"""The optional compiled build: the broker's hot path compiled with mypyc.

Package metadata and dependencies live in setup.cfg; this file only adds extension modules,
and only when the environment asks for them::

    METAQ_COMPILE=1 python setup.py build_ext --inplace

compiles the modules of ``meta.compiled.COMPILED_MODULES`` in place, next to their sources,
with mypyc (it needs ``mypy``, a C compiler, Python's headers and the package's
dependencies installed, since mypyc type-checks what the modules import), and builds the
slave's record check (``RECORD_CHECK``, plain C against ISA-L: ``libisal-dev``). Without
``METAQ_COMPILE=1`` the package is pure Python, as always. docs/performance.md, "The compiled
build", gives its cost and what it saves.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILE_VARIABLE = "METAQ_COMPILE"
# The C compiler's optimization level (mypyc's opt_level, 0-3): 0 builds quicker, for tests.
OPT_LEVEL_VARIABLE = "METAQ_COMPILE_OPT_LEVEL"


SOURCE_DIGESTS: dict = {}
"""Each compiled module's name -> the SHA-256 of its source as mypyc read it (``extensions``),
recorded beside its extension once the build succeeded (``BuildExtensions``)."""


def extensions() -> list:
    """mypyc's extension modules and the record check when ``METAQ_COMPILE=1``, else none."""
    if os.environ.get(COMPILE_VARIABLE, "0") != "1":
        return []
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mypyc.build import mypycify

    from meta.compiled import COMPILED_MODULES, GROUP_NAME, source_digest

    paths = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    # Read before mypyc does: a source edited while the build runs is then found stale.
    SOURCE_DIGESTS.update(
        (name, source_digest(path)) for name, path in zip(COMPILED_MODULES, paths, strict=True)
    )
    opt_level = os.environ.get(OPT_LEVEL_VARIABLE, "3")
    return mypycify(paths, opt_level=opt_level, group_name=GROUP_NAME) + [RECORD_CHECK]


class BuildExtensions(build_ext):
    """``build_ext`` that, once every extension is built, records beside each compiled
    module's extension the digest of the source it was compiled from
    (``meta.compiled.stale_modules`` compares the checkout's sources with it)."""

    def run(self) -> None:
        super().run()
        if not SOURCE_DIGESTS:
            return
        from meta.compiled import write_built_digest

        for name, digest in SOURCE_DIGESTS.items():
            write_built_digest(self.get_ext_fullpath(name), name, digest)


RECORD_CHECK = Extension("meta.slave._record_crc", ["meta/slave/_record_crc.c"], libraries=["isal"])
"""The slave's walk of a batch and its CRC check without the GIL (``meta.slave.record_check``)."""

setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtensions})
