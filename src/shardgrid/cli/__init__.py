"""The ``shardgrid`` command line: one command, subcommands per task."""
