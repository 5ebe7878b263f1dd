-- Where ingest stopped in a sidecar CSV that may still be growing (analytics/ingest_offsets.py): the
-- next ingest of the same path reads only what was appended after `offset`, while the file is still
-- the one read then (same device and inode, at least `offset` bytes, the same first and last bytes
-- read); otherwise, truncated or replaced, the file is read again from the start.
CREATE TABLE IF NOT EXISTS file_offset (
    source_file   VARCHAR NOT NULL,     -- the resolved path, as ingest_log records it; one row per path
    dev           BIGINT NOT NULL,      -- st_dev and st_ino of the file read
    ino           BIGINT NOT NULL,
    head_len      BIGINT NOT NULL,      -- bytes hashed at the start: the first block, or less in a smaller file
    head_sha256   VARCHAR NOT NULL,
    tail_sha256   VARCHAR NOT NULL,     -- sha256 of the block that ends at `offset`
    "offset"      BIGINT NOT NULL,      -- bytes read: complete lines only (a partial last line waits)
    lines         BIGINT NOT NULL,      -- lines before `offset`, header included (rejects keep the file's line numbers)
    options       VARCHAR,              -- JSON, the options recorded with the ingest: others read the file again
    ingest_id     BIGINT                -- the ingest that read up to `offset`
);
