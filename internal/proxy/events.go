package proxy

import (
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/rankevent"
)

// eventWait bounds a write on a rank's event channel: a rank that does not
// read its events (a full pipe) loses the record rather than stalling the
// proxy.
const eventWait = 100 * time.Millisecond

// eventChannel gives the rank the read end of a pipe as an inherited
// descriptor named by GOMPI_EVENT_FD (docs/control.md, "Rank events") and
// keeps the write end. It returns the read end, which the caller closes
// once the rank has started.
func (p *proxy) eventChannel(r *rank, cmd *exec.Cmd) (*os.File, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, rd)
	cmd.Env = append(cmd.Env, rankevent.EnvFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	r.events = wr
	return rd, nil
}

// deliverEvent writes m's record on every local rank's event channel.
func (p *proxy) deliverEvent(m control.Msg) {
	rec, err := rankevent.Encode(rankevent.Event{T: m.Event, Seq: m.Seq})
	if err != nil {
		p.log.Debug("bad event", "event", m.Event, "err", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.ranks {
		if r.events == nil {
			continue
		}
		r.events.SetWriteDeadline(time.Now().Add(eventWait))
		if _, err := r.events.Write(rec); err != nil {
			p.log.Debug("event not delivered", "rank", r.spec.Rank, "err", err)
		}
	}
}

// closeEvents closes a rank's event channel once it has exited.
func (p *proxy) closeEvents(r *rank) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.events != nil {
		r.events.Close()
		r.events = nil
	}
}
