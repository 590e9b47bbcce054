package mpiexec

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// output reassembles rank output into whole lines so a line from one rank is
// never split by another's, and optionally prefixes each line with [rank].
type output struct {
	mu      sync.Mutex
	out     [3]io.Writer // index by fd: 1 stdout, 2 stderr
	prepend bool
	bufs    map[streamKey][]byte
	scratch []byte
}

type streamKey struct {
	rank int
	fd   byte
}

// maxPartial is how much of an unterminated line is held back before it is
// written anyway, so a rank printing megabytes without a newline still flows.
const maxPartial = 64 << 10

func newOutput(stdout, stderr io.Writer, prepend bool) *output {
	return &output{out: [3]io.Writer{nil, stdout, stderr}, prepend: prepend, bufs: map[streamKey][]byte{}}
}

func (o *output) write(rank int, fd byte, data []byte) {
	if fd != 1 && fd != 2 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	k := streamKey{rank, fd}
	pending := o.bufs[k]
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		pending = append(pending, data...)
		if len(pending) >= maxPartial {
			o.emit(rank, fd, pending)
			pending = pending[:0]
		}
		o.bufs[k] = pending
		return
	}
	if len(pending) > 0 {
		pending = append(pending, data[:last+1]...)
		o.emit(rank, fd, pending)
		pending = pending[:0]
	} else {
		o.emit(rank, fd, data[:last+1])
	}
	o.bufs[k] = append(pending, data[last+1:]...)
}

// emit writes whole lines (or a forced partial) in one Write call.
func (o *output) emit(rank int, fd byte, data []byte) {
	w := o.out[fd]
	if !o.prepend {
		w.Write(data)
		return
	}
	prefix := fmt.Appendf(nil, "[%d] ", rank)
	buf := o.scratch[:0]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line = data[:i+1]
		}
		buf = append(buf, prefix...)
		buf = append(buf, line...)
		data = data[len(line):]
	}
	w.Write(buf)
	o.scratch = buf[:0]
}

// flush writes what is left of a rank's unterminated lines (at its exit).
func (o *output) flush(rank int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for fd := byte(1); fd <= 2; fd++ {
		k := streamKey{rank, fd}
		if p := o.bufs[k]; len(p) > 0 {
			if o.prepend {
				p = append(p, '\n')
			}
			o.emit(rank, fd, p)
		}
		delete(o.bufs, k)
	}
}

func (o *output) flushAll() {
	o.mu.Lock()
	var ranks []int
	for k := range o.bufs {
		ranks = append(ranks, k.rank)
	}
	o.mu.Unlock()
	for _, r := range ranks {
		o.flush(r)
	}
}
