"""The only place that talks to the Kubernetes API."""
