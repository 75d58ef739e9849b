"""A lint of Prometheus text exposition, and a reader of its samples, for the metric tests.

The naming rules are those of Prometheus' own linter (prometheus/client_golang
``prometheus/testutil/promlint/validations/``: ``lintHelp``, ``lintCounter``,
``lintMetricUnits``, ``lintHistogramSummaryReserved``, ``lintMetricTypeInName``,
``lintReservedChars``, ``lintCamelCase``, ``lintUnitAbbreviations``), plus two of ours for
Kontinue's own families (``kontinue_*``): a duration or latency is in ``_seconds``, a size in
``_bytes``, and label values are short tokens (no spaces) so a label set stays bounded.
Samples are read with prometheus_client's own parser.
"""

from __future__ import annotations

import dataclasses
import re

from prometheus_client import parser

NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
NON_BASE_UNITS = (
    "minutes",
    "hours",
    "days",
    "weeks",
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "kilobytes",
    "megabytes",
    "gigabytes",
    "bits",
    "percent",
    "celsius",
    "fahrenheit",
)
ABBREVIATIONS = ("ms", "us", "ns", "sec", "secs", "min", "mins", "kb", "mb", "gb", "pct")
TYPES_IN_NAME = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count")}


@dataclasses.dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str | None = None
    samples: list[tuple[str, dict[str, str], float]] = dataclasses.field(default_factory=list)


def families(text: str) -> dict[str, Family]:
    """Families by the name in their ``# TYPE`` line, with their samples."""
    found: dict[str, Family] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            found.setdefault(name, Family(name)).type = kind
        elif line.startswith("# HELP "):
            parts = line.split(" ", 3)
            found.setdefault(parts[2], Family(parts[2])).help = parts[3] if len(parts) > 3 else ""
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            owner = _owner(sample.name, found)
            found.setdefault(owner, Family(owner)).samples.append(
                (sample.name, dict(sample.labels), sample.value)
            )
    return found


def _owner(sample: str, found: dict[str, Family]) -> str:
    if sample in found:
        return sample
    for suffix in ("_bucket", "_sum", "_count", "_created", "_total"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in found:
            return sample[: -len(suffix)]
    return sample


def problems(text: str) -> list[str]:
    """Every naming problem in the exposition, as ``name: problem``."""
    out: list[str] = []
    for family in families(text).values():
        out.extend(f"{family.name}: {p}" for p in _family_problems(family))
    return out


def _family_problems(family: Family) -> list[str]:
    name, kind = family.name, family.type
    found: list[str] = []
    if not NAME.match(name) or ":" in name:
        found.append("invalid characters (or a colon, reserved for recording rules)")
    if not SNAKE.match(name):
        found.append("not snake_case")
    if family.help is None:
        found.append("no HELP")
    elif not family.help.strip():
        found.append("empty HELP")
    if kind == "untyped":
        found.append("no TYPE")
    if kind == "counter" and not name.endswith("_total"):
        found.append('counter without "_total" suffix')
    if kind != "counter" and name.endswith("_total"):
        found.append('non-counter with "_total" suffix')
    if kind not in ("histogram", "summary") and name.endswith(("_bucket", "_count", "_sum")):
        found.append("non-histogram named like a histogram series")
    tokens = name.split("_")
    for unit in NON_BASE_UNITS:
        if unit in tokens:
            found.append(f"unit {unit!r} is not a base unit")
    for abbreviation in ABBREVIATIONS:
        if abbreviation in tokens:
            found.append(f"abbreviated unit {abbreviation!r}")
    for type_name in TYPES_IN_NAME:
        if type_name in tokens:
            found.append(f"metric type {type_name!r} in the name")
    allowed = SUFFIXES.get(kind, ())
    for sample, labels, _ in family.samples:
        if sample != name and not any(sample == name + s for s in allowed):
            found.append(f"sample {sample} does not belong to a {kind}")
        for label in labels:
            if not SNAKE.match(label):
                found.append(f"label {label!r} not snake_case")
            if label in ("le", "quantile") and kind not in ("histogram", "summary"):
                found.append(f"reserved label {label!r}")
    if name.startswith("kontinue_"):
        if ("latency" in tokens or "duration" in tokens) and not name.endswith("_seconds"):
            found.append("a duration not in _seconds")
        if "size" in tokens and not name.endswith("_bytes"):
            found.append("a size not in _bytes")
        for _, labels, _ in family.samples:
            for label, value in labels.items():
                if label != "le" and (not value or len(value) > 63 or " " in value):
                    found.append(f"label value {label}={value!r} is not a short token")
    return sorted(set(found))


def value(text: str, sample: str, **labels: str) -> float:
    """The value of the one sample named ``sample`` whose labels include ``labels``; 0 if none
    (a labelled counter has no series until its first increment)."""
    matching = [
        v
        for family in families(text).values()
        for name, have, v in family.samples
        if name == sample and all(have.get(k) == want for k, want in labels.items())
    ]
    assert len(matching) <= 1, f"{sample}{labels} matches {len(matching)} series"
    return matching[0] if matching else 0.0
