"""``samsa_master.properties`` and ``gregor_slave.properties``, and the HA roles on the command
line: Java's keys and plug-in names, with the errors Java does not give (an unknown key, a
value <= 0, a ``slave`` that is not one ``host:port``, roles that cannot be combined)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meta.config import GregorConfig, SamsaConfig, load_gregor_config, load_samsa_config
from meta.errors import ConfigError
from meta.server.main import parse_arguments

CONF = Path(__file__).resolve().parents[2] / "conf"


def _samsa(tmp_path: Path, text: str) -> SamsaConfig:
    path = tmp_path / "samsa_master.properties"
    path.write_text(text)
    return load_samsa_config(str(path))


def test_the_shipped_files_load():
    samsa = load_samsa_config(str(CONF / "samsa_master.properties"))
    assert samsa.slave_address == ("127.0.0.1", 8124)
    gregor = load_gregor_config(str(CONF / "gregor_slave.properties"))
    assert gregor == GregorConfig(master="127.0.0.1:8123")


def test_java_defaults_fill_the_optional_keys(tmp_path):
    samsa = _samsa(tmp_path, "slave=10.0.0.2:8123\n")
    assert samsa == SamsaConfig(slave="10.0.0.2:8123")
    assert (samsa.send_to_slave_timeout_ms, samsa.slave_failure_threshold) == (2000, 100)
    assert (samsa.check_slave_interval_ms, samsa.recover_offset) == (100, False)
    assert samsa.syncs_in_flight_max == 10_000


def test_max_syncs_in_flight_is_read_and_must_be_positive(tmp_path):
    assert _samsa(tmp_path, "slave=h:1\nmaxSyncsInFlight=7\n").syncs_in_flight_max == 7
    with pytest.raises(ConfigError):
        _samsa(tmp_path, "slave=h:1\nmaxSyncsInFlight=0\n")


def test_every_java_key_is_read(tmp_path):
    samsa = _samsa(
        tmp_path,
        "slave = [::1]:9000\ncallbackThreadCount=4\nsendToSlaveTimeoutInMills=500\n"
        "slaveContinuousFailureThreshold=3\ncheckSlaveIntervalInMills=50\n"
        "recoverOffset=true\nrecoverParallel=false\nrecoverParallelHint=2\n",
    )
    assert samsa.slave_address == ("::1", 9000)
    assert samsa.callback_thread_count == 4
    assert (samsa.send_to_slave_timeout_ms, samsa.slave_failure_threshold) == (500, 3)
    assert (samsa.check_slave_interval_ms, samsa.recover_offset) == (50, True)
    assert (samsa.recover_parallel, samsa.recover_parallel_hint) == (False, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "required key 'slave'"),
        ("slave=\n", "required key 'slave' is blank"),
        ("slave=a:1,b:2\n", "must be one host:port"),
        ("slave=a:1 b:2\n", "must be one host:port"),
        ("slave=host\n", "must be one host:port"),
        ("slave=host:0\n", "port out of range"),
        ("slave=host:70000\n", "port out of range"),
        ("slave=h:1\nsendToSlaveTimeoutInMills=0\n", "sendToSlaveTimeoutInMills='0'"),
        ("slave=h:1\nslaveContinuousFailureThreshold=-1\n", "slaveContinuousFailureThreshold"),
        ("slave=h:1\ncheckSlaveIntervalInMills=0\n", "checkSlaveIntervalInMills"),
        ("slave=h:1\nslaves=h:2\n", "unknown key 'slaves'"),
    ],
)
def test_a_bad_samsa_file_names_the_file_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as raised:
        _samsa(tmp_path, text)
    assert "samsa_master.properties" in str(raised.value)
    assert message in str(raised.value)


def test_a_gregor_file_names_its_master_and_optionally_a_secret(tmp_path):
    path = tmp_path / "gregor_slave.properties"
    path.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="required key 'master' is missing"):
        load_gregor_config(str(path))
    path.write_text("master=master.example\n")
    assert load_gregor_config(str(path)) == GregorConfig(master="master.example")
    path.write_text("master=[::1]:8123\nsyncSecret= s3cret \n")
    gregor = load_gregor_config(str(path))
    assert (gregor.master, gregor.sync_secret) == ("[::1]:8123", "s3cret")
    assert "s3cret" not in repr(gregor)
    for wrong in ("a b", "h:0", "h:x", "a,b"):
        path.write_text(f"master={wrong}\n")
        with pytest.raises(ConfigError, match="must be one host or host:port"):
            load_gregor_config(str(path))
    path.write_text("master=h\nslave=h:1\n")
    with pytest.raises(ConfigError, match="unknown key 'slave'"):
        load_gregor_config(str(path))


def test_a_samsa_file_may_carry_a_sync_secret(tmp_path):
    samsa = _samsa(tmp_path, "slave=10.0.0.2:8123\nsyncSecret=s3cret\n")
    assert samsa.sync_secret == "s3cret"
    assert "s3cret" not in repr(samsa)


def test_the_plugin_forms_name_the_files():
    arguments = parse_arguments(["-f", "s.ini", "-Fsamsa=conf/samsa_master.properties"])
    assert (arguments.samsa, arguments.gregor) == ("conf/samsa_master.properties", None)
    arguments = parse_arguments(["-f", "s.ini", "-Fgregor=g.properties", "--http"])
    assert (arguments.gregor, arguments.http) == ("g.properties", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["-Fsamsa=a", "--gregor", "b"],
        ["--samsa", "a", "--slave", "b"],
        ["-Fgregor=a", "-Fmetaslave=b"],
    ],
)
def test_roles_that_cannot_be_combined_are_refused(capsys, argv):
    with pytest.raises(SystemExit) as raised:
        parse_arguments(["-f", "s.ini", *argv])
    assert raised.value.code == 2
    assert "cannot be combined" in capsys.readouterr().err
