"""`glmctl doctor`'s decisions: from a snapshot of cluster facts to findings, each with its fix (pure code).

`facts.py` holds the snapshot and findings, `checks.py` the checks and their order, `gpus.py` and `webhooks.py`
the larger ones, `release.py` reads Helm's release record, `probe.py` the dry-run GLMDeployment. The I/O that
gathers a snapshot is `k8s/doctor.py`.
"""
