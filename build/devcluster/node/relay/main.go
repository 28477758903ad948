// Command relay forwards TCP connections from one address to another and
// answers "ok" on /healthz. The dev cluster's API server listens on loopback
// only, which a pod's network namespace cannot reach; the relay listens on
// the node's bridge address and forwards to it, so the `kubernetes` Service
// (whose EndpointSlice names the relay) works from pods as on any cluster.
// Bytes pass through unchanged: TLS is between the pod and the API server.
//
//	relay --listen 10.244.0.1:443 --to 127.0.0.1:6443 --health 127.0.0.1:PORT
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to accept connections on")
	to := flag.String("to", "", "address to forward each connection to")
	health := flag.String("health", "", "address of the /healthz endpoint")
	flag.Parse()
	if *listen == "" || *to == "" || *health == "" {
		log.Fatal("--listen, --to and --health are required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	go func() {
		log.Fatal((&http.Server{Addr: *health, Handler: mux, ReadHeaderTimeout: 5 * time.Second}).ListenAndServe())
	}()
	log.Printf("relaying %s -> %s", *listen, *to)
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Printf("accept: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go relay(conn, *to)
	}
}

// relay copies bytes both ways. When one side stops sending, the other
// side's write half is closed (a client may half-close after its request and
// still read the reply); both connections close once both directions end.
func relay(in net.Conn, to string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		log.Printf("dial %s: %v", to, err)
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
