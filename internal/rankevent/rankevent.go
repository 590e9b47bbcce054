// Package rankevent is the proxy→rank event channel (docs/control.md, "Rank
// events"): each rank inherits the read end of a pipe, named by
// GOMPI_EVENT_FD, on which its proxy writes one JSON record per line.
// Events are hints a rank may act on (a checkpoint request, later a peer's
// exit); a rank that never reads them loses nothing but the hints.
package rankevent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// EnvFD names the inherited descriptor in a rank's environment.
const EnvFD = "GOMPI_EVENT_FD"

// MaxRecord bounds one record (its line, newline included).
const MaxRecord = 4096

// Event kinds.
const (
	// Checkpoint: the user asked for a checkpoint (SIGUSR1 to gompiexec).
	// Seq counts requests within the job.
	Checkpoint = "checkpoint"
)

// ErrBadRecord wraps every decoding error.
var ErrBadRecord = errors.New("rankevent: bad record")

// Event is one record. Receivers ignore kinds and fields they do not know.
type Event struct {
	T    string `json:"t"`
	Seq  int64  `json:"seq,omitempty"`
	Rank int    `json:"rank,omitempty"`
	Info string `json:"info,omitempty"`
}

// Encode is ev's record: JSON and a newline.
func Encode(ev Event) ([]byte, error) {
	if ev.T == "" {
		return nil, fmt.Errorf("%w: no kind", ErrBadRecord)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if len(b) > MaxRecord {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadRecord, len(b), MaxRecord)
	}
	return b, nil
}

// Decode parses one record (without its newline).
func Decode(line []byte) (Event, error) {
	var ev Event
	if len(line) > MaxRecord {
		return ev, fmt.Errorf("%w: %d bytes, limit %d", ErrBadRecord, len(line), MaxRecord)
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if ev.T == "" {
		return ev, fmt.Errorf("%w: no kind", ErrBadRecord)
	}
	return ev, nil
}

// Reader reads records from the channel.
type Reader struct{ br *bufio.Reader }

// NewReader reads records from r.
func NewReader(r io.Reader) *Reader { return &Reader{br: bufio.NewReaderSize(r, MaxRecord)} }

// Next returns the next record; io.EOF when the proxy closed the channel.
// A bad record is returned as an error wrapping ErrBadRecord; reading may
// go on after it.
func (r *Reader) Next() (Event, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Skip the rest of an oversized line.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = r.br.ReadSlice('\n')
		}
		if err == nil {
			return Event{}, fmt.Errorf("%w: longer than %d bytes", ErrBadRecord, MaxRecord)
		}
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return Event{}, fmt.Errorf("%w: truncated record", ErrBadRecord)
		}
		return Event{}, err
	}
	return Decode(line[:len(line)-1])
}

var (
	subMu   sync.Mutex
	subs    []chan Event
	started bool
)

// Subscribe returns a channel receiving every event of this process's
// channel (GOMPI_EVENT_FD), or nil when the process has none. One reader
// serves every subscriber; a subscriber that does not keep up loses events
// (the channel holds 16), never blocks the others.
func Subscribe() <-chan Event {
	subMu.Lock()
	defer subMu.Unlock()
	if !started {
		started = true
		f := openFromEnv()
		if f == nil {
			return nil
		}
		go fanOut(NewReader(f))
	}
	ch := make(chan Event, 16)
	subs = append(subs, ch)
	return ch
}

func openFromEnv() *os.File {
	v := os.Getenv(EnvFD)
	if v == "" {
		return nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	return os.NewFile(uintptr(fd), "gompi-events")
}

func fanOut(r *Reader) {
	for {
		ev, err := r.Next()
		if errors.Is(err, ErrBadRecord) {
			continue
		}
		if err != nil {
			return
		}
		subMu.Lock()
		for _, ch := range subs {
			select {
			case ch <- ev:
			default:
			}
		}
		subMu.Unlock()
	}
}
