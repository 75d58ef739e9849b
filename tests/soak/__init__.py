"""The seeded fault soak (issues 11 and 19): evictions from every source under injected faults
on the emulated cluster, of an Indexed Job, a JobSet of 2 replicated Jobs x 2 pods and a Volcano
Job of 2 tasks x 2 pods, with the whole-set, own-identity, namespace, retention, finalizer and
liveness invariants checked after every round. ``make soak SEED=n`` runs it; a short run of each
shape is part of ``make test`` (tests/soak/test_soak.py). docs/security.md, "Fault soak", has
the numbers."""
