"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1e3``) as exact fractions (pure).

The suffixes and their meaning are apimachinery's (staging/src/k8s.io/apimachinery/pkg/api/
resource/quantity.go): decimal SI ``n u m k M G T P E``, binary ``Ki Mi Gi Ti Pi Ei``, and a decimal
exponent ``e``/``E``. Fractions keep ``100m`` + ``900m`` == ``1`` exact, which the scheduler's fit
arithmetic needs. Limits: no canonical re-serialisation, no int64 overflow checks.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_FORM = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class InvalidQuantity(ValueError):
    """A quantity string that is not in Kubernetes' format; the message quotes it."""


def parse(value: object) -> Fraction:
    """The exact value of a quantity given as a string or a number."""
    if isinstance(value, bool):
        raise InvalidQuantity(f"quantity {value!r} is not a number")
    if isinstance(value, int | float):
        return Fraction(str(value))
    text = str(value).strip()
    match = _FORM.match(text)
    if match is None:
        raise InvalidQuantity(f"quantity {text!r} is not a Kubernetes quantity (e.g. 500m, 2Gi)")
    number, exponent, suffix = match.groups()
    base = Fraction(number)
    if exponent:
        return base * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix or ""]
