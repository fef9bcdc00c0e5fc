"""The code blocks of the README and of ``docs/*.md``, as the README test runs them.

Pure: reads Markdown text, touches no file and no process. A fenced block whose info string
is ``sh`` or ``python`` is an example the test runs. ``sh not-run`` or ``python not-run``
marks one that cannot run against a single local broker (it starts or stops the services
itself, needs a Spark cluster or another machine); the test counts those per file, so the
list cannot grow unnoticed. Blocks with any other info string, or none (transcripts of a
shell session with ``$`` prompts and their output, diagrams, YAML), are text, never run.

The examples name the addresses ``tools/metaServer.sh start local`` uses: ZooKeeper at
``127.0.0.1:2181`` and the broker at ``127.0.0.1:8123``. ``with_addresses`` replaces them with
those of the test's own ZooKeeper and broker, in the text it runs, never in the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["RUN_LANGUAGES", "Block", "blocks", "with_addresses"]

RUN_LANGUAGES = ("sh", "python")
NOT_RUN = "not-run"
LOCAL_ZOOKEEPER = "127.0.0.1:2181"
LOCAL_BROKER_HOST = "127.0.0.1"
LOCAL_BROKER_PORT = 8123

_FENCE = re.compile(r"^(`{3,})(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string's words, its first line number (1-based), its text."""

    words: tuple[str, ...]
    line: int
    text: str

    @property
    def language(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def runs(self) -> bool:
        """An ``sh`` or ``python`` block without the ``not-run`` mark."""
        return self.language in RUN_LANGUAGES and NOT_RUN not in self.words[1:]

    @property
    def not_run(self) -> bool:
        """An ``sh`` or ``python`` block marked ``not-run``."""
        return self.language in RUN_LANGUAGES and NOT_RUN in self.words[1:]


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order.

    Raises:
        ValueError: a fence is never closed, or a block marks itself in a way not defined
            here (a ``not-run`` on another language, or an unknown word after ``sh``/``python``).
    """
    found: list[Block] = []
    lines = markdown.split("\n")
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, info = opening.groups()
        end = index + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        if end == len(lines):
            raise ValueError(f"line {index + 1}: the code block is never closed")
        block = Block(tuple(info.split()), index + 1, "\n".join(lines[index + 1 : end]) + "\n")
        _check_marks(block)
        found.append(block)
        index = end + 1
    return found


def _check_marks(block: Block) -> None:
    extra = block.words[1:]
    if block.language in RUN_LANGUAGES and extra not in ((), (NOT_RUN,)):
        raise ValueError(f"line {block.line}: unknown words after {block.language}: {extra}")
    if block.language not in RUN_LANGUAGES and NOT_RUN in extra:
        raise ValueError(f"line {block.line}: {NOT_RUN} marks only sh and python blocks")


def with_addresses(text: str, zookeeper: str, broker_host: str, broker_port: int) -> str:
    """``text`` with the local ZooKeeper and broker addresses replaced by the given ones."""
    broker = f"{broker_host}:{broker_port}"
    text = text.replace(LOCAL_ZOOKEEPER, zookeeper)
    text = text.replace(f"{LOCAL_BROKER_HOST}:{LOCAL_BROKER_PORT}", broker)
    return text.replace(
        f"/dev/tcp/{LOCAL_BROKER_HOST}/{LOCAL_BROKER_PORT}", f"/dev/tcp/{broker_host}/{broker_port}"
    )
