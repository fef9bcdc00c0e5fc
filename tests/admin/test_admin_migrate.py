"""``meta-admin migrate-java-data``: a Java journal is moved aside only when nothing is pending.

Offline: the Java files are written by ``tests.tx.java_journal_files``; no broker, no ZooKeeper.
"""

from __future__ import annotations

import json

import pytest

from meta.admin.main import main
from meta.protocol.message import pack_message
from meta.tx.records import FILE_MAGIC
from tests.tx.java_journal_files import (
    LOCAL_COMMIT,
    XA_PREPARE,
    append,
    attachment_entry,
    operation,
    write_journal,
)


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(["migrate-java-data", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def moved(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("transactions"))


def test_an_empty_java_journal_is_moved_aside_and_kept(tmp_path, capsys):
    write_journal(tmp_path, {1: b""})
    status, out, _ = run(capsys, str(tmp_path))
    assert status == 0
    (name,) = moved(tmp_path)
    assert name.startswith("transactions.java.") and "-" not in name
    assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["checkpoint.1", "redo.1"]
    assert f"aside to {tmp_path / name}" in out


def test_a_prepared_transaction_refuses_and_changes_nothing(tmp_path, capsys):
    xid = "XID:1:6774:6271"
    write_journal(tmp_path, {1: append(xid, "orders", 0, b"x") + operation(XA_PREPARE, xid)})
    status, out, _ = run(capsys, str(tmp_path))
    assert status == 1
    assert moved(tmp_path) == ["transactions"]
    assert f"prepared XA transaction {xid}" in out
    assert "Start the Java broker" in out


def test_a_committed_batch_missing_from_its_segment_refuses(tmp_path, capsys):
    batch = pack_message(1, 0, b"lost")
    entry = attachment_entry("orders", 0, 0, batch)
    write_journal(
        tmp_path,
        {1: append("TX:a:1", "orders", 0, b"lost") + operation(LOCAL_COMMIT, "TX:a:1", entry)},
    )
    status, out, _ = run(capsys, str(tmp_path), "--json")
    assert status == 1
    document = json.loads(out)
    assert document["action"] == "refused"
    assert document["incomplete_batches"][0]["partition"] == "orders-0"


def test_segments_are_looked_for_under_each_data_path(tmp_path, capsys):
    batch = pack_message(1, 0, b"kept")
    data = tmp_path / "elsewhere"
    (data / "orders-0").mkdir(parents=True)
    (data / "orders-0" / f"{0:020d}.meta").write_bytes(batch)
    entry = attachment_entry("orders", 0, 0, batch)
    journal = append("TX:a:1", "orders", 0, b"kept") + operation(LOCAL_COMMIT, "TX:a:1", entry)
    write_journal(tmp_path, {1: journal})
    assert run(capsys, str(tmp_path), "--dry-run")[0] == 1
    status, out, _ = run(capsys, str(tmp_path), "--data-path", str(data), "--dry-run")
    assert status == 0 and "--dry-run" in out
    assert moved(tmp_path) == ["transactions"]


def test_an_open_unprepared_transaction_is_reported_as_rolled_back(tmp_path, capsys):
    write_journal(tmp_path, {1: append("TX:a:9", "orders", 0, b"x")})
    status, out, _ = run(capsys, str(tmp_path))
    assert status == 0
    assert "open transaction TX:a:9: rolled back" in out


def test_a_metaq_py_journal_is_left_alone(tmp_path, capsys):
    (tmp_path / "transactions").mkdir()
    (tmp_path / "transactions" / "redo.1").write_bytes(FILE_MAGIC)
    status, out, _ = run(capsys, str(tmp_path))
    assert (status, moved(tmp_path)) == (0, ["transactions"])
    assert "already a metaq-py journal" in out


def test_a_directory_without_a_journal_has_nothing_to_do(tmp_path, capsys):
    status, out, _ = run(capsys, str(tmp_path))
    assert status == 0 and "nothing moved" in out


def test_a_file_of_unknown_kind_is_named_and_nothing_moves(tmp_path, capsys):
    (tmp_path / "transactions").mkdir()
    (tmp_path / "transactions" / "redo.1").write_bytes(b"garbage!")
    status, _, err = run(capsys, str(tmp_path))
    assert status == 2
    assert "redo.1 is neither a Java nor a metaq-py journal file" in err
    assert moved(tmp_path) == ["transactions"]


def test_a_missing_directory_is_a_usage_error(tmp_path, capsys):
    status, _, err = run(capsys, str(tmp_path / "nope"))
    assert status == 2 and "is not a directory" in err


def test_help_names_the_directory_and_every_option(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for text in ("usage: meta-admin migrate-java-data", "DIR", "--data-path", "--dry-run"):
        assert text in out
