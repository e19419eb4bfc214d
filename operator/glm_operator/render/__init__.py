"""Pure builders from a spec (or a catalog) to Kubernetes objects."""
