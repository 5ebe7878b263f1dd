"""The database: connecting and migrating (db.py), the one `Database` class (database.py), the stored
per-job results (results.py), the settings it holds (settings.py), published snapshots
(snapshot.py, freshness.py) and the Parquet lake (lake.py)."""
