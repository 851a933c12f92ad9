"""The memory of a conversation: eviction, selection, search, context, marks, settings."""
