"""Option parsing of the ``metaq`` source and sink (pure, no Spark session)."""

from __future__ import annotations

import pytest

from meta.client.cluster import Partition
from meta.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    parse_offsets,
    parse_read_options,
    parse_stream_options,
    parse_write_options,
)

ZK = {"zk.connect": "127.0.0.1:2181"}


def test_defaults_read_everything_from_the_meta_root():
    options = parse_read_options({**ZK, "topic": "t"})
    assert (options.topics, options.zk.root) == (("t",), "/meta")
    assert (options.starting, options.ending) == (EARLIEST, LATEST)
    assert options.max_bytes_per_partition is None
    assert not options.include_slaves


def test_option_names_are_case_insensitive():
    options = parse_read_options({"ZK.CONNECT": "h:1", "Topic": "t", "INCLUDESLAVES": "true"})
    assert options.include_slaves


def test_topics_takes_a_comma_list():
    assert parse_read_options({**ZK, "topics": "a, b,c"}).topics == ("a", "b", "c")


def test_topics_with_regex_characters_is_a_pattern():
    options = parse_read_options({**ZK, "topics": "logs-.*"})
    assert (options.topics, options.topic_pattern) == ((), "logs-.*")


def test_json_offsets_map_partitions_to_offsets():
    parsed = parse_offsets('{"t": {"1-0": 25, "2-3": -2}}', "startingOffsets")
    assert parsed == {"t": {Partition(1, 0): 25, Partition(2, 3): -2}}


@pytest.mark.parametrize(
    "text",
    ["{oops", "[1]", '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"1-0": -3}}', '{"t": {"1-0": "1"}}'],
)
def test_malformed_offsets_are_refused_naming_the_option(text):
    with pytest.raises(OptionError, match="malformed startingOffsets"):
        parse_offsets(text, "startingOffsets")


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"topic": "t"}, "zk.connect is required"),
        ({**ZK}, "exactly one of the options topic, topics and topicPattern"),
        ({**ZK, "topic": "t", "topics": "u"}, "exactly one of"),
        ({**ZK, "topic": "bad/name"}, "option topic"),
        ({**ZK, "topic": "t", "maxBytesPerPartition": "0"}, "maxBytesPerPartition must be"),
        ({**ZK, "topic": "t", "includeSlaves": "yes"}, "includeSlaves must be true or false"),
        ({**ZK, "topic": "t", "group": "a b"}, "option group"),
        ({**ZK, "topicPattern": "("}, "malformed topic pattern"),
    ],
)
def test_bad_read_options_are_refused_with_their_name(options, text):
    with pytest.raises(OptionError, match=text):
        parse_read_options(options)


def test_write_options_need_zk_connect():
    with pytest.raises(OptionError, match="zk.connect is required"):
        parse_write_options({"topic": "t"})


@pytest.mark.parametrize(
    ("parse", "options", "suggested"),
    [
        (parse_read_options, {**ZK, "topic": "t", "startingOffset": "latest"}, "startingOffsets"),
        (parse_read_options, {**ZK, "topic": "t", "fetchbyte": "64"}, "fetchBytes"),
        (parse_read_options, {**ZK, "topic": "t", "zk.conect": "h:1"}, "zk.connect"),
        (
            parse_stream_options,
            {**ZK, "topic": "t", "maxBytesPerTriger": "9"},
            "maxBytesPerTrigger",
        ),
        (parse_write_options, {**ZK, "topic": "t", "sendTimeoutMS": "9", "topik": "u"}, "topic"),
    ],
)
def test_a_misspelt_option_is_refused_with_the_name_meant(parse, options, suggested):
    with pytest.raises(OptionError, match=f"unknown option .*: did you mean {suggested}[?]$"):
        parse(options)


def test_an_unknown_option_names_the_given_spelling_and_what_is_taken():
    with pytest.raises(OptionError) as caught:
        parse_read_options({**ZK, "topic": "t", "Compression": "gzip"})
    text = str(caught.value)
    assert text.startswith("unknown option Compression of the metaq source (batch read)")
    assert "startingOffsets" in text and "\n" not in text


@pytest.mark.parametrize("name", ["maxBytesPerTrigger", "commitToGroup"])
def test_stream_only_options_are_refused_for_a_batch_read(name):
    with pytest.raises(OptionError, match=f"option {name} is for streaming reads only"):
        parse_read_options({**ZK, "topic": "t", name: "1"})


def test_the_stream_writer_takes_spark_s_checkpoint_location_and_the_batch_writer_does_not():
    options = {**ZK, "topic": "t", "checkpointLocation": "/tmp/c"}
    assert parse_write_options(options, stream=True).topic == "t"
    with pytest.raises(OptionError, match="unknown option checkpointLocation"):
        parse_write_options(options)
