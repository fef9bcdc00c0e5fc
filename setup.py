"""The package's extension modules: two small C extensions in every build, and the optional
compiled build of the broker's hot path with mypyc.

Package metadata and dependencies live in setup.cfg; this file only adds extension modules.

* Every install (``pip install -e .``, as ``tools/setup-env.sh`` runs it) builds the two
  plain C extensions of ``meta.compiled.C_EXTENSIONS`` when it can: the group-commit
  flusher's C thread (POSIX threads) and the slave's record check (against ISA-L: Debian's
  ``libisal-dev``). They are optional there: with
  no C compiler, no Python headers or no ISA-L the install goes on without them, and the
  broker runs the Python thread and the pure-Python check, with the same results.
* ``METAQ_COMPILE=1 python setup.py build_ext --inplace`` also compiles the modules of
  ``meta.compiled.COMPILED_MODULES`` in place, next to their sources, with mypyc (it needs
  ``mypy``, a C compiler, Python's headers and the package's dependencies installed, since
  mypyc type-checks what the modules import); there every extension is required.

docs/performance.md, "The compiled build", gives their cost and what they save.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILE_VARIABLE = "METAQ_COMPILE"
# The C compiler's optimization level (mypyc's opt_level, 0-3): 0 builds quicker, for tests.
OPT_LEVEL_VARIABLE = "METAQ_COMPILE_OPT_LEVEL"


SOURCE_DIGESTS: dict = {}
"""Each built module's name -> the SHA-256 of its source as the build read it
(``extensions``), recorded beside its extension once the build succeeded
(``BuildExtensions``)."""


def extensions() -> list:
    """The C extensions (optional unless ``METAQ_COMPILE=1``), and with ``METAQ_COMPILE=1``
    mypyc's extension modules before them."""
    compiling = os.environ.get(COMPILE_VARIABLE, "0") == "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from meta.compiled import C_EXTENSIONS, COMPILED_MODULES, GROUP_NAME, source_digest

    c_extensions = [
        Extension(name, [source], libraries=list(libraries), optional=not compiling)
        for name, (source, libraries) in C_EXTENSIONS.items()
    ]
    # Read before the compilers do: a source edited while the build runs is then found stale.
    SOURCE_DIGESTS.update(
        (name, source_digest(source)) for name, (source, _) in C_EXTENSIONS.items()
    )
    if not compiling:
        return c_extensions
    from mypyc.build import mypycify

    paths = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    SOURCE_DIGESTS.update(
        (name, source_digest(path)) for name, path in zip(COMPILED_MODULES, paths, strict=True)
    )
    opt_level = os.environ.get(OPT_LEVEL_VARIABLE, "3")
    return mypycify(paths, opt_level=opt_level, group_name=GROUP_NAME) + c_extensions


class BuildExtensions(build_ext):
    """``build_ext`` that, once the extensions are built, records beside each one the digest
    of the source it was built from
    (``meta.compiled.stale_modules`` compares the checkout's sources with it)."""

    def run(self) -> None:
        super().run()
        if not SOURCE_DIGESTS:
            return
        from meta.compiled import write_built_digest

        for name, digest in SOURCE_DIGESTS.items():
            extension = self.get_ext_fullpath(name)
            if os.path.exists(extension):  # an optional extension may not have built
                write_built_digest(extension, name, digest)


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtensions})
