"""Value parsers for ``meta/config.py``: one function per value grammar of ``server.ini``.

What lives here: the safe integer-expression evaluator (Java evaluated int values with the
Aviator expression language, so ``1024*1024*1024`` is a valid size), the two boolean rules, the
``deletePolicy`` grammar (spec section 4.8), the ``deleteWhen`` check (a full Quartz parse by
``meta.store.retention``), the filter target shape (DECISIONS 12), the closest-key suggestion, a
Java ``.properties`` reader, and ``KeySpec`` / ``convert_value``, which turn one raw ini value
into a typed, range-checked one.

Invariants: every parser is pure and reads no file (``path`` values are resolved against the
home directory and the current working directory), and reports a bad value by raising
``ValueError`` with a short reason (``"not an integer"``); ``meta/config.py`` adds the file,
section, key and value to it. No parser ever calls ``eval``. The section helpers at the end
(``Source``, ``parse_ini_text``, ``read_keys``, ``with_defaults``) are the exception: they raise
``ConfigError`` with the full context, and log ignored keys under ``meta.config``. Thread-safe.
"""

from __future__ import annotations

import ast
import configparser
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from meta.errors import ConfigError

# Warnings about a configuration belong to the configuration module's logger.
_config_log = logging.getLogger("meta.config")

JAVA_INT_MIN = -(2**31)
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MIN = -(2**63)
JAVA_LONG_MAX = 2**63 - 1

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
    if not JAVA_LONG_MIN <= result <= JAVA_LONG_MAX:
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
    """Parse ``delete,<N>[s|m|h]`` or ``archive,<N>[s|m|h][,<compress>]`` (spec section 4.8).

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

    The whole expression is translated (``meta.store.retention.QuartzCron``), so a bad
    ``deleteWhen`` stops start-up rather than the first retention run.

    Returns:
        The text, stripped.

    Raises:
        ValueError: the field count is wrong or a field is malformed; the reason names the
            field and the value.
    """
    # Imported here: meta.store.retention imports this module (DeletePolicySpec).
    from meta.store.retention import CronError, QuartzCron

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


def closest(word: str, candidates: list[str]) -> str:
    """Return the candidate with the smallest Levenshtein distance to ``word`` (Java's rule)."""
    return min(candidates, key=lambda candidate: (_edit_distance(word, candidate), candidate))


def _edit_distance(first: str, second: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions all cost one."""
    previous = list(range(len(second) + 1))
    for index, char in enumerate(first, start=1):
        current = [index]
        for other_index, other_char in enumerate(second, start=1):
            substitution = previous[other_index - 1] + (char != other_char)
            current.append(min(previous[other_index] + 1, current[-1] + 1, substitution))
        previous = current
    return previous[-1]


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """Read Java ``.properties`` text into ``(key, value, line_number)`` in file order.

    Supported: ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comment lines;
    blank lines; a line ending in an odd number of backslashes continues on the next line;
    the escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>``.
    """
    entries = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line_number = index + 1
        logical = lines[index].lstrip()
        index += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip()
            index += 1
        if _continues(logical):
            logical = logical[:-1]
        key, value = _split_property(logical)
        entries.append((_unescape(key), _unescape(value), line_number))
    return entries


def _continues(line: str) -> bool:
    """Return whether a properties line ends in an odd number of backslashes."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    """Split a logical properties line at the first unescaped ``=``, ``:`` or white space."""
    position = 0
    while position < len(line) and line[position] not in "=: \t\f":
        position += 2 if line[position] == "\\" else 1
    key = line[:position]
    rest = line[position:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE_RE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)", re.DOTALL)


def _unescape(text: str) -> str:
    """Undo properties escapes: ``\\uXXXX``, ``\\t`` and friends, ``\\<char>`` -> char."""

    def replace(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return _ESCAPE_RE.sub(replace, text)


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


def _check_delete_policy(text: str) -> str:
    """Validate a ``deletePolicy`` and return its text, stripped."""
    parse_delete_policy(text)
    return text.strip()


@dataclass(frozen=True)
class KeySpec:
    """One configuration key: the field it fills, its kind, default and bounds.

    ``default`` None means "absent" for ``str`` and ``path`` kinds, and "derived from other
    values" otherwise (``meta/config.py`` says from which). ``low`` / ``high`` None mean the
    Java int (``int``) or Java long (``long``) limits.
    """

    ini: str
    field: str
    kind: str  # a key of CONVERTERS
    default: object = None
    required: bool = False
    low: int | None = None
    high: int | None = None


CONVERTERS: dict[str, Callable[[str], object]] = {
    "int": parse_int_expression,
    "long": parse_int_expression,
    "bool": parse_bool,
    "java_bool": parse_java_bool,
    "str": str.strip,
    "path": parse_path,
    "zk_root": parse_zk_root,
    "delete_policy": _check_delete_policy,
    "cron": check_cron,
}
_BOUNDS = {"int": (JAVA_INT_MIN, JAVA_INT_MAX), "long": (JAVA_LONG_MIN, JAVA_LONG_MAX)}


def convert_value(spec: KeySpec, raw: str) -> object:
    """Convert a non-blank raw value by ``spec.kind`` and check integer bounds.

    Raises:
        ValueError: the value does not parse or is out of range.
    """
    value = CONVERTERS[spec.kind](raw)
    bounds = _BOUNDS.get(spec.kind)
    if bounds is not None:
        low = bounds[0] if spec.low is None else spec.low
        high = bounds[1] if spec.high is None else spec.high
        if not low <= value <= high:
            raise ValueError(f"out of range (must be {low}..{high})")
    return value


# --- Section helpers for meta/config.py: these raise ConfigError ---------------------------


@dataclass(frozen=True)
class Source:
    """Where values come from, to name it in errors: the file, and which keys were overridden."""

    display: str  # the path as the caller gave it
    path: str  # absolute
    overridden: frozenset[tuple[str, str]] = frozenset()

    def where(self, section: str | None, key: str | None = None) -> str:
        """Return ``"<file>: [<section>]"`` (``"<file>:"`` without a section)."""
        origin = self.display
        if section is not None and (section, key) in self.overridden:
            origin += f" (override '{section}.{key}')"
        return f"{origin}:" if section is None else f"{origin}: [{section}]"


def parse_ini_text(display: str, text: str) -> dict[str, dict[str, str]]:
    """Split ini text into ``{section: {key: raw value}}`` in file order.

    Lines are trimmed first, as ini4j does, so that configparser never reads an indented line
    as the continuation of a value. Duplicate sections and keys are errors.
    """
    parser = configparser.ConfigParser(
        interpolation=None, strict=True, empty_lines_in_values=False, default_section="\0"
    )
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # case-sensitive keys
    trimmed = "\n".join(line.strip() for line in text.splitlines())
    try:
        parser.read_string(trimmed, source=display)
    except configparser.Error as error:
        raise ConfigError(str(error)) from None  # its text names the file and the line
    sections: dict[str, dict[str, str]] = {}
    for name in parser.sections():
        if name.strip() in sections:
            raise ConfigError(f"{display}: duplicate section [{name.strip()}]")
        sections[name.strip()] = dict(parser.items(name))
    return sections


def read_keys(
    source: Source,
    section: str | None,
    items: Mapping[str, str],
    table: tuple[KeySpec, ...],
    ignored: frozenset[str] = frozenset(),
) -> dict[str, object]:
    """Convert the keys of one section by ``table``; return ``{field: value}`` of those given.

    A blank value counts as absent. Keys in ``ignored`` are logged and skipped.
    """
    known = {spec.ini: spec for spec in table}
    values: dict[str, object] = {}
    for key, raw in items.items():
        spec = known.get(key)
        if spec is None:
            _skip_ignored_key(source, section, key, list(known), ignored)
        elif raw.strip():
            try:
                values[spec.field] = convert_value(spec, raw)
            except ValueError as error:
                where = source.where(section, key)
                raise ConfigError(f"{where} {key}={raw.strip()!r}: {error}") from None
    for spec in table:
        if spec.required and spec.field not in values:
            state = "is blank" if spec.ini in items else "is missing"
            raise ConfigError(
                f"{source.where(section, spec.ini)} required key '{spec.ini}' {state}"
            )
    return values


def _skip_ignored_key(
    source: Source, section: str | None, key: str, known: list[str], ignored: frozenset[str]
) -> None:
    """Log a key that Java accepts without meaning; raise for any other unknown key."""
    where = source.where(section, key)
    if key not in ignored:
        suggestion = closest(key, known)
        raise ConfigError(f"{where} unknown key '{key}' (did you mean '{suggestion}'?)")
    _config_log.warning("%s key '%s' has no meaning here (Java accepts it); ignored", where, key)


def with_defaults(table: tuple[KeySpec, ...], given: dict[str, object]) -> dict[str, object]:
    """Merge the table defaults under the given values (a ``path`` default is resolved)."""
    values = {}
    for spec in table:
        default = spec.default
        if spec.kind == "path" and isinstance(default, str):
            default = parse_path(default)
        values[spec.field] = given.get(spec.field, default)
    return values


def apply_overrides(
    display: str, sections: dict[str, dict[str, str]], overrides: Mapping[str, str]
) -> set[tuple[str, str]]:
    """Write ``"section.key"`` overrides into ``sections``; return the (section, key) pairs.

    ``section`` is ``system``, ``zookeeper``, or the longest ``topic=NAME`` section of the file
    that prefixes the override (topic names may contain dots).
    """
    topic_sections = sorted(
        (name for name in sections if name.startswith("topic=")), key=len, reverse=True
    )
    overridden = set()
    for dotted, value in overrides.items():
        section = next((name for name in topic_sections if dotted.startswith(name + ".")), None)
        if section is None:
            section = dotted.partition(".")[0]
            if section not in ("system", "zookeeper") or "." not in dotted:
                raise ConfigError(
                    f"{display}: override '{dotted}' names no section (expected "
                    "'system.<key>', 'zookeeper.<key>' or 'topic=<NAME>.<key>')"
                )
        key = dotted[len(section) + 1 :]
        sections.setdefault(section, {})[key] = value
        overridden.add((section, key))
    return overridden
