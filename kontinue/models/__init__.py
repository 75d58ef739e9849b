"""Typed models: our CRDs (``checkpoint``, ``policy``) and the upstream objects we read.

Upstream models (``core``, ``kueue``, ``volcano``) keep every field they do not name, so an object
read, changed and written back loses nothing. Our own models forbid unknown fields, so a typo in a
``CheckpointPolicy`` is an error that names the field rather than a silently ignored setting.
"""
