//go:build tools

// Package tools pins the BuildKit commands this module builds (cluster/build-image-tools.sh), so that
// `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "github.com/moby/buildkit/cmd/buildctl"
	_ "github.com/moby/buildkit/cmd/buildkitd"
)
