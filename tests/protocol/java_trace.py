"""Loads ../shared/spec/java-client-wire-trace.log: the Java client talking to the Java broker.

Each entry is (connection, direction, bytes); direction is ">" (client to broker) or "<".
Frames the trace shows truncated (ending in ``...``) are returned with ``truncated=True``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

TRACE_PATH = Path(__file__).resolve().parents[3] / "shared" / "spec" / "java-client-wire-trace.log"
_LINE = re.compile(r"^\S+ c(\d+)([<>])B (\d+) (b.*?)( \.\.\.)?$")


@dataclass(frozen=True)
class Frame:
    connection: int
    direction: str
    length: int
    data: bytes
    truncated: bool


def load_trace(path: Path = TRACE_PATH) -> list[Frame]:
    frames = []
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if match:
            connection, direction, length, literal, dots = match.groups()
            data = ast.literal_eval(literal)
            frames.append(Frame(int(connection), direction, int(length), data, dots is not None))
    return frames
