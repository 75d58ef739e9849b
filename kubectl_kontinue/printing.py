"""Output as kubectl prints it: aligned columns, ``-o wide`` extra columns, ``-o json|yaml``.

Pure: every function returns a string; :mod:`kubectl_kontinue.cli` writes it. Column layout
follows kubectl's table printer (k8s.io/cli-runtime ``pkg/printers/tableprinter.go``: upper-case
headers, columns separated by at least three spaces, ``<none>`` for an empty cell).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

FORMATS = ("json", "yaml", "wide")
NONE = "<none>"


@dataclasses.dataclass(frozen=True)
class Column:
    header: str
    key: str
    wide: bool = False
    """Shown only with ``-o wide``."""


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, wide: bool) -> str:
    """Rows as aligned text; a missing or empty value prints as ``<none>``."""
    shown = [c for c in columns if wide or not c.wide]
    cells = [[c.header for c in shown]]
    for row in rows:
        cells.append([_cell(row.get(c.key)) for c in shown])
    widths = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    lines = ["   ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return NONE
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def dump(data: Any, fmt: str) -> str:
    """``data`` as JSON (indented, as ``kubectl -o json``) or YAML."""
    if fmt == "json":
        return json.dumps(data, indent=4, default=str)
    return yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=False).rstrip()


def _plain(data: Any) -> Any:
    """Make ``data`` YAML-safe: datetimes as RFC 3339 strings, tuples as lists."""
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    if isinstance(data, datetime.datetime):
        return data.isoformat().replace("+00:00", "Z")
    return data


def age(since: datetime.datetime | None, *, now: datetime.datetime) -> str:
    """kubectl's short human duration (``apimachinery/pkg/util/duration.HumanDuration``)."""
    if since is None:
        return ""
    seconds = int((now - since).total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def seconds(value: float | None) -> str:
    """A duration measured by us (save, init, handover): one decimal, with its unit."""
    return "" if value is None else f"{value:.1f}s"


def size(value: int | None) -> str:
    """Bytes in the binary units ``kubectl`` shows quantities in (Ki, Mi, Gi)."""
    if value is None:
        return ""
    amount = float(value)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if amount < 1024 or unit == "Ti":
            return f"{amount:.0f}{unit}" if unit == "" else f"{amount:.1f}{unit}"
        amount /= 1024
    return str(value)  # pragma: no cover -- the loop always returns
