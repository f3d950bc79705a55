"""What a PromQL expression reads (its metric names and the label names it relies on),
and whether an exposition (/metrics) has them all.

A small tokenizer, not a parser, enough for the alert rules and the dashboard: strings,
numbers, durations and Grafana's variables (`$source`, `${datasource}`,
`$__rate_interval`) carry no names; an identifier followed by `(` (or by `by` or
`without`) is a function or an aggregation; the PromQL keywords are operators; the
parenthesised list after `by`, `without`, `on`, `ignoring`, `group_left` and
`group_right` holds label names, as do a selector's `{...}` matchers; every other
identifier is a metric name. A selector by labels alone (`{__name__="..."}`) is
refused: its metric could not be checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_TOKEN = re.compile(
    r"""
      (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<matchers>\{[^}]*\})
    | (?P<range>\[[^\]]*\])
    | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[a-z]*)  # 0.99, 3600, 5m, 1h30m (two)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_KEYWORDS = _GROUPING | {"and", "or", "unless", "offset", "bool", "atan2", "inf", "nan"}
# The sample names a family of each type has (a gauge's is the family's own).
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
# Labels Prometheus adds to every scraped series (the target's), not the exporter.
_TARGET_LABELS = frozenset({"instance", "job"})

# A name a query may select -> its samples' label names (None: it has no series yet).
Exported = dict[str, set[str] | None]


@dataclass
class Reads:
    """The metric names an expression selects; the labels its selectors match on, per
    metric; the labels it groups or matches by."""

    metrics: set[str] = field(default_factory=set)
    matched: set[tuple[str, str]] = field(default_factory=set)
    grouped: set[str] = field(default_factory=set)


def reads(expression: str) -> Reads:
    text = _VARIABLE.sub("", _STRING.sub('""', expression))
    tokens = [(match.lastgroup, match.group()) for match in _TOKEN.finditer(text)]
    found = Reads()
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "name" and value.lower() in _GROUPING:
            i += 1
            if following == ("other", "("):
                i += 1
                while i < len(tokens) and tokens[i] != ("other", ")"):
                    if tokens[i][0] == "name":
                        found.grouped.add(tokens[i][1])
                    i += 1
            continue
        if kind == "name" and value.lower() not in _KEYWORDS and not _called(following):
            found.metrics.add(value)
            if following[0] == "matchers":
                found.matched.update((value, label) for label in _labels(following[1]))
                i += 1
        elif kind == "matchers":
            raise ValueError(f"a selector without a metric name in {expression!r}")
        i += 1
    return found


def _called(following: tuple[str | None, str]) -> bool:
    """Whether an identifier so followed is a function or an aggregation (`sum by (...)
    (...)`): a metric name is never followed by either."""
    return following == ("other", "(") or (
        following[0] == "name" and following[1].lower() in {"by", "without"}
    )


def _labels(matchers: str) -> list[str]:
    return _MATCHER_LABEL.findall(matchers)


def exported(text: str) -> Exported:
    """Each name a query may select in an exposition, with the labels of its samples;
    None for a family without series yet (its names are exported, its labels unknown)."""
    names: Exported = {}
    for family in text_string_to_metric_families(text):
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.setdefault(family.name + suffix, None)
        for sample in family.samples:
            labels = names.get(sample.name) or set()
            names[sample.name] = labels | set(sample.labels)
    return names


def unknown(expression: str, metrics: Exported) -> list[str]:
    """What `expression` reads that `metrics` lacks: metric names; labels matched on a
    metric whose samples have no such label; labels grouped by that none of the metrics
    it reads has. A metric without series has its labels unknown, so unchecked."""
    found = reads(expression)
    problems = [f"metric {name}" for name in sorted(found.metrics - set(metrics))]
    for name, label in sorted(found.matched):
        if label not in (metrics.get(name) or {label}):
            problems.append(f"label {label} of {name}")
    read_labels = set().union(*(metrics.get(name) or set() for name in found.metrics))
    for label in sorted(found.grouped - read_labels - _TARGET_LABELS):
        problems.append(f"label {label} to group by")
    return problems
