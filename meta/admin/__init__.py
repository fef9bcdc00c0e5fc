"""``meta-admin``: the operator tool of a running broker (``meta.admin.main``).

Subcommand groups live in their own modules (``meta.admin.tx``: transactions) and talk to a
live broker over the wire through ``meta.admin.client``. Importing this package has no side
effects: no reactor, no kazoo, no socket.
"""
