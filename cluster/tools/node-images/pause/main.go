// Command pause is the real node's pod sandbox process: it holds the pod's namespaces open,
// reaps orphaned children (it is PID 1 when the pod shares its process namespace) and exits
// cleanly on SIGTERM or SIGINT. No registry is reachable here, so the node builds its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
