"""The fetch loop shared by consumers and the slave: gets, offsets and the batches they bring.

``manager`` (``FetchManager``: one request per owned partition, run by fetch threads, with
public hooks for subclasses), ``request`` (``FetchRequest``, one partition's fetch state, and
``FetchSettings``) and ``received`` (what a listener receives, and handing it a batch).
Import the modules themselves; this package re-exports nothing.
"""
