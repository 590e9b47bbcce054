package mpiexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/rankevent"
)

// RestartConfig is the launcher's side of checkpoint/restart. What a
// checkpoint is, and which one to resume from, is the caller's business
// (gompiexec uses ckpt/layout): this package only relaunches.
type RestartConfig struct {
	// CheckpointSignal turns SIGUSR1 to gompiexec into a checkpoint
	// request on every rank's event channel instead of a signal.
	CheckpointSignal bool
	// MaxRestarts relaunches a job whose rank or host failed, up to this
	// many times, on the hosts that are left (placement recomputed). Not
	// after a timeout or a signal from the user.
	MaxRestarts int
	// Before, when set, runs before each relaunch: attempt counts from 1,
	// lost names the hosts dropped, code is the failed attempt's exit
	// code. It may change cfg (the ranks' environment); an error stops
	// the restarts and is returned by Run.
	Before func(attempt int, lost []string, code int, cfg *Config) error
}

// outcome is what the restart loop needs to know of an attempt.
type outcome struct {
	lost []string // hosts whose proxy was lost with ranks on it
	user bool     // ended by the user's signal
}

// ErrNoHostsLeft: every host of the job was lost.
var ErrNoHostsLeft = errors.New("no hosts left to restart on")

// Run runs a job to completion and returns gompiexec's exit code. An error
// means the job could not be set up; nothing of it is left running. With
// Restart.MaxRestarts, a failed job is relaunched.
func Run(ctx context.Context, cfg Config) (int, error) {
	if cfg.Output.routed() {
		cfg.files = map[string]*os.File{}
		defer func() {
			errw := cfg.Stderr
			if errw == nil {
				errw = io.Discard
			}
			closeFiles(cfg.files, errw)
		}()
	}
	for attempt := 0; ; attempt++ {
		out := &outcome{}
		cfg.outcome = out
		code, err := runOnce(ctx, cfg)
		if err != nil || code == 0 || code == ExitTimeout || out.user || ctx.Err() != nil ||
			attempt >= cfg.Restart.MaxRestarts {
			return code, err
		}
		if len(out.lost) > 0 {
			cfg.Hosts = slices.DeleteFunc(slices.Clone(cfg.Hosts), func(h hostfile.Host) bool {
				return slices.Contains(out.lost, h.Name)
			})
			if len(cfg.Hosts) == 0 {
				return code, fmt.Errorf("restart %d: %w (lost %v)", attempt+1, ErrNoHostsLeft, out.lost)
			}
		}
		if cfg.Restart.Before != nil {
			if err := cfg.Restart.Before(attempt+1, out.lost, code, &cfg); err != nil {
				return code, err
			}
		}
	}
}

// checkpointRequest turns SIGUSR1 into a checkpoint event when
// checkpointing is on; it reports whether it did.
func (j *job) checkpointRequest(s syscall.Signal) bool {
	if s != syscall.SIGUSR1 || !j.cfg.Restart.CheckpointSignal {
		return false
	}
	j.ckptSeq++
	j.cfg.Log.Debug("checkpoint requested", "seq", j.ckptSeq)
	j.broadcast(control.Msg{T: control.MsgEvent, Event: rankevent.Checkpoint, Seq: j.ckptSeq})
	return true
}

// userSignal notes that the user asked the job to end: no restart then.
func (j *job) userSignal(s syscall.Signal) {
	if j.cfg.outcome != nil && (s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT) {
		j.cfg.outcome.user = true
	}
}

func (j *job) hostLost(host int) {
	if j.cfg.outcome != nil {
		j.cfg.outcome.lost = append(j.cfg.outcome.lost, j.hosts[host].name)
	}
}
