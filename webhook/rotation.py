"""Keeping the served certificate current: the loops that join :mod:`certs` and :mod:`tls`.

Mode ``self``: every ``interval`` each replica re-reads the Secret (:func:`certs.ensure_secret`
renews it when due; whichever replica writes first wins, the others adopt its certificate), loads
it if it changed, and makes sure our named configurations carry the trust bundle. Re-reading
rather than trusting memory means a replica also picks up a renewal another replica made, and a
caBundle someone overwrote is put back within one interval.

Mode ``files`` (cert-manager): :func:`tls.watch_files` polls the mounted pair; cert-manager's
cainjector owns caBundle.

Errors (API down, Secret unreadable) are logged and retried next interval; the certificate being
served keeps serving meanwhile, and it is valid for months.
"""

from __future__ import annotations

import asyncio
import logging

from kontinue.kube import api as kube_api
from kontinue.kube import errors
from webhook import certs, settings, tls

logger = logging.getLogger("kontinue.webhook.rotation")


async def sync_once(
    api: kube_api.Api, serving: tls.ServingCertificate, config: settings.Settings
) -> certs.Bundle:
    """Ensure the Secret holds a valid bundle, serve it, and publish its trust bundle."""
    bundle = await certs.ensure_secret(
        api, namespace=config.namespace, name=config.secret, names=config.hostnames
    )
    if serving.load(bundle.serving.cert_pem, bundle.serving.key_pem):
        logger.info(
            "serving certificate serial=%x not_after=%s",
            bundle.serving.cert.serial_number,
            bundle.serving.cert.not_valid_after_utc.isoformat(),
        )
    await certs.patch_ca_bundle(
        api,
        trust=bundle.trust,
        mutating=config.mutating_configuration,
        validating=config.validating_configuration,
    )
    return bundle


async def keep_current(
    api: kube_api.Api,
    serving: tls.ServingCertificate,
    config: settings.Settings,
    *,
    interval: float,
) -> None:
    """Run :func:`sync_once` every ``interval`` seconds until cancelled."""
    while True:
        await asyncio.sleep(interval)
        try:
            await sync_once(api, serving, config)
        except errors.ApiError as exc:
            logger.warning("certificate sync failed, retrying in %ss: %s", interval, exc)
