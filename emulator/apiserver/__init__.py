"""An in-process Kubernetes API server for tests and the demo (never imported by the product).

``server.ApiServer`` serves the REST API over real HTTP(S) and hands out in-process clients that go
through the same pipeline. Each module copies one upstream behaviour; docs/testing.md lists which.
"""
