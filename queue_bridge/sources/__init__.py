"""Pure eviction detectors, one per source: ``kueue`` (Workload ``Evicted``), ``volcano``
(the scheduler's evictor), ``disruption`` (kube-scheduler preemption, Eviction API, taint manager).

Each turns a typed object (and the previous version the watch saw, when there is one) into a
``checkpoint.Trigger`` or ``None``. No I/O: the reconciler decides what to create from the result.
"""
