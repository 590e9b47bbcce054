package launcher

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Recording is a Proc that keeps the first error of its byte stream: a
// multiplexer over it (yamux) reports only that its session ended, the
// backend says why (an SSH keepalive timeout, a reset connection).
type Recording struct {
	Proc
	mu  sync.Mutex
	err error
}

func (p *Recording) Read(b []byte) (int, error) {
	n, err := p.Proc.Read(b)
	if err != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = err
		}
		p.mu.Unlock()
	}
	return n, err
}

// exitWait bounds how long Reason waits for the exit of a launcher whose
// stream ended cleanly. Having closed its output it is exiting; the bound
// only keeps a wedged one from holding up the caller.
var exitWait = 2 * time.Second

// Reason explains a lost stream: the transport's error when it has a
// better one than end-of-file, else sessErr with the exit status of the
// proxy or its launcher (an rsh agent that could not reach its host exits
// 3 after closing the stream: the end of the stream can reach us before
// its exit, so the exit is waited for).
func (p *Recording) Reason(sessErr error) error {
	p.mu.Lock()
	rerr := p.err
	p.mu.Unlock()
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		return rerr
	}
	done := make(chan error, 1)
	go func() { done <- p.Proc.Wait() }()
	select {
	case werr := <-done:
		if werr != nil {
			return fmt.Errorf("%w; gompi-proxy or its launcher: %v", sessErr, werr)
		}
	case <-time.After(exitWait):
	}
	return sessErr
}
