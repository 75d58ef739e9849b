"""Emulated Kueue (kubernetes-sigs/kueue ``ff69552e79ad``, API ``kueue.x-k8s.io/v1beta2``).

What a real Kueue does to ``batch/v1`` Jobs, Workloads and ClusterQueues, reproduced on the API
emulator so the whole eviction/readmission flow runs in tests: the Job webhook's ``suspend``
default (``webhook``), Workload construction (``workloads``), flavor assignment, quota and
preemption (``quota``), pod-set info stamping and restore (``podsets``), condition bookkeeping
(``conditions``) and the controllers that write it all in upstream order (``controller``).
Each module names the upstream file it copies; see docs/cluster-emulation-queues.md.
"""
