"""Kubernetes access: the only code of ours that talks to an API server.

``resources`` names what we touch, ``client`` builds a kubernetes-asyncio ``ApiClient``,
``api`` makes requests with explicit content types, ``errors`` maps failures once.
"""
