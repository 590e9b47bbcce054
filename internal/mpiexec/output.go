package mpiexec

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// output writes the ranks' output to gompiexec's stdout and stderr.
//
// Without -l bytes are forwarded as they come, so a prompt or a progress
// bar shows at once; while one rank's line is unfinished on a stream,
// other ranks' output to that stream waits, so lines are not split by
// another rank's. A rank that sends none of its unfinished line for a tick
// (partialDelay to twice that) while others have output waiting loses the
// stream to them, and so does one holding back more than maxWaiting bytes
// of others' or holding them back for maxHeldTicks.
//
// With -l whole lines are written with a "[rank] " prefix; an unfinished
// line is written (prefixed) after a tick, and the rest of it follows
// without a prefix; when another rank's output has to break it, a newline
// ends it first.
//
// The first write error on a stream is reported through onErr once; that
// stream's output is dropped afterwards (the launcher ends the job).
type output struct {
	mu      sync.Mutex
	out     [3]io.Writer // index by fd: 1 stdout, 2 stderr
	prepend bool
	// prefix writes a line's prefix when prepend is set (-prepend-pattern);
	// nil is -l's "[rank] ".
	prefix   func(dst []byte, rank int) []byte
	pend     map[streamKey]*pending
	open     [3]int // rank whose line is unfinished on the stream, -1 none
	openAge  [3]int // ticks without its bytes the open line kept others waiting
	openHeld [3]int // ticks in all the open line kept others waiting
	err      [3]error
	onErr    func(fd byte, err error)
	timer    *time.Timer
	closed   bool
	scratch  []byte     // emit's lines with their prefixes
	pfx      []byte     // emit's prefix
	spare    []*pending // emptied ones, for reuse
	ranks    []int      // ranksPending's
}

type streamKey struct {
	rank int
	fd   byte
}

// pending is a rank's output not yet written to a stream.
type pending struct {
	buf  []byte
	age  int  // ticks its unfinished tail has waited
	done bool // the rank exited: its tail is written whole when its turn comes
}

// maxPartial is how much of an unterminated line is held back (-l) before
// it is written anyway.
const maxPartial = 64 << 10

// maxWaiting is how much output other ranks may queue behind an unfinished
// line before it is broken.
const maxWaiting = 1 << 20

// partialDelay is the tick at which unfinished lines are looked at.
const partialDelay = 100 * time.Millisecond

// maxHeldTicks bounds how long a line that keeps coming (a progress bar
// that never ends its line) holds others' output back: 2-4 s.
const maxHeldTicks = 20

func newOutput(stdout, stderr io.Writer, prepend bool) *output {
	return &output{out: [3]io.Writer{nil, stdout, stderr}, prepend: prepend,
		pend: map[streamKey]*pending{}, open: [3]int{-1, -1, -1}}
}

func (o *output) write(rank int, fd byte, data []byte) {
	if fd != 1 && fd != 2 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err[fd] != nil {
		return
	}
	k := streamKey{rank, fd}
	p := o.pend[k]
	if o.open[fd] == rank {
		// A line still coming is not stalled: only ticks without any of
		// it count against it (a long line on a loaded host takes many).
		o.openAge[fd] = 0
	}
	if p == nil && (o.open[fd] == rank || o.open[fd] < 0) {
		// The stream is this rank's or free and none of the rank's output
		// waits: what push would write goes out from data itself, and only
		// an unfinished line's tail (-l) is copied. A free stream has
		// nothing writable waiting (drain wrote it), so no other rank's
		// output is passed over. This is the path a rank printing a lot
		// takes: no copy, no allocation per chunk.
		data = o.writeNow(rank, fd, data)
		if len(data) == 0 {
			if len(o.pend) > 0 {
				o.drain(fd)
				o.arm()
			}
			return
		}
	}
	if p == nil {
		p = o.newPending()
		o.pend[k] = p
	}
	p.buf = append(p.buf, data...)
	o.drain(fd)
	o.arm()
}

// writeNow writes what push would of data, a rank's chunk on a stream that
// is free or the rank's own, and returns the rest (an unfinished line
// held back under -l).
func (o *output) writeNow(rank int, fd byte, data []byte) []byte {
	n := len(data)
	if o.prepend {
		n = bytes.LastIndexByte(data, '\n') + 1
		if len(data)-n >= maxPartial {
			n = len(data)
		}
	}
	if n == 0 {
		return data
	}
	o.emit(rank, fd, data[:n], o.open[fd] == rank)
	if data[n-1] == '\n' {
		o.open[fd], o.openAge[fd], o.openHeld[fd] = -1, 0, 0
	} else {
		o.open[fd] = rank
	}
	return data[n:]
}

// maxSpare bounds the buffers kept for reuse, so that a burst queued
// behind a held line does not stay allocated.
const maxSpare = 4

// newPending returns an empty pending, a reused one when there is one.
func (o *output) newPending() *pending {
	if n := len(o.spare); n > 0 {
		p := o.spare[n-1]
		o.spare = o.spare[:n-1]
		return p
	}
	return &pending{}
}

// release keeps an emptied pending for reuse unless enough are kept or
// its buffer is large.
func (o *output) release(p *pending) {
	if len(o.spare) < maxSpare && cap(p.buf) <= 4*maxWaiting {
		*p = pending{buf: p.buf[:0]}
		o.spare = append(o.spare, p)
	}
}

// drain writes what may be written on fd now.
func (o *output) drain(fd byte) {
	for {
		if r := o.open[fd]; r >= 0 {
			o.push(r, fd, false)
			if o.open[fd] >= 0 {
				if o.waiting(fd) > maxWaiting {
					o.breakOpen(fd)
					continue
				}
				return
			}
		}
		progress := false
		for _, r := range o.ranksPending(fd) {
			o.push(r, fd, false)
			progress = true
			if o.open[fd] >= 0 {
				break
			}
		}
		if !progress || o.open[fd] < 0 {
			return
		}
	}
}

// push writes rank's whole lines on fd and, without -l, once they are stale
// or long, or with force, its unfinished tail (which then holds the
// stream).
func (o *output) push(rank int, fd byte, force bool) {
	k := streamKey{rank, fd}
	p := o.pend[k]
	if p == nil || len(p.buf) == 0 {
		return
	}
	cont := o.open[fd] == rank
	n := bytes.LastIndexByte(p.buf, '\n') + 1
	if force || p.done || !o.prepend || p.age > 1 || len(p.buf)-n >= maxPartial {
		n = len(p.buf)
	}
	if n == 0 {
		return
	}
	o.emit(rank, fd, p.buf[:n], cont)
	if p.buf[n-1] == '\n' || p.done {
		o.open[fd], o.openAge[fd], o.openHeld[fd] = -1, 0, 0
	} else {
		o.open[fd] = rank
	}
	rest := copy(p.buf, p.buf[n:])
	p.buf, p.age = p.buf[:rest], 0
	if rest == 0 {
		delete(o.pend, k)
		o.release(p)
	}
}

// breakOpen gives the stream up from the rank whose line is unfinished.
func (o *output) breakOpen(fd byte) {
	if o.prepend {
		o.writeOut(fd, []byte{'\n'})
	}
	o.open[fd], o.openAge[fd], o.openHeld[fd] = -1, 0, 0
}

// waiting is how many bytes ranks other than the open one have queued.
func (o *output) waiting(fd byte) int {
	n := 0
	for k, p := range o.pend {
		if k.fd == fd && k.rank != o.open[fd] {
			n += len(p.buf)
		}
	}
	return n
}

// ranksPending lists the ranks with output waiting on fd, in order; the
// slice is reused by the next call.
func (o *output) ranksPending(fd byte) []int {
	rs := o.ranks[:0]
	for k, p := range o.pend {
		if k.fd == fd && len(p.buf) > 0 {
			rs = append(rs, k.rank)
		}
	}
	slices.Sort(rs)
	o.ranks = rs
	return rs
}

// arm starts the tick when something waits.
func (o *output) arm() {
	if o.timer != nil || o.closed || len(o.pend) == 0 {
		return
	}
	o.timer = time.AfterFunc(partialDelay, o.tick)
}

// tick ages what waits: unfinished tails (-l) seen at two ticks are
// written, and an open line that kept others waiting is broken.
func (o *output) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timer = nil
	if o.closed {
		return
	}
	for fd := byte(1); fd <= 2; fd++ {
		if o.err[fd] != nil {
			continue
		}
		if o.open[fd] >= 0 && o.waiting(fd) > 0 {
			o.openAge[fd]++
			o.openHeld[fd]++
			if o.openAge[fd] > 1 || o.openHeld[fd] > maxHeldTicks {
				o.breakOpen(fd)
			}
		}
		for k, p := range o.pend {
			if k.fd == fd && len(p.buf) > 0 {
				p.age++
			}
		}
		o.drain(fd)
	}
	o.arm()
}

// emit writes data of rank in one Write call; with -l each line gets a
// prefix, except the first when it continues the rank's unfinished line.
func (o *output) emit(rank int, fd byte, data []byte, cont bool) {
	if !o.prepend {
		o.writeOut(fd, data)
		return
	}
	if o.prefix != nil {
		o.pfx = o.prefix(o.pfx[:0], rank)
	} else {
		o.pfx = append(strconv.AppendInt(append(o.pfx[:0], '['), int64(rank), 10), "] "...)
	}
	prefix := o.pfx
	buf := o.scratch[:0]
	for first := true; len(data) > 0; first = false {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line = data[:i+1]
		}
		if !(first && cont) {
			buf = append(buf, prefix...)
		}
		buf = append(buf, line...)
		data = data[len(line):]
	}
	o.writeOut(fd, buf)
	o.scratch = buf[:0]
}

func (o *output) writeOut(fd byte, b []byte) {
	if o.err[fd] != nil {
		return
	}
	if _, err := o.out[fd].Write(b); err != nil {
		o.err[fd] = err
		for k := range o.pend {
			if k.fd == fd {
				delete(o.pend, k)
			}
		}
		if o.onErr != nil {
			o.onErr(fd, err)
		}
	}
}

// flush writes what is left of a rank's output (at its exit): it cannot
// finish its line any more, so waiting for it is pointless. While another
// rank's line holds the stream, the rest waits for it (a rank's exit is no
// reason to split another's line; the tick still breaks a stalled one).
func (o *output) flush(rank int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flushLocked(rank, false)
}

// flushLocked is flush; final (the job's end) writes even past another
// rank's unfinished line.
func (o *output) flushLocked(rank int, final bool) {
	for fd := byte(1); fd <= 2; fd++ {
		k := streamKey{rank, fd}
		p := o.pend[k]
		if p != nil && len(p.buf) > 0 && o.prepend && p.buf[len(p.buf)-1] != '\n' {
			p.buf = append(p.buf, '\n')
		}
		if o.open[fd] >= 0 && o.open[fd] != rank && p != nil && len(p.buf) > 0 {
			if !final {
				p.done = true
				continue
			}
			o.breakOpen(fd)
		}
		if p != nil && len(p.buf) > 0 {
			o.push(rank, fd, true)
		} else if o.open[fd] == rank && o.prepend {
			o.writeOut(fd, []byte{'\n'})
		}
		delete(o.pend, k)
		if o.open[fd] == rank {
			o.open[fd], o.openAge[fd], o.openHeld[fd] = -1, 0, 0
		}
		o.drain(fd)
	}
}

// flushAll writes everything left and stops the tick.
func (o *output) flushAll() {
	o.mu.Lock()
	// The ranks holding a stream first, so their lines end whole.
	var ranks []int
	for fd := range o.open {
		if o.open[fd] >= 0 {
			ranks = append(ranks, o.open[fd])
		}
	}
	var rest []int
	for k := range o.pend {
		rest = append(rest, k.rank)
	}
	slices.Sort(rest)
	for _, r := range append(ranks, rest...) {
		o.flushLocked(r, true)
	}
	o.closed = true
	if o.timer != nil {
		o.timer.Stop()
	}
	o.mu.Unlock()
}
