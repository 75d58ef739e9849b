"""An in-process Kubernetes API emulator and emulated GPU cluster, for tests and the demo.

Never imported by ``kontinue``, ``webhook`` or ``queue_bridge``.
"""
