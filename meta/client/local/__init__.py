"""Files on the client's own disk: the local message file and fsyncing a directory.

``message_file`` (``RecoverFile``: the format both the consumer's recover store and the
producers' local backlogs use) and ``durable`` (``fsync_directory``). Nothing here sends or
receives. Import the modules themselves; this package re-exports nothing.
"""
