"""JSON in and out of the Kubernetes client, on pydantic-core's parser and serializer (issue 14):
the same values as the standard library's ``json`` on every body, odd ones included, and the
packed store's bytes unchanged (kontinue/kube/api.py ``_decode``, ``parse_json``;
kontinue/kube/store.py ``Store.entry_of``)."""

from __future__ import annotations

import functools
import json
import math
import random
import re
from typing import Any

import pydantic_core
import pytest

from kontinue.kube import api, store
from kontinue.models import core, pruning
from tests import fixtures

RECORDED_POD = fixtures.FIXTURES / "bridge/kubelet-sigterm-saved.json"
_CHARSET = re.compile(r"charset=([a-zA-Z\-\d]+)[\s\;]?")


def _decode_before(data: bytes, content_type: str | None) -> Any:
    """What ``api._decode`` did before issue 14 (the standard library alone): the oracle."""
    match = _CHARSET.search(content_type) if content_type is not None else None
    text = data.decode(match.group(1) if match else "utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0 (``==`` does neither)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


ODD_BODIES = [
    b'{"kind":"Status","code":410}',
    b'[1, 2.5, "x", null, true, false]',
    b'"just a string"',
    b"12345678901234567890123456789",
    b"1e400",
    b"-0.0",
    b"NaN",
    b'{"a": 1, "a": 2}',
    b'"\\ud800 lone surrogate"',
    b'{"s": "\\u00e9\\u2028"}',
    '{"é": "ü"}'.encode(),
    b"\xef\xbb\xbf{}",  # a byte-order mark
    b"",
    b"not json",
    b'{"unterminated": ',
    b"[" * 5000 + b"]" * 5000,  # deeper than pydantic-core's parser goes
]


@pytest.mark.parametrize("body", ODD_BODIES, ids=range(len(ODD_BODIES)))
@pytest.mark.parametrize(
    "content_type", [None, "application/json", "application/json; charset=utf-8"]
)
def test_responses_decode_as_the_standard_library_decoded_them(
    body: bytes, content_type: str | None
) -> None:
    try:
        expected: Any = _decode_before(body, content_type)
    except RecursionError:  # the deep one: the standard library's own error, then and now
        with pytest.raises(RecursionError):
            api._decode(body, content_type)
        return
    assert _same(api._decode(body, content_type), expected)


def test_a_latin_1_response_is_decoded_with_its_charset() -> None:
    body = '{"name": "café"}'.encode("latin-1")
    content_type = "application/json; charset=latin-1"
    assert api._decode(body, content_type) == _decode_before(body, content_type) == {"name": "café"}


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-(2**70), 2**70)
    if kind == 2:
        return rng.choice([rng.uniform(-1e6, 1e6), rng.random() * 1e-9, 1e300, -0.0, 0.5])
    if kind in (3, 4):
        alphabet = 'az09 -_/.:"\\\n\t\u00e9\u2028\U0001f600'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {f"k{rng.randrange(50)}": _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_random_json_decodes_and_watch_lines_parse_as_json_loads_did() -> None:
    rng = random.Random(14)
    for _ in range(2000):
        value = _value(rng)
        body = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        assert _same(api._decode(body, "application/json"), json.loads(body))
        assert _same(api.parse_json(body), json.loads(body))


def test_the_packed_form_of_a_slim_pod_is_byte_for_byte_what_json_dumps_wrote() -> None:
    raw = json.loads(RECORDED_POD.read_text())
    slim = pruning.prune(core.Pod, raw)
    slimming = functools.partial(pruning.prune, core.Pod)
    held = store.Store(core.Pod, packed=True, transform=slimming).entry_of(raw)
    assert isinstance(held, store.Packed)
    before = json.dumps(slim, separators=(",", ":"), ensure_ascii=False).encode()
    assert held.data == before
    assert held.obj == core.Pod.model_validate_json(before)


def test_random_objects_pack_to_json_that_reads_back_the_same() -> None:
    rng = random.Random(41)
    for _ in range(2000):
        value = {"metadata": {"name": "x"}, "spec": _value(rng)}
        packed = pydantic_core.to_json(value)
        assert _same(json.loads(packed), value)
