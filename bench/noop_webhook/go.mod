module glmops.dev/bench/noopwebhook

go 1.26
