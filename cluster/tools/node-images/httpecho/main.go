// Command httpecho is the real node's test workload: an HTTP server that answers every request
// with the pod's name and IP (from the downward API), so a test can tell which pod answered and
// whether the answer came through the pod IP or a Service. GET /resolve?name=NAME answers the
// addresses NAME resolves to through the pod's own /etc/resolv.conf (the cluster DNS the kubelet
// gave it), one per line, or 502 with the resolver's error.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	addr := ":" + envOr("PORT", "8080")
	identity := fmt.Sprintf("pod=%s ip=%s\n", envOr("POD_NAME", "unknown"), envOr("POD_IP", "unknown"))
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, identity)
	})
	http.HandleFunc("/resolve", resolve)
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
		<-stop
		os.Exit(0)
	}()
	log.Printf("httpecho listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}

func resolve(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" || len(name) > 253 {
		http.Error(w, "give ?name= a DNS name of at most 253 characters", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	sort.Strings(addrs)
	_, _ = fmt.Fprintln(w, strings.Join(addrs, "\n"))
}

func envOr(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
