package launcher

import (
	"errors"
	"io"
	"sync"
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

// Reason explains a lost stream: the transport's error when it has a
// better one than end-of-file, else sessErr.
func (p *Recording) Reason(sessErr error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil && !errors.Is(p.err, io.EOF) {
		return p.err
	}
	return sessErr
}
