// Package shm implements intra-host message channels between two processes
// over a shared-memory file: one single-producer/single-consumer ring of
// length-framed messages per direction, futex wake-ups when a side sleeps,
// and peer-death detection by polling. See docs/shm.md for the layout and
// protocols.
//
// Typical use, in both ranks of a pair (the lower rank creates the file, the
// higher one opens it; both unlink it as soon as both have mapped it):
//
//	c, err := shm.Connect(ctx, jobID, myRank, peerRank, &shm.Options{Alive: checkCtl})
//	err = c.Send(ctx, envelope, userBuf)
//	n, err := c.Recv(ctx, func(n int) []byte { return dst[:n] })
//	c.Close()
package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors returned by the channel. Peer death and corruption are wrapped, so
// test them with errors.Is.
var (
	// ErrClosed: this side or the peer closed the channel (a receive still
	// returns messages that were completely sent before the peer closed).
	ErrClosed = errors.New("shm: channel closed")
	// ErrPeerDead: the liveness check failed while waiting for the peer.
	ErrPeerDead = errors.New("shm: peer is gone")
	// ErrCorrupt: the shared header or a frame is inconsistent; the channel is unusable.
	ErrCorrupt = errors.New("shm: corrupt shared memory")
	// ErrTruncated: the receive buffer was shorter than the message; the
	// message was consumed and its tail discarded (like MPI_ERR_TRUNCATE).
	ErrTruncated = errors.New("shm: message truncated")
	// ErrTooLarge: a message exceeds MaxMessage.
	ErrTooLarge = errors.New("shm: message too large")
	// ErrIdle: RecvSplitIdle's idle context ended before a message started.
	ErrIdle = errors.New("shm: idle wait ended")
	// ErrUnsupported: shared-memory channels need Linux (futexes).
	ErrUnsupported = errors.New("shm: shared-memory channels are only supported on Linux")
)

// MaxMessage is the largest message (header plus payload) a channel carries:
// the frame's length field is 48 bits.
const MaxMessage = 1<<48 - 1

// Defaults for Options.
const (
	DefaultRingSize = 1 << 20
	DefaultSpin     = 10 * time.Microsecond
	DefaultPoll     = 100 * time.Millisecond
	MinRingSize     = 4096
	MaxRingSize     = 1 << 30
)

// Options tune a channel; the zero value (or nil) picks the defaults.
type Options struct {
	// Dir holds the rendezvous file; default DefaultDir().
	Dir string
	// RingSize is the bytes of each direction's ring, a power of two in
	// [MinRingSize, MaxRingSize]; default DefaultRingSize. Only the creator's
	// value counts: the opener reads it from the header.
	RingSize int
	// Spin is how long a blocked call polls before sleeping on the futex;
	// default DefaultSpin, negative for no spinning.
	Spin time.Duration
	// Poll bounds each futex sleep; after each one the call checks Alive,
	// so a peer that died without closing is noticed within about Poll.
	// Default DefaultPoll.
	Poll time.Duration
	// Alive, if set, is called about every Poll while a call is blocked; a
	// non-nil result ends the call with an error wrapping ErrPeerDead. The
	// peer's pid (recorded in the header) is checked too, when both sides
	// share a pid namespace. Blocked Send and Recv may call it at the same
	// time, so it must be safe for concurrent use.
	Alive func() error
}

// DefaultDir is /dev/shm when it exists (a tmpfs, so the rings never touch a
// disk), else os.TempDir().
func DefaultDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

const filePrefix = "gompi-"

// Name is the rendezvous file name of the pair (a, b) in a job; the order of
// a and b does not matter.
func Name(jobID string, a, b int) string {
	if a > b {
		a, b = b, a
	}
	return fmt.Sprintf("%s%s-%d-%d", filePrefix, jobID, a, b)
}

func checkJobID(jobID string) error {
	if jobID == "" || len(jobID) > 128 || strings.ContainsAny(jobID, "/\x00") {
		return fmt.Errorf("shm: invalid job id %q", jobID)
	}
	return nil
}

// Sweep removes the rendezvous files of a job left behind by processes that
// died before both sides had mapped them (dir "" means DefaultDir()). It
// returns how many it removed.
func Sweep(dir, jobID string) (int, error) {
	if err := checkJobID(jobID); err != nil {
		return 0, err
	}
	if dir == "" {
		dir = DefaultDir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	prefix := filePrefix + jobID + "-"
	n := 0
	var first error
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		// Exactly "<a>-<b>" must remain, so that job "1" never sweeps the
		// files of job "1-2".
		if !ok || !isPair(rest) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return n, first
}

// JobBase turns a process manager's job id into the base of a runtime job
// id: characters other than [A-Za-z0-9_] become '_', at most 64 are kept,
// and "" becomes "job". The runtime names its files
// gompi-<JobBase(id)>.<key>-<a>-<b>, where key derives from the job secret
// (so strangers cannot predict the names); SweepJob removes them knowing
// only the id.
func JobBase(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "job"
	}
	return string(b)
}

// SweepJob removes every rendezvous file of a runtime job whose id is
// JobBase(id) plus any secret-derived key: gompi-<base>.<key>-<a>-<b>, key
// being letters and digits. A process manager calls it when all the job's
// local processes have exited (dir "" means DefaultDir()).
func SweepJob(dir, id string) (int, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	names, err := readNames(dir)
	if err != nil {
		return 0, err
	}
	prefix := filePrefix + JobBase(id) + "."
	n := 0
	var first error
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		key, pair, ok := strings.Cut(rest, "-")
		if !ok || key == "" || strings.Trim(key, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" || !isPair(pair) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return n, first
}

// readNames lists dir's names, unsorted: half the CPU of os.ReadDir, which
// sorts and builds an entry per file (sweeps run at every job's start and
// end, and /dev/shm may hold many files).
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func isPair(s string) bool {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(a, 10, 31)
	_, err2 := strconv.ParseUint(b, 10, 31)
	return err1 == nil && err2 == nil
}

func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Dir == "" {
		r.Dir = DefaultDir()
	}
	if r.RingSize == 0 {
		r.RingSize = DefaultRingSize
	}
	if r.RingSize < MinRingSize || r.RingSize > MaxRingSize || r.RingSize&(r.RingSize-1) != 0 ||
		r.RingSize > (int(^uint(0)>>1)-4096)/2 { // the file must fit in an int on 32-bit systems
		return r, fmt.Errorf("shm: ring size %d is not a power of two in [%d, %d]", r.RingSize, MinRingSize, MaxRingSize)
	}
	if r.Spin == 0 {
		r.Spin = DefaultSpin
	}
	if r.Poll <= 0 {
		r.Poll = DefaultPoll
	}
	return r, nil
}
