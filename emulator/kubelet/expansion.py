"""``$(VAR)`` expansion exactly as the kubelet does it, for env values, command and args.

A port of k8s.io/kubernetes ``third_party/forked/golang/expansion/expand.go`` (``Expand``,
``MappingFuncFor``, ``tryReadVariableName``): ``$(NAME)`` is replaced when ``NAME`` resolves,
``$$`` is an escaped ``$``, an unresolvable reference stays literally ``$(NAME)``, an unterminated
``$(`` and a ``$`` before any other character are copied as they are. Verified against the real
kubelet in tests/fixtures/kubelet/10-downward-env.log.

Limit: Go scans bytes, this scans code points; the two differ only for a ``$`` directly followed
by a multi-byte character, which upstream mangles and this keeps intact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

_OPERATOR = "$"
_OPENER = "("
_CLOSER = ")"


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """``MappingFuncFor``: the first context that defines a name wins; else it stays literal."""

    def resolve(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"{_OPERATOR}{_OPENER}{name}{_CLOSER}"

    return resolve


def _read_name(rest: str) -> tuple[str, bool, int]:
    """``tryReadVariableName``: (text, is a variable name, characters consumed after the ``$``)."""
    first = rest[0]
    if first == _OPERATOR:
        return _OPERATOR, False, 1
    if first == _OPENER:
        close = rest.find(_CLOSER, 1)
        if close == -1:
            return _OPERATOR + _OPENER, False, 1
        return rest[1:close], True, close + 1
    return _OPERATOR + first, False, 1


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """``Expand``: ``text`` with every ``$(NAME)`` passed through ``mapping``."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == _OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_name(text[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]
