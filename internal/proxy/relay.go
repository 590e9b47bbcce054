package proxy

import (
	"os"

	"github.com/gompi/gompi/internal/launcher"
)

// relay forwards one output pipe of a rank, chunk by chunk; the launcher
// reassembles lines.
func (p *proxy) relay(r *rank, fd byte, f *os.File) {
	defer r.outputWG.Done()
	defer f.Close()
	relayPipe(f, func(b []byte) error { return p.conn.SendOutput(r.spec.Rank, fd, b, true) })
}

// relayChunk is the read size of an output pipe; relayBulk that of one
// that a read found half full or more (the rank prints faster than its
// output travels: reads of 64 KiB pipes averaged 55 KiB with 4 KB
// writes), whose pipe is grown to it too: fewer, larger frames, when every frame
// costs the same wake-ups, yamux send hand-off and write on the way.
// Output that comes in drops still goes out as it comes.
const (
	relayChunk = 64 << 10
	relayBulk  = 256 << 10
)

// relayPipe reads f to its end, handing each chunk to send, and stops
// early when send fails.
func relayPipe(f *os.File, send func([]byte) error) {
	buf := make([]byte, relayChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if send(buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			return
		}
		if n >= relayChunk/2 && len(buf) < relayBulk {
			launcher.GrowPipe(f, relayBulk)
			buf = make([]byte, relayBulk)
		}
	}
}
