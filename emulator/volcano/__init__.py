"""Emulated Volcano (volcano-sh/volcano ``ed72c7c815a9``): the vc-controller's Job → PodGroup +
pods and its restart policies (``controller``, ``jobs``), and the scheduler's allocate plus
preempt/reclaim with the evictor's exact writes (``scheduler``, ``victims``). Each module names
the upstream file it copies; see docs/cluster-emulation-queues.md."""
