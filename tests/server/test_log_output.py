"""``meta.server.log_output`` and the ``meta-server --log-*`` options: a log file rotated by
size or reopened after logrotate moved it, and JSON lines that keep control characters out."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meta.server.log_output import JsonFormatter, LogOutput
from meta.server.main import log_output, parse_arguments

REPO = Path(__file__).resolve().parents[2]


def private_logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"tests.log_output.{name}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger


def test_size_rotation_keeps_the_backups_asked_for(tmp_path):
    path = tmp_path / "broker.log"
    handler = LogOutput(path=str(path), max_bytes=1000, backups=2).handler()
    logger = private_logger("rotation", handler)
    try:
        for number in range(200):
            logger.info("line %03d %s", number, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    names = sorted(entry.name for entry in tmp_path.iterdir())
    assert names == ["broker.log", "broker.log.1", "broker.log.2"]
    assert all((tmp_path / name).stat().st_size <= 1000 for name in names)
    assert "line 199" in path.read_text()


def test_reopen_follows_a_file_moved_by_logrotate(tmp_path):
    path = tmp_path / "broker.log"
    handler = LogOutput(path=str(path), reopen=True).handler()
    logger = private_logger("reopen", handler)
    try:
        logger.info("before")
        os.rename(path, tmp_path / "broker.log.1")
        logger.info("after")
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert "before" in (tmp_path / "broker.log.1").read_text()
    assert "after" in path.read_text() and "before" not in path.read_text()


def test_json_lines_carry_the_fields_and_no_raw_control_character():
    formatter = JsonFormatter()
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = logging.LogRecord(
            "meta.server", logging.WARNING, __file__, 1, "key %r\x1b[31m", ("a\nb",), None
        )
        record.exc_info = sys.exc_info()
    line = formatter.format(record)
    assert "\n" not in line and "\x1b" not in line
    document = json.loads(line)
    assert document["level"] == "WARNING" and document["logger"] == "meta.server"
    assert document["message"] == "key 'a\\nb'\\x1b[31m"
    assert document["time"].endswith("Z")
    assert "ValueError: bad\\x0avalue" in document["exception"]


def test_the_text_format_still_escapes_messages(tmp_path):
    path = tmp_path / "broker.log"
    handler = LogOutput(path=str(path)).handler()
    logger = private_logger("text", handler)
    try:
        logger.warning("peer sent %s", "a\rb")
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert path.read_text().endswith(" WARNING tests.log_output.text: peer sent a\\x0db\n")


def test_the_options_make_the_log_output():
    arguments = parse_arguments(
        ["-f", "s.ini", "--log-file", "b.log", "--log-max-bytes", "10", "--log-format", "json"]
    )
    assert log_output(arguments) == LogOutput(path="b.log", max_bytes=10, backups=5, json=True)
    assert log_output(parse_arguments(["-f", "s.ini"])) == LogOutput()


@pytest.mark.parametrize(
    "options",
    [
        ["--log-max-bytes", "10"],
        ["--log-reopen"],
        ["--log-file", "b", "--log-max-bytes", "9", "--log-reopen"],
        ["--log-file", "b", "--log-backups", "0"],
    ],
)
def test_options_that_cannot_work_together_are_refused(options, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_arguments(["-f", "s.ini", *options])
    assert exited.value.code == 2
    assert "--log-" in capsys.readouterr().err


def test_the_options_send_the_log_to_the_file_as_json_lines(tmp_path):
    """``configure_logging`` with the parsed options: the root log goes to the file, as JSON."""
    path = tmp_path / "broker.log"
    code = (
        "import logging; from meta.server.main import configure_logging, log_output, "
        "parse_arguments;"
        f"a = parse_arguments(['-f', 'x', '--log-file', {str(path)!r}, '--log-format', 'json']);"
        "configure_logging('INFO', log_output(a));"
        "logging.getLogger('meta.server').info('serving \\x07')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
    (line,) = path.read_text().splitlines()
    assert json.loads(line)["message"] == "serving \\x07"
