"""The storage engine (``shardgrid._engine``) on its own: its columns, records, expiry and memory
count against a pure-Python model, and hostile columns that must change nothing."""
