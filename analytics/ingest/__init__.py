"""Ingest: finding files and what they are, parsing every format (parsers/), the trust model,
and loading into the database, each file in one transaction. The entry is files.py."""
