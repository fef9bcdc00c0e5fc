"""Broadcast consumers' local offset file (zk spec §3.4)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from meta.client.cluster import Partition
from meta.client.consume.local_offsets import LocalOffsetStorage, default_path, java_path
from meta.errors import ClientError


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / ".meta_offsets")


def test_load_from_a_missing_file_finds_nothing(path):
    assert LocalOffsetStorage(path).load("t", "g", Partition(0, 0)) is None


def test_load_from_an_empty_file_finds_nothing(path):
    open(path, "w").close()
    assert LocalOffsetStorage(path).load("t", "g", Partition(0, 0)) is None


def test_commit_then_load_returns_msg_id_and_offset(path):
    storage = LocalOffsetStorage(path)
    storage.commit("g", [("t", Partition(0, 1), 2048, -5)])
    assert storage.load("t", "g", Partition(0, 1)) == (-5, 2048)


def test_commit_writes_javas_json_shape(path):
    LocalOffsetStorage(path).commit("g", [("t", Partition(0, 1), 123, -1)])
    with open(path, encoding="utf-8") as file:
        text = file.read()
    assert json.loads(text) == {
        "g": [
            {
                "topic": "t",
                "partition": {"brokerId": 0, "partition": 1},
                "offset": 123,
                "messageId": -1,
                "modified": False,
            }
        ]
    }
    assert text.startswith('{"g":[{"topic":"t","partition":{"brokerId":0,"partition":1},')


def test_commit_preserves_a_second_group_already_in_the_file(path):
    LocalOffsetStorage(path).commit("other", [("t", Partition(1, 0), 10, 1)])
    LocalOffsetStorage(path).commit("g", [("t", Partition(1, 0), 99, 2)])
    storage = LocalOffsetStorage(path)
    assert storage.load("t", "other", Partition(1, 0)) == (1, 10)
    assert storage.load("t", "g", Partition(1, 0)) == (2, 99)


def test_commit_replaces_only_the_entries_it_names(path):
    storage = LocalOffsetStorage(path)
    storage.commit("g", [("t", Partition(0, 0), 1, 1), ("t", Partition(0, 1), 2, 2)])
    storage.commit("g", [("t", Partition(0, 1), 20, 3)])
    assert storage.load("t", "g", Partition(0, 0)) == (1, 1)
    assert storage.load("t", "g", Partition(0, 1)) == (3, 20)
    with open(path, encoding="utf-8") as file:
        assert len(json.load(file)["g"]) == 2


def test_commit_of_nothing_does_not_create_the_file(path):
    LocalOffsetStorage(path).commit("g", [])
    assert not os.path.exists(path)


def test_commit_leaves_no_temporary_file(path, tmp_path):
    LocalOffsetStorage(path).commit("g", [("t", Partition(0, 0), 1, 1)])
    assert sorted(os.listdir(tmp_path)) == [".meta_offsets", ".meta_offsets.lock"]


def test_commit_replaces_the_file_atomically_by_rename(path, monkeypatch):
    """Goal: the old file stays whole until the new one is complete. Method: record replace."""
    storage = LocalOffsetStorage(path)
    storage.commit("g", [("t", Partition(0, 0), 1, 1)])
    calls = []
    real_replace = os.replace

    def recording_replace(source, target):
        with open(target, encoding="utf-8") as file:
            calls.append((source, json.load(file)["g"][0]["offset"]))
        with open(source, encoding="utf-8") as file:
            calls.append((source, json.load(file)["g"][0]["offset"]))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", recording_replace)
    storage.commit("g", [("t", Partition(0, 0), 2, 2)])
    temporary = f"{path}.tmp.{os.getpid()}"
    assert calls == [(temporary, 1), (temporary, 2)]


def test_a_java_file_without_message_ids_loads_with_msg_id_minus_one(path):
    with open(path, "w", encoding="utf-8") as file:
        file.write('{"g":[{"topic":"t","partition":{"brokerId":2,"partition":3},"offset":"77"}]}')
    assert LocalOffsetStorage(path).load("t", "g", Partition(2, 3)) == (-1, 77)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"g": 5}',
        '{"g": [{"topic": "t"}]}',
        '{"g": [{"topic": "t", "partition": {"brokerId": 0, "partition": 0}, "offset": "x"}]}',
    ],
)
def test_a_corrupt_file_raises_naming_the_path(path, content):
    with open(path, "w", encoding="utf-8") as file:
        file.write(content)
    with pytest.raises(ClientError) as raised:
        LocalOffsetStorage(path).load("t", "g", Partition(0, 0))
    assert path in str(raised.value)


def test_commit_over_a_corrupt_file_raises_and_keeps_it(path):
    with open(path, "w", encoding="utf-8") as file:
        file.write("{not json")
    with pytest.raises(ClientError, match="not JSON"):
        LocalOffsetStorage(path).commit("g", [("t", Partition(0, 0), 1, 1)])
    with open(path, encoding="utf-8") as file:
        assert file.read() == "{not json"


def test_a_failed_write_raises_and_removes_the_temporary_file(tmp_path):
    missing_directory = str(tmp_path / "missing" / ".meta_offsets")
    with pytest.raises(ClientError, match="cannot write local offsets file"):
        LocalOffsetStorage(missing_directory).commit("g", [("t", Partition(0, 0), 1, 1)])
    assert os.listdir(tmp_path) == []


def test_commit_fsyncs_the_file_and_then_its_directory(path, tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(descriptor):
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    LocalOffsetStorage(path).commit("g", [("t", Partition(0, 0), 1, 1)])
    assert synced == [f"{path}.tmp.{os.getpid()}", str(tmp_path)]


def test_concurrent_commits_of_two_storages_keep_both_groups(path):
    """Goal: storages sharing a file never lose each other's groups. Method: 2 threads x 50."""
    first, second = LocalOffsetStorage(path), LocalOffsetStorage(path)

    def commit_many(storage, group):
        for offset in range(50):
            storage.commit(group, [("t", Partition(0, 0), offset, offset)])

    threads = [
        threading.Thread(target=commit_many, args=(first, "a")),
        threading.Thread(target=commit_many, args=(second, "b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert first.load("t", "a", Partition(0, 0)) == (49, 49)
    assert first.load("t", "b", Partition(0, 0)) == (49, 49)


# --- sharing files with the Java client and with other processes ------------------------------

REPO = Path(__file__).resolve().parents[3]
WRITER = """
import json, os, sys
from meta.client.cluster import Partition
from meta.client.consume.local_offsets import LocalOffsetStorage, default_path, java_path
kind, group, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "java":
    # Java's LocalOffsetStorage: the whole file rewritten from memory, no merge, no lock.
    memory = {group: []}
    for offset in range(count):
        memory[group] = [{"topic": "t", "partition": {"brokerId": 0, "partition": 0},
                          "offset": offset, "messageId": -1, "modified": False}]
        with open(java_path() + ".tmp", "w") as file:
            json.dump(memory, file)
        os.replace(java_path() + ".tmp", java_path())
else:
    storage = LocalOffsetStorage(default_path(), fallback_path=java_path())
    for offset in range(count):
        storage.commit(group, [("t", Partition(0, offset % 4), offset, offset)])
"""


def run_writers(tmp_path, *writers: tuple[str, str, int]) -> None:
    """Start every writer process at once (HOME is ``tmp_path``) and wait for all of them."""
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=str(REPO))
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, kind, group, str(count)], env=env)
        for kind, group, count in writers
    ]
    assert [process.wait(timeout=120) for process in processes] == [0] * len(processes)


def test_the_default_file_is_our_own_and_javas_file_is_only_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    java = tmp_path / ".meta_offsets"
    java.write_text(
        '{"g":[{"topic":"t","partition":{"brokerId":0,"partition":0},"offset":42,'
        '"messageId":-1,"modified":false}]}'
    )
    before = java.read_bytes()
    storage = LocalOffsetStorage(default_path(), fallback_path=java_path())
    assert storage.path == str(tmp_path / ".metaq-py_offsets")
    assert storage.load("t", "g", Partition(0, 0)) == (-1, 42)
    storage.commit("g", [("t", Partition(0, 0), 99, 7)])
    assert storage.load("t", "g", Partition(0, 0)) == (7, 99)
    assert java.read_bytes() == before


def test_a_java_writer_rewriting_its_file_never_erases_python_entries(tmp_path):
    """Goal: a Java broadcast consumer and a Python one on the same host, committing at the
    same time, each keep every entry. Method: a process rewriting ``~/.meta_offsets`` from
    memory as Java does, beside a Python process committing 200 times."""
    run_writers(tmp_path, ("java", "g-java", 300), ("python", "g-py", 200))
    ours = LocalOffsetStorage(str(tmp_path / ".metaq-py_offsets"))
    assert [ours.load("t", "g-py", Partition(0, n)) for n in range(4)] == [
        (196, 196),
        (197, 197),
        (198, 198),
        (199, 199),
    ]
    java = LocalOffsetStorage(str(tmp_path / ".meta_offsets"))
    assert java.load("t", "g-java", Partition(0, 0)) == (-1, 299)
    assert java.load("t", "g-py", Partition(0, 0)) is None


def test_two_python_processes_on_one_file_keep_each_others_entries(tmp_path):
    """Without the file lock, one process's rename overwrites a merge the other just made."""
    run_writers(tmp_path, ("python", "a", 150), ("python", "b", 150))
    storage = LocalOffsetStorage(str(tmp_path / ".metaq-py_offsets"))
    for group in ("a", "b"):
        assert storage.load("t", group, Partition(0, 1)) == (149, 149)
