"""The live loop: the machinery between kopf's registrations (handlers/) and the pure decisions (planner/).

The per-deployment work queue (`coalesce.py`), retries with backoff (`retry.py`), the store of observed objects
(`observed.py`), refreshing a deployment through them (`refreshes.py`), the runtime context built once at start-up
(`runtime.py`), the per-pod canary gate loop (`gate_loop.py`), a canary run's progress written to status
(`canary_progress.py`), following kopf's peering so the gates pause with it (`peering.py`), and the context work
outliving its handler runs in (`detached.py`). It may use kopf (Events, retry errors) and the Kubernetes API through
`k8s/`; nothing here decides what to deploy.
"""
