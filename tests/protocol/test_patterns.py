"""``meta.protocol.patterns``: the put run's header pattern takes exactly what its plain form
(the same pattern without possessive repeats) takes, and gives the same fields."""

from __future__ import annotations

import random
import re

from meta.protocol.patterns import PUT_RUN

PLAIN_PUT_RUN = re.compile(PUT_RUN.pattern.replace(b"}+", b"}"))

# Tokens at and around every repeat's bounds, with bytes each class excludes.
NUMBERS = (b"0", b"7", b"123456789", b"-0", b"00", b"-7", b"-123456789", b"1234567890")
NUMBERS += (b"-1234567890", b"12345678901", b"+1", b"")
TOPICS = (b"t", b"a.b-c_D", b"t" * 255, b"t" * 256, b"t\x00", b"t\xff", b"")
KEYS = (b"TX:k", b"XID:" + b"k" * 1024, b"XID:" + b"k" * 1025, b"TX:", b"TX:a\rb", b"XA:k")
TOKENS = NUMBERS + TOPICS + KEYS


def _headers(count: int, seed: int) -> list[bytes]:
    """Put headers in the run's shape (a checksum and a key or not), each token mostly one
    of the first three of its kind (which the run takes), else any of its kind or any token,
    sometimes with a doubled space or a wrong line end."""
    chooser = random.Random(seed)

    def token(kind: tuple[bytes, ...]) -> bytes:
        draw = chooser.random()
        return chooser.choice(TOKENS if draw < 0.05 else kind[:3] if draw < 0.8 else kind)

    headers = []
    for _ in range(count):
        tokens = [token(TOPICS), token(NUMBERS), token(NUMBERS), token(NUMBERS)]
        if chooser.random() < 0.5:
            tokens.append(token(NUMBERS))  # a checksum
        if chooser.random() < 0.3:
            tokens.append(token(KEYS))
        tokens.append(token(NUMBERS))  # the opaque
        separator = b" " if chooser.random() < 0.95 else b"  "
        end = b"\r\n" if chooser.random() < 0.95 else chooser.choice((b"\n", b"\r", b" \r\n"))
        headers.append(b"put " + separator.join(tokens) + end + b"body")
    return headers


def test_the_put_run_pattern_takes_what_its_plain_form_takes():
    """Goal: the possessive repeats change no match. Method: headers built from tokens at the
    repeats' bounds (and beyond them), matched by both patterns; a share of them must match,
    or the comparison would prove nothing."""
    matched = 0
    for header in _headers(5_000, seed=1):
        found, plain = PUT_RUN.match(header), PLAIN_PUT_RUN.match(header)
        assert (found is None) == (plain is None), header
        if found is not None and plain is not None:
            assert found.groups() == plain.groups() and found.end() == plain.end(), header
            matched += 1
    assert matched > 500
