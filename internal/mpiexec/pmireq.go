package mpiexec

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/pmi/nameserver"
)

// PMI requests that reach the launcher: the name service, and -profile's
// count of them all.

// nameService answers a rank's MPI_Publish_name, MPI_Unpublish_name or
// MPI_Lookup_name, which its proxy forwards: from the job's own names, or
// through the -nameserver shared with other jobs.
func (j *job) nameService(host int, m control.Msg) {
	reply := control.Msg{T: control.MsgNameReply, Host: host, ReqID: m.ReqID}
	out := &j.tops[j.hosts[host].top].out
	if j.cfg.Nameserver != "" {
		// Off the supervision loop: the server may be slow or away.
		go func() { out.push(j.externalName(reply, m)) }()
		return
	}
	var err error
	switch m.Op {
	case "publish":
		err = j.kvs.Publish(m.Service, m.Port)
	case "unpublish":
		err = j.kvs.Unpublish(m.Service)
	case "lookup":
		reply.Port, err = j.kvs.Lookup(m.Service)
	default:
		err = fmt.Errorf("unknown name-service operation %q", m.Op)
	}
	if err != nil {
		reply.Error = err.Error()
	}
	out.push(reply)
}

// externalName answers a name-service request through the -nameserver.
func (j *job) externalName(reply, m control.Msg) control.Msg {
	c := &nameserver.Client{Addr: j.cfg.Nameserver}
	var err error
	switch m.Op {
	case "publish":
		err = c.Publish(j.ctx, m.Service, m.Port)
	case "unpublish":
		err = c.Unpublish(j.ctx, m.Service)
	case "lookup":
		reply.Port, err = c.Lookup(j.ctx, m.Service)
	default:
		err = fmt.Errorf("unknown name-service operation %q", m.Op)
	}
	if err != nil {
		reply.Error = err.Error()
		// The rank's MPI call fails either way; a server that cannot be
		// reached is the user's to fix, so say so here too.
		if !errors.Is(err, nameserver.ErrExists) && !errors.Is(err, nameserver.ErrNotFound) {
			fmt.Fprintf(j.cfg.Stderr, "gompiexec: -nameserver: %s %q: %v\n", m.Op, m.Service, err)
		}
	}
	return reply
}

// printProfile prints -profile's report after the job's own output, in
// Hydra's words (scripts grep for them).
func (j *job) printProfile() {
	host, _ := os.Hostname()
	bar := strings.Repeat("=", 80)
	fmt.Fprintf(j.cfg.Stdout, "\n%s\n[gompiexec@%s] Number of PMI calls seen by the server: %d\n%s\n\n", bar, host, j.pmiCalls, bar)
}
