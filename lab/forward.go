package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// StatusPageAddr is where a lab node's xlbd serves its metrics and status
// page, inside the node's namespace (xlbd's default metrics address).
const StatusPageAddr = "127.0.0.1:9469"

// ForwardTCP makes target, a TCP address inside host h's namespace,
// reachable from the namespace of the calling process at the returned
// address (127.0.0.1, a free port): each connection accepted there is
// relayed to a connection dialled from inside h. A browser on the machine
// opens a node's status page this way. It stops when the lab is destroyed.
func (l *Lab) ForwardTCP(h *Host, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	if !l.onDestroy(func() error {
		cancel()
		ln.Close()
		wg.Wait()
		return nil
	}) {
		cancel()
		ln.Close()
		return "", errors.New("lab destroyed")
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				relay(ctx, h.NS.DialContext, c, target)
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// relay copies between c and a connection to target that dial makes
// until either side closes or ctx ends.
func relay(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), c net.Conn, target string) {
	defer c.Close()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	up, err := dial(dctx, "tcp", target)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	for _, p := range [][2]net.Conn{{up, c}, {c, up}} {
		go func() {
			io.Copy(p[0], p[1])
			if tc, ok := p[0].(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			done <- struct{}{}
		}()
	}
	<-done
	<-done
}
