// Command noopwebhook answers every AdmissionReview "allowed" at once, over TLS: the floor of what any
// webhook costs the API server on a machine (bench/admission.py, mode `noop`). Standard library only.
//
// Usage: noopwebhook -addr 127.0.0.1:PORT -cert webhook.crt -key webhook.key
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response *response `json:"response,omitempty"`
}

type response struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func answer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in review
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: in.APIVersion, Kind: "AdmissionReview", Response: &response{UID: in.Request.UID, Allowed: true}}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		log.Printf("write: %v", err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:19743", "listen address")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()
	http.HandleFunc("/", answer)
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, nil))
}
