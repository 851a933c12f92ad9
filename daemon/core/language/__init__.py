"""The query language: from a sentence (or ``data.operation``) to a typed intent."""
