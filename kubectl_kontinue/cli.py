"""``kubectl kontinue``: see each workload's checkpoint story, and move running jobs.

The console script ``kubectl-kontinue`` (kubectl runs any ``kubectl-<name>`` on ``PATH`` as
``kubectl <name>``, https://kubernetes.io/docs/tasks/extend-kubectl/kubectl-plugins/). This
module owns the command line only: flags as kubectl spells them (``--kubeconfig``,
``--context``, ``-n``, ``-A``, ``-o json|yaml|wide``), the help pages, exit codes, and turning
errors into one line a person can act on. Reading is :mod:`~kubectl_kontinue.gathering`,
deciding is in the pure modules, printing is :mod:`~kubectl_kontinue.printing`.

Exit codes: 0 done; 1 refused or failed (the reason is on stderr; ``status`` with a failing
check); 2 a usage error (argparse's).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from kontinue.kube import api as kube_api
from kontinue.kube import client as kube_client
from kontinue.kube import errors
from kubectl_kontinue import commands, moves, printing

PROG = "kubectl kontinue"


def _common(*, namespaced: bool = True, output: Sequence[str] = printing.FORMATS) -> Any:
    parent = argparse.ArgumentParser(add_help=False)
    conn = parent.add_argument_group("cluster (as kubectl)")
    conn.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    conn.add_argument("--context", help="kubeconfig context (default: the current one)")
    if namespaced:
        conn.add_argument(
            "-n", "--namespace", help="namespace (default: the context's, else 'default')"
        )
    if output:
        parent.add_argument(
            "-o",
            "--output",
            choices=list(output),
            help="json or yaml: the same data, machine-readable"
            + ("; wide: more columns" if "wide" in output else ""),
        )
    return parent


EPILOG = """\
A lineage is one workload across all its incarnations: its Job (or JobSet, vcjob) by
namespace, kind, name and UID. Kontinue checkpoints it at each eviction and restores the
next incarnation from the newest good checkpoint. Docs: docs/cli.md.
"""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="See every workload's checkpoints, evictions and restores; move running "
        "jobs to other nodes without losing their work.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "status",
        parents=[_common(namespaced=False, output=("json", "yaml"))],
        help="is Kontinue healthy: webhook, caBundle, bridge leader, queues, storage",
        description=commands.status_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(run=commands.status)

    p = sub.add_parser(
        "list",
        parents=[_common()],
        help="one line per lineage: queue, checkpoints, newest good, last restore, cold starts",
        description=commands.list_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("owner", nargs="?", metavar="job/NAME", help="only this workload")
    p.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (not with -n)"
    )
    p.set_defaults(run=commands.list_)

    p = sub.add_parser(
        "describe",
        parents=[_common(output=("json", "yaml"))],
        help="a lineage's timeline: evictions, checkpoint sets, restores, cold starts",
        description=commands.describe_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("owner", metavar="job/NAME", help="the workload (its Job, JobSet, vcjob)")
    p.set_defaults(run=commands.describe)

    for verb in ("enable", "disable"):
        p = sub.add_parser(
            verb,
            parents=[_common(namespaced=False, output=())],
            help=f"{verb} checkpoints for every workload of a Kueue ClusterQueue or Volcano Queue",
            description=commands.optin_help(verb),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "kind",
            choices=["clusterqueue", "queue"],
            help="clusterqueue: a Kueue ClusterQueue; queue: a Volcano Queue",
        )
        p.add_argument("name", help="the queue's name")
        if verb == "enable":
            p.add_argument(
                "--policy",
                help="the CheckpointPolicy to use (default: the queue's current one, else "
                "'default')",
            )
        p.set_defaults(run=commands.enable if verb == "enable" else commands.disable)
    moves.add_parsers(sub, _common)
    return top


Command = Callable[[argparse.Namespace, kube_api.Api, str, TextIO], Awaitable[int]]


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    api_client, namespace = await kube_client.for_user(
        kubeconfig=args.kubeconfig, context=args.context
    )
    try:
        kube = kube_api.Api(api_client, field_manager="kubectl-kontinue")
        if getattr(args, "namespace", None):
            namespace = args.namespace
        run: Command = args.run
        return await run(args, kube, namespace, out)
    finally:
        await api_client.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Library warnings (the kubeconfig loader's, say) would repeat our own one-line error.
    logging.basicConfig(level=logging.ERROR, format=f"{PROG}: %(message)s")
    if getattr(args, "all_namespaces", False) and getattr(args, "namespace", None):
        print(f"{PROG}: -A and -n cannot be used together", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, sys.stdout))
    except commands.Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except kube_client.KubeconfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except errors.Forbidden as exc:
        print(f"error: not allowed: {exc}", file=sys.stderr)
        return 1
    except errors.ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
