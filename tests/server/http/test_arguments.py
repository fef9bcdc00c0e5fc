"""``meta-server``'s HTTP options: ``--http [FILE]`` and Java's ``-FjettyBroker=FILE``."""

from __future__ import annotations

import pytest

from meta.config import HttpConfig, load_http_config
from meta.errors import ConfigError
from meta.server.main import parse_arguments


def test_http_is_off_without_the_option():
    assert parse_arguments(["-f", "s.ini"]).http is None


def test_http_without_a_file_means_the_defaults():
    assert parse_arguments(["-f", "s.ini", "--http"]).http == ""


def test_the_plugin_form_names_the_properties_file():
    arguments = parse_arguments(["-f", "s.ini", "-FjettyBroker=conf/jettyBroker.properties"])
    assert arguments.http == "conf/jettyBroker.properties"


def test_both_plugins_can_be_given():
    arguments = parse_arguments(["-f", "s.ini", "-Fmetaslave=a", "-FjettyBroker=b"])
    assert (arguments.slave, arguments.http) == ("a", "b")


def test_the_plugin_form_and_the_option_must_agree(capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["-f", "s.ini", "-FjettyBroker=a", "--http", "b"])
    assert "name different files" in capsys.readouterr().err


def test_the_properties_file_gives_the_port_and_defaults_to_8080(tmp_path):
    path = tmp_path / "jettyBroker.properties"
    path.write_text("# comment\nserverPort = 9090\n")
    assert load_http_config(str(path)) == HttpConfig(server_port=9090)
    path.write_text("")
    assert load_http_config(str(path)).server_port == 8080


def test_an_unknown_key_in_the_properties_file_is_an_error(tmp_path):
    path = tmp_path / "jettyBroker.properties"
    path.write_text("serverport=9090\n")
    with pytest.raises(ConfigError, match="serverport"):
        load_http_config(str(path))
