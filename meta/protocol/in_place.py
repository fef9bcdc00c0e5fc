"""``BlockPool``: the blocks a decoder receives large ``value`` bodies into, kept for reuse.

With ``value_in_place`` (the slave's connections) ``codec.Decoder`` receives a large value
body into one ``bytearray`` of its announced length, which the ``Data`` carries. The pool
keeps the last ``kept`` such blocks and hands one of the same length out again once nothing
else references it (``sys.getrefcount``): a body handed out is never overwritten while anyone
can still read it, and a steady replay allocates (and page-faults) no fresh memory.

The reference count this reads depends on how the counting code holds its references, so
it is measured (``unshared``) and compared by the same interpreted code: this module stays
pure Python in the compiled build (``meta.compiled``), where compiled code may hold a
reference differently. Not thread-safe: one pool per decoder.
"""

from __future__ import annotations

import sys


class BlockPool:
    """In-place body blocks handed out, newest last, at most ``kept`` of them."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._blocks: list[bytearray] = []
        probe = [bytearray(1)]
        self._unshared = sys.getrefcount(probe[0])  # what ``take`` sees of an unshared one

    def take(self, length: int) -> bytearray:
        """A ``bytearray`` of ``length`` bytes: a kept one that nothing but this pool
        references any more (its old bytes get overwritten), else a new one."""
        blocks = self._blocks
        for index in range(len(blocks)):
            if len(blocks[index]) == length and sys.getrefcount(blocks[index]) <= self._unshared:
                blocks.append(blocks.pop(index))
                return blocks[-1]
        blocks.append(bytearray(length))
        if len(blocks) > self._kept:
            del blocks[0]
        return blocks[-1]
