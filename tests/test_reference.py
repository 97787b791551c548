"""The manual's generated reference: every setting, command, option and metric has a description,
so one added without it fails here (and its row in the manual would be empty)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from shardgrid.cli import reference


def test_every_setting_command_option_and_metric_is_described():
    assert reference.undocumented() == []


def test_a_field_without_a_docstring_has_no_description():
    @dataclass
    class Settings:
        described_ms: int = 1
        """What it does."""
        bare: int = 2

    assert reference.field_descriptions(Settings) == {"described_ms": "What it does."}
    assert reference.unit_of("described_ms") == "milliseconds"


def test_an_option_without_help_is_reported(monkeypatch):
    @click.command()
    @click.option("--quiet-flag", is_flag=True)
    def bare() -> None:
        """A command with an undescribed option."""

    every = [*reference.commands(), (("shardgrid", "bare"), bare)]
    monkeypatch.setattr(reference, "commands", lambda *_args: every)
    assert reference.undocumented() == ["option shardgrid bare --quiet-flag"]


def test_the_settings_table_names_each_variable_and_default():
    table = reference.settings_markdown("cluster")
    assert "| `lease_ms` | `2000` (milliseconds) | `SHARDGRID_LEASE_MS` |" in table
    assert "`transfer_resend_ms` | `5000` (milliseconds)" in table  # a member process's own default


def test_a_metric_registered_without_the_helpers_is_reported(monkeypatch):
    """Found by an outside tester: a metric registered directly on the registry got no row in the
    manual, and this test passed."""
    from prometheus_client import Counter

    from shardgrid.runtime import metrics

    helpers_only = metrics.MemberMetrics.__init__

    def with_a_direct_one(self: metrics.MemberMetrics) -> None:
        helpers_only(self)
        self.sneaky = Counter("shardgrid_sneaky", "Registered directly.", registry=self.registry)

    monkeypatch.setattr(metrics.MemberMetrics, "__init__", with_a_direct_one)
    assert reference.undocumented() == [
        "metric shardgrid_sneaky (registered without MemberMetrics' helpers: not described)"
    ]
    assert "| `shardgrid_sneaky_total` | counter | ? | Registered directly. |" in reference.metrics_markdown()


def test_the_metrics_table_has_a_row_for_every_registered_metric():
    table = reference.metrics_markdown()
    collected = [family.name for family in reference.MemberMetrics().registry.collect()]
    assert len(collected) == len(reference.MemberMetrics().specs)
    assert all(f"`{name}" in table for name in collected)
