"""glmctl: the operator's checks and renderers, usable outside a cluster."""
