"""Reading ini sections by a key table, and the errors that name file, section and key.

``Source`` names where values come from; ``parse_ini_text`` splits ini text into sections
(ini4j's trimming rules); ``read_keys`` converts one section by its table
(``meta.config.keys``) and refuses unknown keys with a "did you mean" (``closest``);
``with_defaults`` fills the table defaults; ``apply_overrides`` writes command-line overrides
into the sections. These raise ``ConfigError`` with the full context and log ignored keys under
``meta.config``. Pure (no file I/O); thread-safe.
"""

from __future__ import annotations

import configparser
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from meta.config.grammars import parse_path
from meta.config.keys import KeySpec, convert_value
from meta.errors import ConfigError

# Warnings about a configuration belong to the configuration package's logger.
_config_log = logging.getLogger("meta.config")


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
        if not known:
            raise ConfigError(f"{where} unknown key '{key}' (this file takes no keys)")
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
