"""How the watch caches wait: capped exponential backoff with jitter, and watch timeouts.

Both follow client-go's reflector (``staging/src/k8s.io/client-go/tools/cache/reflector.go``):
failed lists and watches back off exponentially up to a cap, with jitter, and each watch asks
the server to end the stream after ``minWatchTimeout`` x [1, 2).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with jitter: attempt ``n`` waits ``initial * factor**(n-1)``.

    The delay is capped at ``cap`` and then shortened by up to ``jitter`` (a fraction), so many
    caches that lost the same server do not reconnect in lockstep and no delay exceeds ``cap``.
    """

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not self.initial > 0:
            raise ValueError(f"Backoff.initial must be > 0, got {self.initial}")
        if not self.factor >= 1:
            raise ValueError(f"Backoff.factor must be >= 1, got {self.factor}")
        if not self.cap >= self.initial:
            raise ValueError(f"Backoff.cap must be >= initial ({self.initial}), got {self.cap}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff.jitter must be within [0, 1], got {self.jitter}")

    def delay(self, attempt: int, *, rand: float) -> float:
        """Seconds to wait before retry ``attempt`` (1-based); ``rand`` is uniform in [0, 1)."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        exponent = min(attempt - 1, 64)  # beyond this every delay is the cap anyway
        ceiling = min(self.cap, self.initial * self.factor**exponent)
        return ceiling * (1.0 - self.jitter * rand)


def watch_timeout(minimum: float, *, rand: float) -> int:
    """The ``timeoutSeconds`` of one watch: ``minimum`` x [1, 2), as client-go's reflector does.

    The server ends the stream after it, so no watch hangs forever on a half-dead connection and
    many clients' reconnects spread out.
    """
    return max(1, int(minimum * (1.0 + rand)))
