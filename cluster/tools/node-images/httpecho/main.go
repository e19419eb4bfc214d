// Command httpecho is the real node's test workload: an HTTP server that answers every request
// with the pod's name and IP (from the downward API), so a test can tell which pod answered and
// whether the answer came through the pod IP or a Service.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	addr := ":" + envOr("PORT", "8080")
	identity := fmt.Sprintf("pod=%s ip=%s\n", envOr("POD_NAME", "unknown"), envOr("POD_IP", "unknown"))
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, identity)
	})
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
		<-stop
		os.Exit(0)
	}()
	log.Printf("httpecho listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}

func envOr(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
