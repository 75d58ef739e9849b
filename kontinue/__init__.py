"""Kontinue's shared package: the API, the keys, Kubernetes access and telemetry.

Both deployables (``webhook`` and ``queue_bridge``) import from here and from nowhere else of
ours; this package imports neither of them. Import modules, not names::

    from kontinue import keys
    from kontinue.models import policy
"""
