"""The ``synthorg`` command line."""
