"""metaq-py: a Metamorphosis (MetaQ 1.x) compatible message broker and client.

Importing ``meta`` has no side effects: no reactor, no kazoo, no threads.
"""

__version__ = "0.1.0"
