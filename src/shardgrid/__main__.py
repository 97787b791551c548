"""``python -m shardgrid``: the ``shardgrid`` command, for environments without its script."""

from shardgrid.cli.main import main

if __name__ == "__main__":
    main()
