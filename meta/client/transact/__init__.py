"""The client's side of transactions: local transactions, ``Xid`` and the ``XAResource``.

``transaction`` (transaction ids, the per-thread transaction slots and ``LocalTransaction``)
and ``xa_resource`` (``XAResource``, the XA protocol over one broker). Producers use these;
nothing here depends on a producer. Import the modules themselves; this package re-exports
nothing.
"""
