"""glmops: a Kubernetes operator that deploys GLM-5.x models on vLLM and keeps broken ones from serving."""

__version__ = "0.1.0"
