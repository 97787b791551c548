"""Every bound of the core as a named constant with its unit.

Bounds live in one place so that a reader can see the resource envelope of the whole system at a
glance, and so that hitting one is a deliberate, documented event rather than an accident.
"""

from typing import Final

# Partitioning (seed 001: 271 partitions by default; seed 003 benchmarks 20,000).
DEFAULT_PARTITION_COUNT: Final = 271
MAX_PARTITION_COUNT: Final = 100_000

# MemberIds (seed 000: at most 7 replicas, indexes 0..6; index 0 is the owner).
MAX_REPLICA_COUNT: Final = 7
MAX_BACKUP_COUNT: Final = MAX_REPLICA_COUNT - 1
DEFAULT_BACKUP_COUNT: Final = 1

# Migrations (seed 003: hazelcast.partition.max.parallel.migrations, default 10).
DEFAULT_MAX_PARALLEL_MIGRATIONS: Final = 10
MAX_PARALLEL_MIGRATIONS_LIMIT: Final = 1_000

# Members: a cluster larger than this is outside what the core is designed and tested for.
MAX_MEMBER_COUNT: Final = 1_000
# Maps a member's status lists with their entries and memory (the largest, when it holds more).
MAX_STATUS_MAPS: Final = 1_000

# The planner walks at most this many links when it looks for an enabling migration at a colder
# index; the chain can never be longer than the replica array, so hitting it is a planner bug.
MAX_PLANNER_CHAIN_STEPS: Final = MAX_REPLICA_COUNT

# Wire: the largest frame a member sends or accepts (a migration chunk is far below it).
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
# Wire: the largest frame before a connection's handshake is done (a Hello is under 4 KiB: a 128-char
# cluster name, two 256-char addresses, a nonce), so that a stranger's connections cannot each make a
# member or a client hold a whole MAX_FRAME_BYTES frame while they shake hands.
MAX_HANDSHAKE_FRAME_BYTES: Final = 8 * 1024

# Data: bounds on what one request may carry.
MAX_KEY_BYTES: Final = 64 * 1024
MAX_VALUE_BYTES: Final = 4 * 1024 * 1024
MAX_OPERATIONS_PER_REQUEST: Final = 10_000
# Keys and values a client puts in one request (a larger call is split): a member's frame limit must
# take such a request with its headers (runtime settings check it).
MAX_REQUEST_BYTES: Final = 8 * 1024 * 1024
# Keys and values in one backup batch (resends of many waiting runs are split to stay well under a
# frame; a single run is never larger than the request that carried it).
MAX_BACKUP_BATCH_BYTES: Final = 4 * 1024 * 1024
# Values in one reply frame to a client (a larger answer is split; one value is at most 4 MiB).
MAX_REPLY_VALUE_BYTES: Final = 8 * 1024 * 1024
# Values one get may answer with, all its replies together: a request of a few kilobytes naming big
# values (or one big value many times) must not make a member buffer gigabytes for one client.
MAX_GET_ANSWER_BYTES: Final = 16 * 1024 * 1024
# Partitions in one table reply to a client (7 slots of small ints each: well under a frame).
MAX_TABLE_REPLY_PARTITIONS: Final = 20_000
MAX_MAP_NAME_CHARS: Final = 256

# Counters that only grow (Raft terms and log indexes, replica and chunk sequences, clocks in ms,
# call ids). A peer or client may send at most this: a counter one past it still encodes (msgpack
# carries 64-bit ints), so no member's own increment can make a message unencodable, and a double
# holds it exactly (a client in a language without 64-bit ints reads it right). No legitimate
# counter gets near it: a term a millisecond would take 285,000 years.
MAX_COUNTER: Final = 2**53

# Wire: bounds on the collections of one message, checked while decoding, before anything is built
# beyond them. Each is one the senders never reach, so that one frame under MAX_FRAME_BYTES cannot
# make a member allocate many times its size. Nested ones multiply (entries of an AppendEntries
# times their commands: 16 MiB of empty commands decode to about 385 MiB), so such kinds are decoded
# only from a session that proved the cluster's secret as a member: a connection takes only the
# handshake's messages (in frames of MAX_HANDSHAKE_FRAME_BYTES) until its handshake is done, then a
# client's requests from a client, checked from each frame's code before it is decoded.
# Raft entries in one AppendEntries (RaftSettings.max_append_entries, 64 by default).
MAX_ENTRIES_PER_APPEND: Final = 10_000
# What one Raft step can append to a member's log: a leader's whole append, and its own few.
MAX_ENTRIES_PER_RAFT_WRITE: Final = 2 * MAX_ENTRIES_PER_APPEND
# Commands in one log entry (the leader gathers up to 1,000 into one, plus what one event adds).
MAX_COMMANDS_PER_ENTRY: Final = 10_000
# Records in one migration or replica-sync chunk (MemberConfig.max_chunk_entries, 1,000 by default).
MAX_ENTRIES_PER_CHUNK: Final = 100_000
# Runs in one backup batch. New writes come as at most one run per key of the request that made them;
# a resend is one partition's waiting runs, of one write at least each (max_pending_writes, 10,000 by
# default, bounds the sync ones).
MAX_RUNS_PER_BACKUP_BATCH: Final = 10 * MAX_OPERATIONS_PER_REQUEST

# The newest migration outcomes the metadata keeps (seed 000's completed-migrations list; the log
# holds every one until it is compacted).
MAX_COMPLETED_IN_METADATA: Final = 1_000

# "Never", as a time: long before any a member's clock shows (it starts at 0), so that a thing
# last done at NEVER_MS is due at once ("now - last >= interval" holds at the first tick).
NEVER_MS: Final = -(10**12)

# The longest TTL an entry may have, in seconds (about 285 years): an expiry time of the record
# clock plus it stays far below MAX_COUNTER, the engine's bound on times.
MAX_TTL_SECONDS: Final = 9_000_000_000
MAX_TTL_MS: Final = MAX_TTL_SECONDS * 1000
