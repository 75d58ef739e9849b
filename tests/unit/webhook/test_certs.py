"""Certificates, checked with a real path validator (cryptography's WebPKI ``ServerVerifier``,
the same RFC 5280 rules a TLS client applies) and by an ``ssl`` context loading them.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.x509 import verification

from webhook import certs, settings

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
NAMES = settings.Settings().hostnames


def _verify(bundle: certs.Bundle, name: verification.Subject, *, at: datetime.datetime) -> None:
    store = verification.Store(x509.load_pem_x509_certificates(bundle.trust))
    verifier = verification.PolicyBuilder().store(store).time(at).build_server_verifier(name)
    verifier.verify(bundle.serving.cert, [])


def test_serving_certificate_validates_for_every_service_name() -> None:
    bundle = certs.new_bundle(names=[*NAMES, "127.0.0.1"], now=NOW)
    for name in NAMES:
        _verify(bundle, x509.DNSName(name), at=NOW)
    _verify(bundle, x509.IPAddress(ipaddress.ip_address("127.0.0.1")), at=NOW)


def test_serving_certificate_does_not_validate_for_other_names() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    with pytest.raises(verification.VerificationError):
        _verify(bundle, x509.DNSName("evil.example"), at=NOW)


def test_serving_certificate_does_not_validate_against_another_ca() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    stranger = certs.new_bundle(names=NAMES, now=NOW)
    mixed = certs.Bundle(ca=stranger.ca, serving=bundle.serving, trust=stranger.trust)
    with pytest.raises(verification.VerificationError):
        _verify(mixed, x509.DNSName(NAMES[0]), at=NOW)


def test_ca_is_a_ca_and_leaf_is_not() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    ca = bundle.ca.cert
    leaf = bundle.serving.cert
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert ca.issuer == ca.subject
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert leaf.issuer == ca.subject
    cn = leaf.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
    assert cn == NAMES[0]


def test_sans_are_split_normalised_and_unusable_addresses_dropped() -> None:
    dns, ips = certs.split_names(
        ["Svc.NS.svc.", "svc.ns.svc", "0.0.0.0", "::", "10.0.0.1", "[::1]", " ", "10.0.0.1"]
    )
    assert dns == ["svc.ns.svc"]
    assert ips == [ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("::1")]


def test_ip_only_certificate_takes_its_cn_from_the_ip() -> None:
    ca = certs.make_ca(now=NOW)
    leaf = certs.issue(ca, names=["0.0.0.0", "127.0.0.1"], now=NOW).cert
    cn = leaf.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
    assert cn == "127.0.0.1"


def test_no_usable_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        certs.issue(certs.make_ca(now=NOW), names=["0.0.0.0", ""], now=NOW)


def test_leaf_never_outlives_its_ca() -> None:
    ca = certs.make_ca(now=NOW, valid_for=datetime.timedelta(days=10))
    leaf = certs.issue(ca, names=NAMES, now=NOW).cert
    assert leaf.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_ssl_accepts_the_pair_and_requires_tls12() -> None:
    from webhook import tls

    bundle = certs.new_bundle(names=NAMES, now=NOW)
    serving = tls.ServingCertificate()
    assert serving.load(bundle.serving.cert_pem, bundle.serving.key_pem) is True
    assert serving.load(bundle.serving.cert_pem, bundle.serving.key_pem) is False
    assert serving.context.minimum_version == ssl.TLSVersion.TLSv1_2
    other = certs.new_bundle(names=NAMES, now=NOW)
    with pytest.raises(ssl.SSLError):
        serving.load(bundle.serving.cert_pem, other.serving.key_pem)
    assert serving.loads == 1


@pytest.mark.parametrize(
    ("when", "names", "why"),
    [
        (NOW, NAMES, ""),
        (NOW + datetime.timedelta(days=340), NAMES, "expires"),
        (NOW, [*NAMES, "extra.example"], "lacks extra.example"),
    ],
)
def test_needs_renewal(when: datetime.datetime, names: list[str], why: str) -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    reason = certs.needs_renewal(bundle, names=names, now=when)
    assert (why in reason) if why else reason == ""


def test_leaf_signed_by_another_ca_needs_renewal() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    stranger = certs.new_bundle(names=NAMES, now=NOW)
    mixed = certs.Bundle(ca=bundle.ca, serving=stranger.serving, trust=bundle.trust)
    assert certs.needs_renewal(mixed, names=NAMES, now=NOW) == (
        "serving certificate is not signed by the CA"
    )


def test_renewal_keeps_a_healthy_ca() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    later = NOW + datetime.timedelta(days=340)
    renewed = certs.renew(bundle, names=NAMES, now=later)
    assert renewed.ca == bundle.ca
    assert renewed.trust == bundle.trust
    assert renewed.serving != bundle.serving
    _verify(renewed, x509.DNSName(NAMES[0]), at=later)


def test_ca_rollover_keeps_trusting_the_old_ca_until_it_expires() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    late = bundle.ca.cert.not_valid_after_utc - datetime.timedelta(days=100)
    renewed = certs.renew(bundle, names=NAMES, now=late)
    assert renewed.ca != bundle.ca
    trusted = x509.load_pem_x509_certificates(renewed.trust)
    assert [c.subject for c in trusted] == [renewed.ca.cert.subject, bundle.ca.cert.subject]
    assert trusted[1] == bundle.ca.cert
    # a replica still serving the old leaf stays trusted through the new bundle
    old_leaf = certs.Bundle(ca=bundle.ca, serving=bundle.serving, trust=renewed.trust)
    _verify(old_leaf, x509.DNSName(NAMES[0]), at=NOW + datetime.timedelta(days=1))
    _verify(renewed, x509.DNSName(NAMES[0]), at=late)


def test_secret_round_trip_and_garbage() -> None:
    bundle = certs.new_bundle(names=NAMES, now=NOW)
    data = certs.to_secret_data(bundle)
    assert sorted(data) == sorted(certs.SECRET_KEYS)
    assert certs.from_secret_data(data) == bundle
    assert certs.from_secret_data(None) is None
    assert certs.from_secret_data({}) is None
    assert certs.from_secret_data({**data, "tls.crt": ""}) is None
    assert certs.from_secret_data({**data, "tls.crt": "bm90IGEgY2VydA=="}) is None
    assert certs.from_secret_data({**data, "ca.crt": "%%%"}) is None
