package mpiexec

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const banner = "==================================================================================="

// report prints the BAD TERMINATION summary for the first failing rank and,
// with -print-all-exitcodes, every rank's status.
func (j *job) report() {
	w := j.cfg.Stderr
	if j.firstFail >= 0 {
		r := j.ranks[j.firstFail]
		how := fmt.Sprintf("EXIT CODE: %d", r.code)
		if r.signal != 0 {
			how = fmt.Sprintf("KILLED BY SIGNAL: %d (%s)", r.signal, sigName(r.signal))
		}
		if r.failMsg != "" {
			how += " (" + r.failMsg + ")"
		}
		if j.abortMsg != "" {
			how = j.abortMsg
		}
		pid := fmt.Sprintf("PID %d", r.pid)
		if r.pid <= 0 {
			pid = "NOT STARTED" // its proxy could not start it
		}
		rest := "CLEANING UP REMAINING PROCESSES"
		if j.cfg.NoAutoCleanup && j.abortMsg == "" && !j.timedOut {
			rest = "THE OTHER PROCESSES WENT ON (-disable-auto-cleanup)"
		}
		fmt.Fprintf(w, "%s\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK %d (%s) RUNNING AT %s\n=   %s\n=   %s\n%s\n",
			banner, j.firstFail, pid, j.layout.Hosts[r.host].Name, how, rest, banner)
	}
	if !j.cfg.PrintAllExitCodes {
		return
	}
	for h, host := range j.layout.Hosts {
		var parts []string
		for _, rk := range j.layout.RanksOn(h) {
			parts = append(parts, fmt.Sprintf("%d:%s", rk, statusString(j.ranks[rk])))
		}
		fmt.Fprintf(w, "Exit codes: [%s] %s\n", host.Name, strings.Join(parts, ","))
	}
}

func statusString(r rankState) string {
	switch {
	case !r.exited:
		return "lost"
	case r.signal != 0:
		return "SIG" + strings.TrimPrefix(sigName(r.signal), "SIG")
	default:
		return fmt.Sprint(r.code)
	}
}

func sigName(sig int) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}

// prefixWriter prefixes every line written to w; used for proxy diagnostics.
func prefixWriter(w io.Writer, prefix string) io.Writer {
	return &lineprefix{w: w, prefix: prefix}
}

type lineprefix struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (l *lineprefix) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.w.Write(append([]byte(l.prefix), l.partial[:i+1]...))
		l.partial = l.partial[i+1:]
	}
	return len(b), nil
}
