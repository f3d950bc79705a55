"""tests.support.promql: the names the monitoring check takes out of an expression and
out of an exposition, and what it finds missing."""

from __future__ import annotations

import pytest

from tests.support.promql import Exported, exported, reads, unknown


def test_metrics_are_the_identifiers_that_are_not_functions_keywords_or_labels() -> None:
    found = reads(
        'sum by (source) (rate(porteiro_events_recorded_total{result="duplicate"}[5m]))'
        " / sum by (source) (rate(porteiro_events_recorded_total[5m])) > 0.05"
    )
    assert found.metrics == {"porteiro_events_recorded_total"}
    assert found.matched == {("porteiro_events_recorded_total", "result")}
    assert found.grouped == {"source"}


def test_strings_durations_offsets_and_vector_matching_carry_no_metric() -> None:
    found = reads(
        'increase(a_total{finding="missing", note=~"by (x) or y{z}"}[1h30m]) > 0'
        " or sum without (instance) (b unless on (source) group_left (kind) c offset 1h)"
        " and on () (hour(vector(time() - 3 * 3600)) >= 9)"
        " > bool 2e3"
    )
    assert found.metrics == {"a_total", "b", "c"}
    assert found.matched == {("a_total", "finding"), ("a_total", "note")}
    assert found.grouped == {"instance", "source", "kind"}


def test_grafana_variables_are_dropped() -> None:
    found = reads(
        'histogram_quantile(0.99, sum by (le) (rate(porteiro_ack_seconds_bucket{source=~"$source"}'
        "[$__rate_interval])))"
        " * ${factor}"
    )
    assert found.metrics == {"porteiro_ack_seconds_bucket"}
    assert found.matched == {("porteiro_ack_seconds_bucket", "source")}
    assert found.grouped == {"le"}


def test_aggregation_clauses_after_the_argument_list() -> None:
    found = reads("sum(rate(x_total[5m])) by (destination, outcome)")
    assert (found.metrics, found.grouped) == ({"x_total"}, {"destination", "outcome"})


def test_a_selector_without_a_metric_name_is_refused() -> None:
    with pytest.raises(ValueError, match="without a metric name"):
        reads('{__name__="porteiro_dead_letters"}')


def test_the_check_catches_a_renamed_metric_or_label() -> None:
    metrics: Exported = {"porteiro_dead_letters": {"source"}}
    assert unknown("max by (source) (porteiro_dead_letters) > 0", metrics) == []
    assert unknown("porteiro_dead_letter > 0", metrics) == ["metric porteiro_dead_letter"]
    assert unknown('porteiro_dead_letters{sorce="shop"}', metrics) == [
        "label sorce of porteiro_dead_letters"
    ]
    assert unknown("max by (sorce) (porteiro_dead_letters)", metrics) == ["label sorce to group by"]
    assert unknown("sum by (instance) (porteiro_dead_letters)", metrics) == []
    # Without series its labels are unknown: only its name is checked.
    assert unknown('porteiro_outbox_dead{destination="erp"}', {"porteiro_outbox_dead": None}) == []


def test_exported_names_are_the_samples_and_the_suffixes_of_a_family_without_series() -> None:
    text = (
        "# HELP x_seconds Time\n# TYPE x_seconds histogram\n"
        "# HELP y Count\n# TYPE y counter\n# HELP w Up\n# TYPE w gauge\nw 1.0\n"
        '# HELP z Now\n# TYPE z gauge\nz{source="shop"} 1.0\n'
    )
    assert exported(text) == {
        "x_seconds_bucket": None, "x_seconds_sum": None, "x_seconds_count": None,
        "y_total": None, "w": set(), "z": {"source"},
    }  # fmt: skip
