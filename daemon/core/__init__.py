"""The core ring: answers ``query(text, metadata, data)`` in plain Python.

``history.ConversationHistory`` is the entry point. Beside it sit the data
types every ring shares (``utterance``, ``errors``, ``settings``, ``tokens``)
and three subpackages: ``language`` (what a query asks), ``memory`` (the
buffer and the operations on it) and ``summaries`` (what evicted utterances
become). Nothing in this package imports grpc, the service or the CLI.
"""
