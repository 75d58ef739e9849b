"""The seeing commands (``status``, ``list``, ``describe``) and the opt-in ones (``enable``,
``disable``): each reads what it needs, asks a pure module, and prints.

Help pages live next to the code they describe, so a change to what a command does and to what
its ``--help`` says is one edit.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, TextIO

from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources
from kontinue.models import base
from kubectl_kontinue import gathering, health, lineages, printing, story

Obj = dict[str, Any]


class Refused(Exception):
    """The command will not do what was asked; the message says why and what to do instead."""


def _now() -> datetime.datetime:
    return base.now()


# --- list --------------------------------------------------------------------------------------


def list_help() -> str:
    return """\
One line per lineage (a workload across its incarnations) in the namespace, or in every
namespace with -A:

  OWNER         the workload: job/NAME (Volcano: job.batch.volcano.sh/NAME)
  QUEUE         its Kueue ClusterQueue or Volcano Queue; in parentheses, why it is not
                opted in (then nothing new of it is checkpointed)
  CHECKPOINTS   sets that Succeeded / Failed
  NEWEST GOOD   how long ago the newest Succeeded set was taken (and its step, when the
                workload reports one): what the next incarnation restores
  LAST RESTORE  the set the newest restored pod started from
  COLD STARTS   pods that started from zero, with a reason (see describe)
  -o wide adds running pods, their nodes, the newest good set's name and the owner's UID.

Examples:
  kubectl kontinue list
  kubectl kontinue list -A -o wide
  kubectl kontinue list job/train -n team-a -o yaml
"""


async def list_(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    scope = None if args.all_namespaces else namespace
    world = await gathering.gather(
        kube,
        namespace=scope,
        what=[gathering.PODS, gathering.JOBS, gathering.CHECKPOINTS, gathering.QUEUES],
    )
    _warn_unreadable(world)
    found = lineages.select(lineages.collect(world), owner=args.owner, namespace=scope)
    if args.owner and not found:
        raise Refused(
            f"no lineage of {lineages.normalize_owner(args.owner)} in namespace {namespace}: "
            "it has no checkpoints and no pod Kontinue plumbed (is its queue opted in? "
            "kubectl kontinue status)"
        )
    if args.output in ("json", "yaml"):
        print(printing.dump([lineages.to_data(i) for i in found], args.output), file=out)
        return 0
    if not found:
        where = "any namespace" if scope is None else f"namespace {scope}"
        print(f"No lineages found in {where}.", file=out)
        return 0
    now = _now()
    rows = [lineages.row(i, now=now) for i in found]
    columns = lineages.columns(all_namespaces=scope is None)
    print(printing.table(rows, columns, wide=args.output == "wide"), file=out)
    return 0


# --- describe ----------------------------------------------------------------------------------


def describe_help() -> str:
    return """\
The story of one workload, oldest first:

  Evicted     who evicted it (Kueue, Volcano, Scheduler, EvictionAPI, TaintManager, Manual),
              why, and which pods on which nodes
  Saved       its checkpoint set: members saved, bytes, how long the save took
  Set<Phase>  a set that Failed (and why) or Expired
  Restored    a pod that started from a set: which set, which node, restore time
  ColdStart   a pod that started from zero, and the reason the webhook gave
  Event ...   Events of the Job, its pods and its Checkpoints

Pods deleted by an eviction are gone from the API, so only restores of pods that still exist
are shown; every eviction and save is (until retention deletes the Checkpoint).

Examples:
  kubectl kontinue describe job/train
  kubectl kontinue describe job/train -n team-a -o json
"""


async def describe(
    args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO
) -> int:
    world = await gathering.gather(
        kube,
        namespace=namespace,
        what=[
            gathering.PODS,
            gathering.JOBS,
            gathering.CHECKPOINTS,
            gathering.QUEUES,
            gathering.EVENTS,
        ],
    )
    _warn_unreadable(world)
    found = lineages.select(lineages.collect(world), owner=args.owner, namespace=namespace)
    if not found:
        raise Refused(
            f"no lineage of {lineages.normalize_owner(args.owner)} in namespace {namespace}: "
            "it has no checkpoints and no pod Kontinue plumbed"
        )
    # A name reused by a new Job is a new lineage: show the current one first (it has a Job).
    found.sort(key=lambda i: (i.job is None, i.lineage.owner_uid))
    if args.output in ("json", "yaml"):
        data = [story.to_data(i, story.timeline(i, world.events)) for i in found]
        print(printing.dump(data if len(data) > 1 else data[0], args.output), file=out)
        return 0
    print("\n\n".join(story.render(i, story.timeline(i, world.events)) for i in found), file=out)
    return 0


# --- status ------------------------------------------------------------------------------------


def status_help() -> str:
    return f"""\
Checks the installation end to end and prints one line per check; a failing line ends with
"-- fix:" and what to do. Exit code 1 if any check fails.

  webhook   a server-side dry-run create of a pod in a namespace that feeds an opted-in
            queue (nothing is stored) comes back plumbed by Kontinue's webhook
  caBundle  both {health.WEBHOOK_CONFIGURATION} webhook configurations trust the CA in
            Secret {health.SYSTEM_NAMESPACE}/{health.WEBHOOK_SECRET}
  bridge    which replica holds the {health.BRIDGE_LEASE} Lease, since when, and whether
            it still renews it
  queues    each opted-in ClusterQueue / Volcano Queue -> its CheckpointPolicy -> for every
            namespace feeding it, the policy's PersistentVolumeClaim exists and is
            ReadWriteMany

Needs: create pods (dry run) in that namespace; get webhook configurations, the Secret and
the Lease in {health.SYSTEM_NAMESPACE}; list queues, LocalQueues, PodGroups, policies, PVCs.

Example:
  kubectl kontinue status
"""


async def _get(
    kube: kube_api.Api, resource: resources.Resource, name: str, **kw: Any
) -> Obj | None:
    try:
        return await kube.get(resource, name, **kw)
    except errors.NotFound:
        return None


async def status(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    del namespace  # status is cluster-wide
    world = await gathering.gather(kube, namespace=None, what=[gathering.QUEUES])
    queues = health.opted_in_queues(world)
    pvcs = {
        (ns, claim): await _get(kube, resources.PVCS, claim, namespace=ns)
        for ns, claim in health.claims_needed(queues)
    }
    target = health.probe_target(queues, pvcs)
    probe: health.Probe | None = None
    if target is not None:
        try:
            answer = await kube.create(resources.PODS, health.probe_pod(target), dry_run=True)
            probe = health.Probe(target.namespace, target.queue, plumbed=health.is_plumbed(answer))
        except errors.ApiError as exc:
            probe = health.Probe(target.namespace, target.queue, plumbed=False, error=str(exc))
    lines = health.webhook_lines(probe)
    configurations = {
        "MutatingWebhookConfiguration": await _get(
            kube, resources.MUTATING_WEBHOOKS, health.WEBHOOK_CONFIGURATION
        ),
        "ValidatingWebhookConfiguration": await _get(
            kube, resources.VALIDATING_WEBHOOKS, health.WEBHOOK_CONFIGURATION
        ),
    }
    secret = await _get(
        kube, resources.SECRETS, health.WEBHOOK_SECRET, namespace=health.SYSTEM_NAMESPACE
    )
    lines += health.ca_bundle_lines(configurations, secret)
    lease = await _get(
        kube, resources.LEASES, health.BRIDGE_LEASE, namespace=health.SYSTEM_NAMESPACE
    )
    lines += health.leader_lines(lease, now=_now())
    lines += health.queue_lines(queues, pvcs)
    for what, why in sorted(world.unreadable.items()):
        lines.append(health.Line(False, what, f"cannot list: {why}", "ask for list RBAC"))
    if args.output in ("json", "yaml"):
        data = [
            {"ok": line.ok, "subject": line.subject, "text": line.text, "fix": line.fix}
            for line in lines
        ]
        print(printing.dump(data, args.output), file=out)
    else:
        print("\n".join(line.render() for line in lines), file=out)
    return 0 if all(line.ok for line in lines) else 1


# --- enable / disable --------------------------------------------------------------------------


def optin_help(verb: str) -> str:
    if verb == "enable":
        return f"""\
Opt a queue in: every workload admitted through it is checkpointed when it is evicted and
restored from its newest good checkpoint when it runs again. Sets the labels
{keys.ENABLED_LABEL}="true" and (with --policy) {keys.POLICY_LABEL}=P on the queue.

Kontinue's validating webhook refuses a policy that does not exist; the refusal is printed
as the webhook gave it. Without --policy the queue keeps the policy it names, else uses the
CheckpointPolicy "default" (or the built-in default).

Examples:
  kubectl kontinue enable clusterqueue gpu-cq --policy nfs
  kubectl kontinue enable queue research          # a Volcano Queue
"""
    return f"""\
Opt a queue out: removes {keys.ENABLED_LABEL} from it. Workloads already running keep the
plumbing they were admitted with; new pods are left alone. Checkpoints already taken stay
until retention removes them. The policy label is kept, so a later "enable" without
--policy uses the same policy.

Examples:
  kubectl kontinue disable clusterqueue gpu-cq
  kubectl kontinue disable queue research
"""


def _queue_resource(kind: str) -> resources.Resource:
    return resources.CLUSTER_QUEUES if kind == "clusterqueue" else resources.VOLCANO_QUEUES


async def _label_queue(
    args: argparse.Namespace, kube: kube_api.Api, labels: dict[str, str | None], out: TextIO
) -> Obj:
    resource = _queue_resource(args.kind)
    what = f"{args.kind} {args.name}"
    try:
        return await kube.merge_patch(resource, args.name, {"metadata": {"labels": labels}})
    except errors.NotFound as exc:
        system = "Kueue" if args.kind == "clusterqueue" else "Volcano"
        raise Refused(f"{what} not found ({system} installed? {exc})") from exc
    except (errors.Invalid, errors.Forbidden) as exc:
        if "denied the request" in str(exc):
            raise Refused(f"{what}: {exc}") from exc
        raise


async def enable(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    del namespace
    labels: dict[str, str | None] = {keys.ENABLED_LABEL: "true"}
    if args.policy:
        labels[keys.POLICY_LABEL] = args.policy
    queue = await _label_queue(args, kube, labels, out)
    policy_name = ((queue.get("metadata") or {}).get("labels") or {}).get(
        keys.POLICY_LABEL
    ) or keys.DEFAULT_POLICY_NAME
    print(f"{args.kind}/{args.name} enabled (policy {policy_name})", file=out)
    return 0


async def disable(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    del namespace
    await _label_queue(args, kube, {keys.ENABLED_LABEL: None}, out)
    print(f"{args.kind}/{args.name} disabled", file=out)
    return 0


def _warn_unreadable(world: gathering.World) -> None:
    import sys

    for what, why in sorted(world.unreadable.items()):
        print(f"warning: cannot list {what}: {why}", file=sys.stderr)
