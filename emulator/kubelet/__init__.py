"""The emulated kubelet: containers as real local subprocesses, pod status as v1.36.2 writes it.

Layers, each usable alone: ``expansion`` ($(VAR) rules), ``launch`` (pod + container -> a runnable
plan: env, argv, paths), ``runtime`` (real processes, signals, termination messages), ``status``
(pure: what the kubelet writes), ``worker`` (one pod's lifecycle, emitting statuses to a sink). An
agent that watches bound pods and writes through the API only wires a ``worker`` per pod.
"""
