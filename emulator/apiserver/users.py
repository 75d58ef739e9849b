"""Who is calling: a user name becomes the ``userInfo`` a real authenticator would produce.

Groups follow the authenticators of a kubeadm-style cluster (recorded in tests/fixtures/admission):
service accounts get ``system:serviceaccounts`` and ``system:serviceaccounts:<ns>`` plus a uid;
nodes ``system:nodes``; ``admin`` (the client-certificate admin) ``system:masters``; everyone
``system:authenticated``. The emulator does no authorization: every known user may do anything.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

_NAMESPACE = uuid.UUID("6f1c1b8e-1d0a-4c36-9d5e-5b1f0d9c2a11")


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]
    uid: str = ""

    def info(self) -> dict[str, Any]:
        """``authentication.k8s.io/v1 UserInfo`` as an AdmissionReview carries it."""
        info: dict[str, Any] = {"username": self.name}
        if self.uid:
            info["uid"] = self.uid
        info["groups"] = list(self.groups)
        return info


def user(name: str, *, groups: tuple[str, ...] | None = None) -> User:
    if groups is not None:
        return User(name, groups)
    if name.startswith("system:serviceaccount:"):
        namespace = name.split(":")[2]
        return User(
            name,
            (
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
            str(uuid.uuid5(_NAMESPACE, name)),
        )
    if name.startswith("system:node:"):
        return User(name, ("system:nodes", "system:authenticated"))
    if name == "admin":
        return User(name, ("system:masters", "system:authenticated"))
    return User(name, ("system:authenticated",))
