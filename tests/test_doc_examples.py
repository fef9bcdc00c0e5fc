"""Tests of tests/doc_examples.py: which blocks of a Markdown page the README test runs."""

from __future__ import annotations

import pytest

from tests.doc_examples import blocks, with_addresses

PAGE = """# Title

```sh
echo run
```

```python not-run
spark.read.format("metaq")
```

```
$ meta-admin topics
TOPIC
```

````yaml
key: value
````
"""


def test_sh_and_python_blocks_run_unless_marked_not_run():
    found = blocks(PAGE)
    assert [(block.language, block.runs, block.not_run) for block in found] == [
        ("sh", True, False),
        ("python", False, True),
        ("", False, False),
        ("yaml", False, False),
    ]


def test_a_block_keeps_its_first_line_number_and_its_text():
    first = blocks(PAGE)[0]
    assert (first.line, first.text) == (3, "echo run\n")


def test_an_unclosed_block_is_an_error():
    with pytest.raises(ValueError, match="line 1: the code block is never closed"):
        blocks("```sh\necho never closed\n")


def test_an_unknown_mark_is_an_error_rather_than_a_silent_skip():
    with pytest.raises(ValueError, match="unknown words after sh"):
        blocks("```sh skip\necho\n```\n")


def test_not_run_on_a_block_that_never_runs_is_an_error():
    with pytest.raises(ValueError, match="not-run marks only sh and python blocks"):
        blocks("```yaml not-run\nkey: value\n```\n")


def test_the_local_addresses_are_replaced_by_the_given_ones():
    text = (
        'MetaClientConfig(zk_connect="127.0.0.1:2181")\n'
        'server_url="meta://127.0.0.1:8123"\n'
        "exec 3<>/dev/tcp/127.0.0.1/8123\n"
    )
    assert with_addresses(text, "127.0.0.1:40001", "127.0.0.1", 40002) == (
        'MetaClientConfig(zk_connect="127.0.0.1:40001")\n'
        'server_url="meta://127.0.0.1:40002"\n'
        "exec 3<>/dev/tcp/127.0.0.1/40002\n"
    )
