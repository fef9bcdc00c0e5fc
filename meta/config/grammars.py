"""Value grammars of ``server.ini``: one function per grammar a key's value may follow.

What lives here: the safe integer-expression evaluator (Java evaluated int values with the
Aviator expression language, so ``1024*1024*1024`` is a valid size), the two boolean rules, the
``deletePolicy`` grammar, the ``deleteWhen`` check (a full Quartz parse by
``meta.config.cron``), the filter target shape (compatibility.md), paths, the ZooKeeper root
and one ``host:port``. ``meta.config.keys`` maps each key kind to one of them.

Invariants: every parser is pure and reads no file (``path`` values are resolved against the
home directory and the current working directory), and reports a bad value by raising
``ValueError`` with a short reason (``"not an integer"``); ``meta.config.sections`` adds the
file, section, key and value to it. No parser ever calls ``eval``. Thread-safe.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from meta.config.cron import CronError, QuartzCron
from meta.protocol.commands import LONG_MAX

JAVA_INT_MIN = -(2**31)
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MIN = -(2**63)

# An expression longer than this is refused before it is parsed: real values are short, and
# the bound keeps the parser and the big-integer arithmetic cheap whatever the file holds.
EXPRESSION_CHARS_MAX = 200

_MILLIS_PER_UNIT = {"s": 1000, "m": 60 * 1000, "h": 3600 * 1000}
_RETENTION_RE = re.compile(r"([0-9]+)([smh]?)")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_FILTER_TARGET_RE = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}(\.{_IDENTIFIER})*")


@dataclass(frozen=True)
class DeletePolicySpec:
    """A parsed ``deletePolicy``: what to do with a segment older than the retention time."""

    name: str  # "delete" or "archive"
    retention_ms: int  # a read-only segment whose mtime is older than this is processed
    compress: bool = False  # archive only: write X.meta.zip instead of renaming to X.meta.arc


def parse_int_expression(text: str) -> int:
    """Evaluate an Aviator-style integer expression such as ``1024*1024*1024``.

    Only integer literals, ``+ - * / // %``, unary minus/plus and parentheses are allowed;
    ``/`` must divide exactly, ``%`` follows Java (the sign of the dividend).

    Args:
        text: the value as written in the file.

    Returns:
        The integer value (range checks are the caller's).

    Raises:
        ValueError: the text is not such an expression, or divides by zero or inexactly.
    """
    text = text.strip()
    if len(text) > EXPRESSION_CHARS_MAX:
        raise ValueError(f"not an integer (longer than {EXPRESSION_CHARS_MAX} characters)")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError("not an integer") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.expr) -> int:
    """Evaluate one node of an integer expression; any other node kind is refused."""
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:  # bool is an int subclass: refuse True/False too
            raise ValueError("not an integer")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _evaluate(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if not isinstance(node, ast.BinOp):
        raise ValueError("not an integer")
    left = _evaluate(node.left)
    right = _evaluate(node.right)
    if isinstance(node.op, ast.Add):
        result = left + right
    elif isinstance(node.op, ast.Sub):
        result = left - right
    elif isinstance(node.op, ast.Mult):
        result = left * right
    elif isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
        result = _divide(node.op, left, right)
    else:
        raise ValueError("not an integer")
    # Bound every intermediate result so that a long chain of products stays cheap.
    if not JAVA_LONG_MIN <= result <= LONG_MAX:
        raise ValueError("not an integer (outside the Java long range)")
    return result


def _divide(operator: ast.operator, left: int, right: int) -> int:
    """Apply ``/``, ``//`` or ``%`` to integers, refusing a zero divisor."""
    if right == 0:
        raise ValueError("not an integer (division by zero)")
    if isinstance(operator, ast.FloorDiv):
        return left // right
    if isinstance(operator, ast.Mod):
        remainder = abs(left) % abs(right)
        return -remainder if left < 0 else remainder
    if left % right != 0:
        raise ValueError("not an integer (division has a remainder)")
    return left // right


def parse_bool(text: str) -> bool:
    """Parse ``true`` or ``false`` (any case), as Aviator evaluated boolean keys.

    Raises:
        ValueError: any other text.
    """
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("not a boolean (expected true or false)")
    return lowered == "true"


def parse_java_bool(text: str) -> bool:
    """Parse like Java ``Boolean.valueOf``: only ``true`` (any case) is true, never an error.

    Surrounding white space is ignored (Java would read ``"true "`` as false; ini4j trims).
    """
    return text.strip().lower() == "true"


def parse_delete_policy(text: str) -> DeletePolicySpec:
    """Parse ``delete,<N>[s|m|h]`` or ``archive,<N>[s|m|h][,<compress>]``.

    ``N`` without a suffix counts hours and must fit a Java int. Fields are stripped of white
    space; ``compress`` is read like Java ``Boolean.valueOf``.

    Returns:
        The policy name, retention in milliseconds and the archive compress flag.

    Raises:
        ValueError: an unknown policy name, a missing or malformed time, or extra fields.
    """
    fields = [field.strip() for field in text.split(",")]
    name = fields[0]
    if name not in ("delete", "archive"):
        raise ValueError(f"unknown delete policy {name!r} (expected 'delete' or 'archive')")
    if len(fields) < 2 or not fields[1]:
        raise ValueError(f"missing retention time (expected '{name},<N>[s|m|h]')")
    fields_max = 2 if name == "delete" else 3
    if len(fields) > fields_max:
        raise ValueError(f"too many fields for the {name!r} policy")
    match = _RETENTION_RE.fullmatch(fields[1])
    if match is None or int(match.group(1)) > JAVA_INT_MAX:
        raise ValueError(f"bad retention time {fields[1]!r} (expected <N>, <N>s, <N>m or <N>h)")
    retention_ms = int(match.group(1)) * _MILLIS_PER_UNIT[match.group(2) or "h"]
    compress = len(fields) == 3 and parse_java_bool(fields[2])
    return DeletePolicySpec(name=name, retention_ms=retention_ms, compress=compress)


def check_cron(text: str) -> str:
    """Check that ``text`` is a Quartz cron expression the retention schedule can run.

    The whole expression is translated (``meta.config.cron.QuartzCron``), so a bad
    ``deleteWhen`` stops start-up rather than the first retention run.

    Returns:
        The text, stripped.

    Raises:
        ValueError: the field count is wrong or a field is malformed; the reason names the
            field and the value.
    """
    try:
        QuartzCron(text)
    except CronError as error:
        raise ValueError(f"not a Quartz cron expression: {error.reason}") from None
    return text.strip()


def check_filter_target(text: str) -> str:
    """Check the ``package.module:callable`` shape of a server-side filter (no import).

    Raises:
        ValueError: the text does not have that shape.
    """
    target = text.strip()
    if _FILTER_TARGET_RE.fullmatch(target) is None:
        raise ValueError("not a filter target (expected 'package.module:callable')")
    return target


def parse_host_port(text: str) -> str:
    """Check one ``host:port`` (a samsa master's ``slave``); return it trimmed.

    The host is a name or an IPv4 address, or an IPv6 address in brackets; the port is
    1..65535. A list (``,`` or white space) is refused: a samsa master has exactly one slave.
    """
    value = text.strip()
    match = _HOST_PORT_RE.fullmatch(value)
    if match is None:
        raise ValueError("must be one host:port (e.g. 10.0.0.2:8123)")
    if not 1 <= int(match.group("port")) <= 65535:
        raise ValueError("port out of range (must be 1..65535)")
    return value


def parse_host_optional_port(text: str) -> str:
    """Check one ``host`` or ``host:port`` (a gregor slave's ``master``); return it trimmed."""
    value = text.strip()
    if _HOST_RE.fullmatch(value) is not None:
        return value
    try:
        return parse_host_port(value)
    except ValueError:
        raise ValueError("must be one host or host:port (e.g. 10.0.0.1:8123)") from None


_HOST_RE = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+")
_HOST_PORT_RE = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def parse_path(text: str) -> str:
    """Expand ``~`` and make the path absolute against the current working directory."""
    return os.path.abspath(os.path.expanduser(text.strip()))


def parse_zk_root(text: str) -> str:
    """Normalise like Java MetaZookeeper: add a leading "/", then drop one trailing "/".

    ``"/"`` becomes ``""``: the ZooKeeper root itself, so paths are ``root + "/brokers"``.
    """
    root = text.strip()
    root = root if root.startswith("/") else "/" + root
    return root[:-1] if root.endswith("/") else root


def check_delete_policy(text: str) -> str:
    """Validate a ``deletePolicy`` and return its text, stripped."""
    parse_delete_policy(text)
    return text.strip()
