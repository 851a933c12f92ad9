"""The ``chd`` command line: serve, query, purpose, instructions, config, export, import."""
