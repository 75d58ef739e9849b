"""A real Kubernetes control plane on 127.0.0.1, from a ``KUBEBUILDER_ASSETS`` directory.

The same idea as controller-runtime's envtest (sigs.k8s.io/controller-runtime
``pkg/internal/testing/controlplane``): etcd and kube-apiserver as child processes, bound to the
loopback only, with throw-away keys; kube-controller-manager and kube-scheduler on demand. The
assets directory holds ``etcd``, ``kube-apiserver``, ``kube-controller-manager``,
``kube-scheduler`` and ``kubectl`` (``tests/realcp/prepare-assets.sh`` fills one).

Identities come from a static token file (``--token-auth-file``): ``admin`` is in
``system:masters``; the controller-manager and the scheduler use their bootstrap user names
(``system:kube-controller-manager``, ``system:kube-scheduler``), which the apiserver's bootstrap
RBAC policy grants what they need (kubernetes/kubernetes
``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``). Authorization is ``Node,RBAC``,
as on a real cluster; ServiceAccount tokens come from the TokenRequest API.

Nothing here is product code; the tier's fixtures (``tests/realcp/conftest.py``) own one
instance per pytest session.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.apiserver import tls

ASSETS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
SERVICE_CIDR = "10.0.0.0/24"
"""Only allocated (the ``kubernetes`` Service's cluster IP); nothing here routes to it."""
ISSUER = "https://kubernetes.default.svc.cluster.local"

# Controllers the tier needs (kube-controller-manager --controllers): the job controller, the
# garbage collector and the namespace controller for the Kueue flow and namespace clean-up, the
# service-account controllers for pods' default ServiceAccount and its token, the taint-eviction
# and pod-GC controllers for pod disruptions. The rest (deployments, nodes' IPAM, ...) would only
# spend the machine's two cores.
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "taint-eviction-controller",
    "resourcequota-controller",
)


class AssetsMissing(RuntimeError):
    """``KUBEBUILDER_ASSETS`` is unset or lacks a binary: the tier cannot run here."""


def find_assets(env: Mapping[str, str] | None = None) -> Path:
    """The assets directory named by ``KUBEBUILDER_ASSETS``, with every binary present."""
    env = os.environ if env is None else env
    raw = env.get("KUBEBUILDER_ASSETS", "")
    if not raw:
        raise AssetsMissing(
            "KUBEBUILDER_ASSETS is not set (tests/realcp/prepare-assets.sh prepares a directory)"
        )
    directory = Path(raw)
    missing = [name for name in ASSETS if not os.access(directory / name, os.X_OK)]
    if missing:
        raise AssetsMissing(f"KUBEBUILDER_ASSETS={raw} lacks {', '.join(missing)}")
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclasses.dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclasses.dataclass
class ControlPlane:
    """One etcd + kube-apiserver (+ controller-manager, scheduler) on 127.0.0.1."""

    assets: Path
    workdir: Path
    port: int
    ca_pem: bytes
    tokens: dict[str, str]
    processes: dict[str, Process] = dataclasses.field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- identities ---------------------------------------------------------------------------

    def kubeconfig(self, user: str = "admin", *, token: str | None = None) -> dict[str, Any]:
        """A kubeconfig for one of the token-file users, or for any bearer ``token``."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "realcp",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token or self.tokens[user]}}],
            "contexts": [{"name": "realcp", "context": {"cluster": "realcp", "user": user}}],
            "current-context": "realcp",
        }

    def kubeconfig_file(self, user: str = "admin", *, token: str | None = None) -> Path:
        path = self.workdir / "kubeconfigs" / f"{user.replace(':', '_')}-{secrets.token_hex(4)}"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(user, token=token)))
        path.chmod(0o600)
        return path

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        user: str = "admin",
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane; ``check`` raises with its stderr."""
        done = subprocess.run(
            [str(self.assets / "kubectl"), "--kubeconfig", str(self._admin_file(user)), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}"
            )
        return done

    def _admin_file(self, user: str) -> Path:
        path = self.workdir / f"kubeconfig-{user.replace(':', '_')}"
        if not path.exists():
            path.write_text(yaml.safe_dump(self.kubeconfig(user)))
            path.chmod(0o600)
        return path

    def audit(self, user_prefix: str = "system:serviceaccount:") -> list[dict[str, Any]]:
        """Audit events so far (``ResponseComplete``/``ResponseStarted``) of matching users."""
        events = []
        with (self.workdir / "audit.log").open() as log:
            for line in log:
                event = json.loads(line)
                if event["user"]["username"].startswith(user_prefix):
                    events.append(event)
        return events

    def metrics(self) -> str:
        """kube-apiserver's /metrics (Prometheus text), as admin."""
        status, body = self._get("/metrics")
        assert status == 200, body[:500]
        return body

    def wait_established(self, names: Sequence[str], timeout: float = 60.0) -> None:
        """Until every named CRD has ``Established=True`` (``kubectl wait`` fails on a CRD
        whose status has no conditions yet, so poll instead)."""
        deadline = time.monotonic() + timeout
        waiting = set(names)
        while True:
            listed = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            waiting -= {
                crd["metadata"]["name"]
                for crd in listed
                if any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in (crd.get("status") or {}).get("conditions") or []
                )
            }
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"CRDs not Established after {timeout} s: {sorted(waiting)}")
            time.sleep(0.2)

    # -- lifecycle ------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> Process:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,  # a Ctrl-C at the terminal reaches pytest only
            )
        process = Process(name, popen, log)
        self.processes[name] = process
        return process

    def _get(self, path: str, user: str = "admin") -> tuple[int, str]:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.tokens[user]}"}
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, ssl.SSLError) as exc:
            return 0, str(exc)

    def _wait(self, process: Process, ready: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise RuntimeError(
                    f"{process.name} exited {process.popen.returncode} before {what}:\n"
                    + process.tail()
                )
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{process.name}: no {what} after {timeout} s:\n{process.tail()}")

    def start_controller_manager(self) -> None:
        if "kube-controller-manager" in self.processes:
            return
        process = self._spawn(
            "kube-controller-manager",
            [
                str(self.assets / "kube-controller-manager"),
                f"--kubeconfig={self._admin_file('system:kube-controller-manager')}",
                "--use-service-account-credentials",
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.workdir / 'ca.crt'}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--concurrent-job-syncs=5",
            ],
        )
        # Ready when it has created the `default` ServiceAccount of the `default` namespace.
        self._wait(
            process,
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            "default ServiceAccount",
            60,
        )

    def start_scheduler(self) -> None:
        if "kube-scheduler" in self.processes:
            return
        process = self._spawn(
            "kube-scheduler",
            [
                str(self.assets / "kube-scheduler"),
                f"--kubeconfig={self._admin_file('system:kube-scheduler')}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
        )
        time.sleep(0.5)
        if process.popen.poll() is not None:
            raise RuntimeError(f"kube-scheduler exited at start:\n{process.tail()}")

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            if name in self.processes:
                self.processes[name].stop()


def _write_keys(workdir: Path) -> bytes:
    """CA + serving certificate for 127.0.0.1, and the service-account signing key."""
    ca = tls.make_ca("realcp-ca")
    serving = tls.issue(ca, hosts=["127.0.0.1", "localhost", "kubernetes.default.svc"])
    (workdir / "ca.crt").write_bytes(ca.cert_pem)
    (workdir / "apiserver.crt").write_bytes(serving.cert_pem + ca.cert_pem)
    (workdir / "apiserver.key").write_bytes(serving.key_pem)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (workdir / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (workdir / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ca.cert_pem


def start(assets: Path, *, workdir: Path | None = None, timeout: float = 90.0) -> ControlPlane:
    """Start etcd and kube-apiserver; return once ``/readyz`` is ok. ``stop()`` ends both."""
    if workdir is None:
        # tmpfs where there is one: etcd fsyncs every write (3.4 has no --unsafe-no-fsync).
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        workdir = Path(tempfile.mkdtemp(prefix="kontinue-realcp-", dir=base))
    workdir.mkdir(parents=True, exist_ok=True)
    ca_pem = _write_keys(workdir)
    tokens = {
        user: secrets.token_urlsafe(24)
        for user in ("admin", "system:kube-controller-manager", "system:kube-scheduler")
    }
    groups = {"admin": "system:masters"}
    (workdir / "tokens.csv").write_text(
        "".join(
            f'{token},{user},uid-{user.replace(":", "-")},"{groups.get(user, "")}"\n'
            for user, token in tokens.items()
        )
    )
    # Every request of a ServiceAccount (the webhook's and the bridge's, the controllers'), at
    # Metadata level: who, verb, resource, and the response code (tests/realcp/test_rbac.py).
    (workdir / "audit-policy.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [
                    {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                    {"level": "None"},
                ],
            }
        )
    )
    # As GKE configures it: pods at the critical priority classes need a matching ResourceQuota
    # in their namespace (plugin/pkg/admission/resourcequota, limitedResources).
    (workdir / "admission.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {
                        "name": "ResourceQuota",
                        "configuration": {
                            "apiVersion": "apiserver.config.k8s.io/v1",
                            "kind": "ResourceQuotaConfiguration",
                            "limitedResources": [
                                {
                                    "resource": "pods",
                                    "matchScopes": [
                                        {
                                            "scopeName": "PriorityClass",
                                            "operator": "In",
                                            "values": [
                                                "system-node-critical",
                                                "system-cluster-critical",
                                            ],
                                        }
                                    ],
                                }
                            ],
                        },
                    }
                ],
            }
        )
    )
    plane = ControlPlane(
        assets=assets, workdir=workdir, port=free_port(), ca_pem=ca_pem, tokens=tokens
    )
    try:
        client_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = plane._spawn(
            "etcd",
            [
                str(assets / "etcd"),
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--snapshot-count=100000",
                # As kubeadm starts it (cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand):
                # a progress notification on every watch each 5 s, so the apiserver's watch
                # caches of quiet resources keep up with etcd's revision (etcd's default: 10 min).
                progress_notify_flag(etcd_version(assets / "etcd")) + "=5s",
            ],
        )
        plane._wait(etcd, lambda: _http_ok(f"{etcd_url}/health"), "/health", 30)
        apiserver = plane._spawn(
            "kube-apiserver",
            [
                str(assets / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={plane.port}",
                f"--tls-cert-file={workdir / 'apiserver.crt'}",
                f"--tls-private-key-file={workdir / 'apiserver.key'}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={workdir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # A webhook's Service reference resolves to its endpoints' IPs (none here), never
                # through DNS: nothing may leave the loopback (tests register webhooks by URL).
                "--enable-aggregator-routing=true",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={workdir / 'certs'}",
                f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
                f"--admission-control-config-file={workdir / 'admission.yaml'}",
                f"--audit-log-path={workdir / 'audit.log'}",
                "--audit-log-format=json",
            ],
        )
        plane._wait(apiserver, lambda: plane._get("/readyz")[0] == 200, "/readyz ok", timeout)
    except BaseException:
        plane.stop()
        raise
    return plane


def etcd_version(binary: Path) -> tuple[int, int, int]:
    """``etcd --version``'s version, ``(0, 0, 0)`` when it does not say."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=False, timeout=30
    ).stdout
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            parts = line.split(":", 1)[1].strip().split("-", 1)[0].split(".")
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                return int(parts[0]), int(parts[1]), int(parts[2])
    return 0, 0, 0


def serves_consistent_lists(version: tuple[int, int, int]) -> bool:
    """Whether kube-apiserver serves a consistent LIST from its watch cache with this etcd:
    3.4.31+ or 3.5.13+ answer watch progress requests correctly (kubernetes/kubernetes
    ``staging/src/k8s.io/apiserver/pkg/storage/feature/feature_support_checker.go``); with an
    older one every consistent LIST is read from etcd (``cacher/delegator.go``
    ``shouldDelegateList``)."""
    return version >= (3, 5, 13) or (3, 4, 31) <= version < (3, 5, 0)


def progress_notify_flag(version: tuple[int, int, int]) -> str:
    """etcd 3.6 renamed ``--experimental-watch-progress-notify-interval``; 3.7 dropped the old
    name."""
    if version >= (3, 6, 0):
        return "--watch-progress-notify-interval"
    return "--experimental-watch-progress-notify-interval"


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200 and json.loads(response.read()).get("health"))
    except (OSError, ValueError):
        return False


def remove(plane: ControlPlane) -> None:
    plane.stop()
    with contextlib.suppress(OSError):
        shutil.rmtree(plane.workdir)
