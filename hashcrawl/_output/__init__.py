"""Where items and fetches go: the sinks (JSON Lines, JSON, CSV, XML, Parquet) and the
WARC archive, each written so that a crash leaves nothing half written."""
