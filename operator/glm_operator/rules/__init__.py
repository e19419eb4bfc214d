"""Known-issue rules: pure functions from a spec and the catalogs to findings."""
