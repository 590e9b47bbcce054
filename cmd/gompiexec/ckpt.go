package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/mpiexec"
)

// Environment variables for ranks (package ckpt reads them; docs/ckpt.md).
const (
	envCkptPrefix   = "GOMPI_CKPT_PREFIX"
	envCkptInterval = "GOMPI_CKPT_INTERVAL"
	envCkptKeep     = "GOMPI_CKPT_KEEP"
	envCkptEpoch    = "GOMPI_CKPT_EPOCH"
	envCkptCache    = "GOMPI_CKPT_CACHE"
	envCkptPartner  = "GOMPI_CKPT_PARTNER"
	envRestart      = "GOMPI_RESTART" // the relaunch's number under -max-restarts
)

// checkpointConfig passes the -ckpoint-* options to the ranks and sets up
// -max-restarts.
func checkpointConfig(o *options, cfg *mpiexec.Config) error {
	cfg.Restart.MaxRestarts = o.maxRestarts
	prefix := o.ckptPrefix
	if prefix != "" {
		abs, err := filepath.Abs(prefix)
		if err != nil {
			return err
		}
		prefix = abs
		cfg.Restart.CheckpointSignal = true
		cfg.Env = append(cfg.Env, envCkptPrefix+"="+prefix)
		// One id for this run across its relaunches: a relaunch takes the
		// prefix's owner record of the failed launch over at once, even
		// when its rank 0 lands on another host (docs/ckpt.md).
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		cfg.Env = append(cfg.Env, layout.EnvLaunch+"="+hex.EncodeToString(id[:]))
		if o.ckptInterval > 0 {
			cfg.Env = append(cfg.Env, envCkptInterval+"="+strconv.FormatFloat(o.ckptInterval.Seconds(), 'f', -1, 64))
		}
		if o.ckptKeep > 0 {
			cfg.Env = append(cfg.Env, envCkptKeep+"="+strconv.Itoa(o.ckptKeep))
		}
		if o.ckptCache != "" {
			cache, err := filepath.Abs(o.ckptCache)
			if err != nil {
				return err
			}
			cfg.Env = append(cfg.Env, envCkptCache+"="+cache)
			if o.ckptPartner {
				cfg.Env = append(cfg.Env, envCkptPartner+"=1")
			}
		}
		if o.ckptNum > 0 {
			if o.ckptCache == "" {
				// Without caches the prefix is the whole truth: refuse an
				// epoch that is not there before starting anything.
				if _, err := layout.ReadManifest(prefix, o.ckptNum); err != nil {
					return usagef("-ckpoint-num %d: %v", o.ckptNum, err)
				}
			}
			cfg.Env = append(cfg.Env, envCkptEpoch+"="+strconv.Itoa(o.ckptNum))
		}
	}
	// The newest epoch before this run: a relaunch keeps -ckpoint-num
	// until the run has committed a newer one, rather than resuming from
	// an epoch of the timeline the user asked to leave.
	startNewest := -1
	if prefix != "" && o.ckptNum > 0 {
		startNewest = newestEpoch(prefix)
	}
	stderr := cfg.Stderr
	cfg.Restart.Before = func(attempt int, lost []string, code int, c *mpiexec.Config) error {
		why := fmt.Sprintf("the job failed (exit code %d)", code)
		if len(lost) > 0 {
			why = fmt.Sprintf("host %s was lost", strings.Join(lost, ", "))
		}
		from := "from the beginning (no -ckpoint-prefix)"
		if prefix != "" && o.ckptNum > 0 && newestEpoch(prefix) <= startNewest {
			from = fmt.Sprintf("from epoch %d (-ckpoint-num; this run committed no newer one in %s)", o.ckptNum, prefix)
		} else if prefix != "" {
			// A restart after a failure resumes from the newest epoch,
			// this run's, not the one -ckpoint-num named.
			c.Env = slices.DeleteFunc(slices.Clone(c.Env), func(kv string) bool {
				return strings.HasPrefix(kv, envCkptEpoch+"=")
			})
			if m, err := layout.Newest(prefix); err == nil {
				from = fmt.Sprintf("from the newest complete checkpoint (epoch %d in %s)", m.Epoch, prefix)
				if o.ckptCache != "" {
					from = fmt.Sprintf("from the newest complete checkpoint (epoch %d in %s, or a newer one in the node caches)", m.Epoch, prefix)
				}
			} else if o.ckptCache != "" {
				from = fmt.Sprintf("from the node caches' newest checkpoint, or from the beginning (no epoch committed in %s yet)", prefix)
			} else {
				from = fmt.Sprintf("from the beginning (no checkpoint in %s)", prefix)
			}
		}
		// Ranks can tell a relaunch from a first run (examples/heat's
		// -crash-at fires only in the first).
		c.Env = append(c.Env, envRestart+"="+strconv.Itoa(attempt))
		if stderr != nil {
			fmt.Fprintf(stderr, "gompiexec: %s; restart %d of %d %s\n", why, attempt, o.maxRestarts, from)
		}
		return nil
	}
	return nil
}

// newestEpoch is the newest committed epoch in prefix, -1 if none.
func newestEpoch(prefix string) int {
	if m, err := layout.Newest(prefix); err == nil {
		return m.Epoch
	}
	return -1
}

// ckptCommand is `gompiexec ckpt list|verify|rm PREFIX`.
func ckptCommand(w io.Writer, args []string) (int, error) {
	if len(args) < 2 {
		return 2, usagef("usage: gompiexec ckpt list|verify|rm [-keep K] [-all] PREFIX [EPOCH...]")
	}
	verb, rest := args[0], args[1:]
	keep, all := 0, false
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
		switch strings.TrimLeft(rest[0], "-") {
		case "keep":
			if len(rest) < 2 {
				return 2, usagef("ckpt rm -keep: needs a number")
			}
			n, err := intArg("keep", rest[1], 1)
			if err != nil {
				return 2, err
			}
			keep, rest = n, rest[2:]
		case "all":
			all, rest = true, rest[1:]
		default:
			return 2, usagef("ckpt %s: unknown option %s", verb, rest[0])
		}
	}
	if len(rest) == 0 {
		return 2, usagef("ckpt %s: no PREFIX given", verb)
	}
	prefix := rest[0]
	var epochs []int
	for _, a := range rest[1:] {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return 2, usagef("ckpt %s: epoch %q: want a number", verb, a)
		}
		epochs = append(epochs, n)
	}
	st, err := os.Stat(prefix)
	if err != nil {
		return 1, err
	}
	if !st.IsDir() {
		return 1, fmt.Errorf("%s: %w", prefix, layout.ErrBadPrefix)
	}
	eps, err := layout.List(prefix)
	if err != nil {
		return 1, err
	}
	chosen := func(e int) bool { return len(epochs) == 0 || slices.Contains(epochs, e) }
	switch verb {
	case "list", "ls":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "EPOCH\tSTATE\tRANKS\tSIZE\tSTEP\tTIME")
		for _, e := range eps {
			if !chosen(e.Epoch) {
				continue
			}
			switch {
			case e.Committed():
				m := e.Manifest
				fmt.Fprintf(tw, "%d\tcommitted\t%d\t%s\t%d\t%s\n", e.Epoch, m.Ranks, humanBytes(m.Size()), m.Step, m.Time.Format("2006-01-02 15:04:05"))
			case e.Err != nil:
				fmt.Fprintf(tw, "%d\tbad manifest\t-\t-\t-\t%v\n", e.Epoch, e.Err)
			default:
				fmt.Fprintf(tw, "%d\tincomplete\t-\t-\t-\t-\n", e.Epoch)
			}
		}
		tw.Flush()
		return 0, nil
	case "verify":
		code, restart := 0, -1
		for i := len(eps) - 1; i >= 0; i-- {
			e := eps[i]
			if !chosen(e.Epoch) {
				continue
			}
			if !e.Committed() {
				if e.Err != nil {
					fmt.Fprintf(w, "epoch %d: BAD: %v\n", e.Epoch, e.Err)
					code = 1
				} else {
					fmt.Fprintf(w, "epoch %d: incomplete (never committed; not used for restart)\n", e.Epoch)
				}
				continue
			}
			bad, err := layout.Verify(prefix, e.Epoch)
			if err != nil {
				return 1, err
			}
			if len(bad) == 0 {
				fmt.Fprintf(w, "epoch %d: ok (%d ranks, %s)\n", e.Epoch, e.Manifest.Ranks, humanBytes(e.Manifest.Size()))
				if restart < 0 {
					restart = e.Epoch
				}
				continue
			}
			code = 1
			fmt.Fprintf(w, "epoch %d: BAD\n", e.Epoch)
			for _, b := range bad {
				fmt.Fprintf(w, "  %v\n", b)
			}
		}
		if restart >= 0 {
			fmt.Fprintf(w, "a restart would resume from epoch %d\n", restart)
		} else {
			fmt.Fprintln(w, "no intact epoch: a restart would start from the beginning")
		}
		return code, nil
	case "rm":
		return ckptRemove(w, prefix, eps, epochs, keep, all)
	}
	return 2, usagef("ckpt: unknown command %q (list, verify, rm)", verb)
}

// ckptRemove deletes epochs: the ones named, or all (-all), or prunes to
// the newest K committed (-keep), or else the leftovers of interrupted
// checkpoints. The newest committed epoch goes only when named or -all.
func ckptRemove(w io.Writer, prefix string, eps []layout.Epoch, epochs []int, keep int, all bool) (int, error) {
	if len(epochs) > 0 && (all || keep > 0) {
		return 2, usagef("ckpt rm: give epochs, -all or -keep K, not several")
	}
	// A running job's epochs are not ours to remove: it would commit and
	// prune around the holes, or restart from an epoch just deleted.
	o, mod, err := layout.ReadOwner(prefix)
	switch {
	case err == nil && o.MayRun(mod, layout.DefaultOwnerStale):
		return 1, fmt.Errorf("ckpt rm: %s is in use by %s (its record %s was refreshed %s ago); stop that job first, or remove the record if the job is gone",
			prefix, o, filepath.Join(prefix, layout.PrefixOwnerFile), time.Since(mod).Round(time.Second))
	case err == nil && all:
		os.Remove(filepath.Join(prefix, layout.PrefixOwnerFile)) // a gone job's
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return 1, fmt.Errorf("ckpt rm: %w", err)
	}
	switch {
	case keep > 0:
		if err := layout.Prune(prefix, keep); err != nil {
			return 1, err
		}
		fmt.Fprintf(w, "kept the newest %d committed epochs of %s\n", keep, prefix)
		return 0, nil
	}
	newest := -1
	for _, e := range eps {
		if e.Committed() {
			newest = e.Epoch
		}
	}
	// Removing everything, or the newest epochs (a roll back): a new id
	// for the next job, whose nodes then remove their caches' copies
	// instead of restarting from them (docs/ckpt.md). Not for older
	// epochs: the caches may hold the only copies of newer ones.
	rollback, left := all, -1
	for _, e := range eps {
		if e.Committed() && !slices.Contains(epochs, e.Epoch) {
			left = e.Epoch
		}
	}
	for _, n := range epochs {
		// Only epochs that are there: a mistyped number must not cost
		// the caches their epochs.
		there := slices.ContainsFunc(eps, func(e layout.Epoch) bool { return e.Epoch == n })
		rollback = rollback || there && n > left
	}
	if rollback {
		if err := os.Remove(filepath.Join(prefix, layout.PrefixIDFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 1, fmt.Errorf("ckpt rm: %w", err)
		}
		if !all {
			fmt.Fprintf(w, "node caches (-ckpoint-cache) drop their copies of epochs newer than %d when the next job starts\n", left)
		}
	}
	removed := 0
	for _, e := range eps {
		del := all || slices.Contains(epochs, e.Epoch) ||
			(len(epochs) == 0 && !e.Committed() && e.Epoch < newest)
		if !del {
			continue
		}
		if err := layout.Remove(prefix, e.Epoch); err != nil {
			return 1, err
		}
		fmt.Fprintf(w, "removed epoch %d\n", e.Epoch)
		removed++
	}
	for _, n := range epochs {
		if !slices.ContainsFunc(eps, func(e layout.Epoch) bool { return e.Epoch == n }) {
			return 1, fmt.Errorf("ckpt rm: %s has no epoch %d", prefix, n)
		}
	}
	if removed == 0 {
		fmt.Fprintln(w, "nothing to remove (name epochs, or -all, or -keep K)")
	}
	return 0, nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
