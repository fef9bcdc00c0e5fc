"""``autoSyncMasterConfig``: the slave takes its master's ``server.ini``.

How (``meta.slave.replicator`` drives it): when ``ids/B/master_config_checksum`` differs from
the checksum last synced (and once after start-up), the slave sends ``stats config`` to its
master; the reply body is the master's ``server.ini``. ``merge_master_config``
builds the slave's new file from it, keeping what belongs to the slave's machine (below);
when that differs from the slave's file, ``write_merged_config`` validates it, writes it to
a temporary file and renames it over the slave's ``server.ini``, and the replicator applies
it as a reload (``Broker.reload``): topic sections take effect at once, ``[system]`` changes
at the next restart (the reload logs each one).

Kept from the slave's own file (``SLAVE_SYSTEM_KEYS``): ``[system]`` ``brokerId``,
``hostName``, ``serverPort``, ``dashboardHttpPort``, ``dashboardAdminTokenFile`` (a path
on the slave's machine), ``dataPath``, ``dataLogPath`` and ``appClassPath``; the whole
``[zookeeper]`` section; and in each topic section, ``dataPath`` (the slave's own value when
its file has that section with one, else the key is dropped so the topic lives under the
slave's ``dataPath``). Everything else is the master's, so a
restarted slave rolls segments at the master's ``maxSegmentSize`` and keeps byte identity.
The merged file keeps the master's lines and comments in their order; a kept setting takes
the place of the master's line of the same key, under the master's comment on it.

Departure from Java, which writes the master's file over its own verbatim (so at the next
restart a Java slave would take the master's port and paths) and only when the topic
sections differ: here the merged file is written whenever its settings differ from the slave's
file (the order of lines and comments aside).

Invariants: the slave's file is replaced atomically (``os.replace``) or not at all; a merged
file that does not load is never written. Thread affinity: ``merge_master_config`` is pure;
``write_merged_config`` does blocking file I/O (run it in a thread).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from meta.config import BrokerConfig, load_config
from meta.config.reload import ReloadOutcome, reload_outcome
from meta.config.sections import parse_ini_text
from meta.errors import ConfigError

SLAVE_SYSTEM_KEYS = (
    "brokerId",
    "hostName",
    "serverPort",
    "dashboardHttpPort",
    "dashboardAdminTokenFile",
    "dataPath",
    "dataLogPath",
    "appClassPath",
)
"""``[system]`` keys that stay the slave's own."""
SLAVE_TOPIC_KEYS = ("dataPath",)
"""Topic keys that stay the slave's own."""
ZOOKEEPER_SECTION = "zookeeper"
SYSTEM_SECTION = "system"

Section = tuple[str | None, list[str]]


def _sections(text: str) -> list[Section]:
    """``[(name or None for the lines before any header, lines including the header)]``."""
    sections: list[Section] = [(None, [])]
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            sections.append((stripped[1:-1].strip(), [line]))
        else:
            sections[-1][1].append(line)
    return sections


def _key(line: str) -> str | None:
    stripped = line.strip()
    if not stripped or stripped[0] in "#;[" or "=" not in stripped:
        return None
    return stripped.split("=", 1)[0].strip()


def _with_own_keys(master: list[str], own: list[str], keys: tuple[str, ...]) -> list[str]:
    """The master's section with the slave's lines of ``keys``: each where the master's line
    of that key stood (under the master's comment on it), the ones the master's section
    lacks right after its header; a key of ``keys`` the slave's section lacks is dropped."""
    own_lines: dict[str, list[str]] = {}
    for line in own:
        key = _key(line)
        if key in keys:
            own_lines.setdefault(key, []).append(line)
    body: list[str] = []
    for line in master[1:]:
        key = _key(line)
        if key in keys:
            body += own_lines.pop(key, [])
        else:
            body.append(line)
    rest = [line for line in own if _key(line) in own_lines]
    return [master[0], *rest, *body]


def merge_master_config(master_text: str, own_text: str) -> str:
    """The slave's new ``server.ini``: the master's file with the slave's own settings.

    Args:
        master_text: the master's ``server.ini`` (the ``stats config`` reply).
        own_text: the slave's current ``server.ini``.

    Returns:
        The merged text (lines as in the inputs, ``\\n``-terminated).
    """
    own = {name: lines for name, lines in _sections(own_text) if name is not None}
    merged: list[str] = []
    for name, lines in _sections(master_text):
        if name == ZOOKEEPER_SECTION and name in own:
            merged += own[name]
        elif name == SYSTEM_SECTION:
            merged += _with_own_keys(lines, own.get(name, []), SLAVE_SYSTEM_KEYS)
        elif name is not None and name.startswith("topic="):
            merged += _with_own_keys(lines, own.get(name, []), SLAVE_TOPIC_KEYS)
        else:
            merged += lines
    if ZOOKEEPER_SECTION in own and not any(
        name == ZOOKEEPER_SECTION for name, _ in _sections(master_text)
    ):
        merged += ["", *own[ZOOKEEPER_SECTION]]
    return "\n".join(merged) + "\n"


def _same_settings(merged: str, own_text: str, path: str) -> bool:
    """Whether both texts hold the same sections and values (order and comments aside)."""
    try:
        return parse_ini_text(path, merged) == parse_ini_text(path, own_text)
    except ConfigError:
        return False


@dataclass(frozen=True)
class SyncResult:
    """What ``write_merged_config`` did: ``reread`` is the written file, loaded for a reload
    (None when the slave's file already was the merged text); ``outcome`` what it changes."""

    reread: BrokerConfig | None
    outcome: ReloadOutcome | None


def write_merged_config(master_bytes: bytes, running: BrokerConfig) -> SyncResult:
    """Merge the master's file into ``running.path`` and write it if it differs (blocking).

    Raises:
        ConfigError: the master's file is not UTF-8 text, or the merged file does not load
            (nothing is written then); OSError: the slave's file cannot be read or written.
    """
    path = running.path
    try:
        master_text = master_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"the master's server.ini is not UTF-8: {error}") from None
    with open(path, encoding="utf-8") as file:
        own_text = file.read()
    merged = merge_master_config(master_text, own_text)
    if merged == own_text or _same_settings(merged, own_text, path):
        return SyncResult(None, None)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".server.ini.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(merged)
            file.flush()
            os.fsync(file.fileno())
        load_config(temporary, None, topic_defaults=running)  # never write what does not load
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    reread = load_config(path, None, topic_defaults=running)
    return SyncResult(reread, reload_outcome(running, reread))
