module glmops.dev/cluster-tools/node-images

go 1.26.0
