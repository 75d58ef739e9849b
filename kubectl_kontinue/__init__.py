"""``kubectl kontinue``: the command line of Kontinue (a kubectl plugin, ``kubectl-kontinue``).

Talks to the cluster only through :mod:`kontinue.kube` with the user's kubeconfig; decides in
pure modules (:mod:`.lineages`, :mod:`.story`, :mod:`.health`); never imports the webhook, the
bridge or the emulator. docs/cli.md is its manual.
"""
