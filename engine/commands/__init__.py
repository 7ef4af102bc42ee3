"""CLI subcommands (see engine.cli)."""
