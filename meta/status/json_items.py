"""The names of the ``stats json:<item>`` items, shared by the broker and ``meta-admin``.

The broker answers them (``meta.server.json_stats``); ``meta-admin`` asks them first and
falls back to the text items on a broker that answers text (``meta.admin.reads``). A ``:``
never appears in a legal topic name (docs/compatibility.md), so no item here can shadow a topic.
"""

from __future__ import annotations

PREFIX = "json:"
"""Every JSON item starts with this."""

NAMES = ("general", "topics", "offsets", "slave", "transactions", "rejected")
"""The items after ``PREFIX``: one JSON document each."""
