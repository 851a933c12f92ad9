"""Summaries: folding evicted utterances into a running summary that fits its budget."""
