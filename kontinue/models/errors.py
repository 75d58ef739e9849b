"""The one error for bad input to a model: which object, which fields, what is wrong with each."""

from __future__ import annotations

import dataclasses

import pydantic


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One problem at one field path, e.g. ``spec.storage.pvc.claimName: Field required``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(item)
    return "".join(parts)


class InvalidObject(ValueError):
    """An object failed validation; ``errors`` lists each field path and its problem."""

    def __init__(self, kind: str, field_errors: list[FieldError]) -> None:
        self.kind = kind
        self.errors = field_errors
        super().__init__(f"invalid {kind}: " + "; ".join(str(e) for e in field_errors))

    @classmethod
    def from_validation(cls, kind: str, exc: pydantic.ValidationError) -> InvalidObject:
        found: list[FieldError] = []
        for error in exc.errors():
            # Tagged unions and wrappers add type names to the location; keep only field names.
            loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p[:1].isupper()))
            found.append(FieldError(_path(loc), error["msg"]))
        return cls(kind, found)
