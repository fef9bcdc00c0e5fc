"""Tests of ``meta.sync``: synchronous replication (samsa master, gregor slave)."""
