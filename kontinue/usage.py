"""``--help`` for Kontinue's programs that take no arguments (their settings come from the
environment): print what the program is and where its settings are documented, exit 0; any
other argument is an error (exit 2), never silently ignored."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def handle(argv: Sequence[str], *, prog: str, summary: str, settings_doc: str) -> None:
    """Exit here for ``-h``/``--help`` (0) or any argument (2); return otherwise."""
    text = (
        f"usage: {prog}\n\n{summary.strip()}\n\n"
        f"Takes no arguments: every setting is an environment variable (KONTINUE_*), listed in "
        f"{settings_doc}.\n"
    )
    args = list(argv[1:])
    if not args:
        return
    if any(a in ("-h", "--help") for a in args):
        sys.stdout.write(text)
        raise SystemExit(0)
    sys.stderr.write(f"{prog}: unexpected arguments {' '.join(args)}\n\n{text}")
    raise SystemExit(2)
