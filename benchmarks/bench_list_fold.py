"""Benchmark: the bridge's CPU to take in one pod of a list at start-up (issue 14 target 3).

Run: ``python -m benchmarks.bench_list_fold`` (``make bench``; ~20 s). Prints numbers; asserts
nothing. CPU time of this process (``time.process_time``), so the figures depend little on
what else the machine runs; rounds of the two ways alternate and the median is printed.

A page of ``--page`` pods (the recorded kubelet pod, tests/fixtures/bridge/kubelet-sigterm-saved
.json, with the 1.8 KB of ``managedFields`` a real apiserver adds, as bench_bridge_memory uses)
is served as one list response body. Per pod, what the pod cache does with it at start-up:

- **before** (main before the third pass): the body parsed by ``json.loads``; each item pruned
  (kontinue/models/pruning.py), validated, packed by ``json.dumps``; once the list is complete,
  its ADDED event parses the packed JSON again (``model_validate_json``);
- **now**: the body parsed by kontinue/kube/api.py ``_decode`` (pydantic-core's parser); each
  item through ``Store.entry_of`` (prune, validate, ``pydantic_core.to_json``) keeping the
  model, which its ADDED event carries (kontinue/kube/watching.py ``_relist``, page by page).

The Pod handler's read in the start-up sweep (one more parse per pod) and everything else the
start does are the same in both and not in these figures.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import statistics
import time

from kontinue.kube import api, store
from kontinue.models import core, pruning
from tests import fixtures

RECORDED_POD = fixtures.FIXTURES / "bridge/kubelet-sigterm-saved.json"
MANAGED_FIELDS_SOURCE = (
    fixtures.FIXTURES / "webhook/admission/06-job-suspend-update-pod-by-job-controller.json"
)


def page_body(n: int) -> bytes:
    pod = json.loads(RECORDED_POD.read_text())
    review = json.loads(MANAGED_FIELDS_SOURCE.read_text())
    managed = review["request"]["oldObject"]["metadata"]["managedFields"]
    items = []
    for i in range(n):
        item = copy.deepcopy(pod)
        item["metadata"]["name"] = f"train-{i:05d}-0"
        item["metadata"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        item["metadata"]["resourceVersion"] = str(1000 + i)
        item["metadata"]["managedFields"] = managed
        items.append(item)
    return json.dumps({"kind": "PodList", "metadata": {}, "items": items}).encode()


def before(body: bytes) -> int:
    slim = functools.partial(pruning.prune, core.Pod)
    packed = []
    for raw in json.loads(body.decode())["items"]:
        pruned = slim(dict(raw))
        core.Pod.model_validate(pruned)  # validated, the model dropped (keep=False)
        packed.append(json.dumps(pruned, separators=(",", ":"), ensure_ascii=False).encode())
    return sum(len(core.Pod.model_validate_json(data).metadata.name or "") for data in packed)


def now(body: bytes) -> int:
    held = store.Store(core.Pod, transform=functools.partial(pruning.prune, core.Pod), packed=True)
    told = 0
    for raw in api._decode(body, "application/json")["items"]:
        entry = held.entry_of(raw, keep=True)
        told += len(entry.obj.metadata.name or "")  # the ADDED event's model
        if isinstance(entry, store.Packed):
            entry.hot = None
    return told


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_list_fold")
    parser.add_argument("--page", type=int, default=500, help="pods per list page")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    body = page_body(args.page)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"one list page: {args.page} pods, {len(body) / args.page:.0f} B of JSON each")
    assert before(body) == now(body)  # the same pods told
    times: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(args.rounds):
        for name, fold in (("before", before), ("now", now)):
            started = time.process_time()
            fold(body)
            times[name].append((time.process_time() - started) * 1e6 / args.page)
    for name, values in times.items():
        print(
            f"  {name:6s} CPU per pod: median {statistics.median(values):6.1f} µs"
            f" ({' / '.join(f'{v:.0f}' for v in values)})"
        )
    saved = statistics.median(times["before"]) - statistics.median(times["now"])
    print(
        f"  saved per pod {saved:.1f} µs: {saved * 10_000 / 1e6:.2f} s of CPU at 10,000 pods"
        " (target 3: start-up < 5 s)"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
