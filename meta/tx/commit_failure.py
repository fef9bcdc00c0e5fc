"""The text of a commit that was journaled but could not be stored (one home for it).

A commit fails after its COMMIT record was appended in two ways, and a restart ends them
differently (``meta.tx.recovery``):

* a partition refused or lost its batch while the journal synced the record: recovery
  appends every batch the record names, so a restart completes the commit;
* the journal itself failed (a full disk, an fsync error; the partitions waiting for the
  record then fail with it): whether the record reached the disk is unknown. With it, a
  restart completes the commit; without it, a local transaction is rolled back, and a
  prepared XA branch comes back prepared (RECOVER lists it; commit or roll it back again).

Pure; no I/O.
"""

from __future__ import annotations

from meta.tx.journal import JournalError

__all__ = ["commit_failure_text"]


def commit_failure_text(
    key: str, error: BaseException, journal_failure: BaseException | None = None
) -> str:
    """The reply text of a commit of ``key`` that failed to store with ``error``.

    Args:
        key: the transaction key.
        error: the first failure of the commit's batches.
        journal_failure: the journal's failure (``Journal.failed``) when it has failed: then
            the commit record may be lost, whatever the partition reported.
    """
    head = f"Commit of '{key}' could not be stored: {error}; "
    if journal_failure is not None or isinstance(error, JournalError):
        return head + (
            "the commit record may not have reached the disk: after a broker restart the "
            "transaction is committed if it did, otherwise rolled back (a prepared XA branch "
            "is then prepared again)."
        )
    return head + "its commit record is on disk, so a broker restart completes it."
